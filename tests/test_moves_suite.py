"""Unit tests of the moves suite's own plan and counting (tests/reliability/moves.py): a suite that
miscounted would report a lost step or a double run as fine. No cluster needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from reliability import moves


def test_plan_reaches_every_point_in_both_scenarios_with_externals():
    plan = moves.plan_kills(12)
    named = [p for p in plan if p[0] != "external"]
    assert len(named) == 12 and sum(p[0] == "external" for p in plan) == 4
    for point in moves.POINTS:
        assert sum(p[0] == point for p in named) == 3
        assert {s for p, s in named if p == point} == {"grow", "shrink"}
    assert [p for p in moves.plan_kills(4, ("grow",)) if p[0] != "external"] == [(p, "grow") for p in moves.POINTS]


def test_killed_move_reads_the_one_open_move_at_the_points_step():
    rows = [{"kind": "grow", "step": "signalled"}, {"kind": "shrink", "step": "requeued"}]
    assert moves.killed_move("move_after_signal", rows) == "grow"
    assert moves.killed_move("move_after_requeue", rows) == "shrink"
    assert moves.killed_move("move_after_resize", rows) == "?"  # none at that step
    assert moves.killed_move("move_after_signal", rows + [{"kind": "shrink", "step": "signalled"}]) == "?"
    kills = [{"point": "move_after_signal", "killed_move": "grow"}, {"point": "external", "killed_move": ""},
             {"point": "move_after_signal(not reached, external)", "killed_move": ""}]
    assert moves.by_kind(kills) == {"grow:move_after_signal": 1}


def _bed(tmp_path: Path) -> moves.MoveBed:
    """A MoveBed's bookkeeping only (its constructor asks the cluster)."""
    bed = object.__new__(moves.MoveBed)
    bed.dir, bed.user, bed.steps, bed.dt = tmp_path, "root", 10, 0.5
    bed.targets = {}
    (tmp_path / "runs").mkdir()
    return bed


def _runs(bed: moves.MoveBed, job: str, lines: list[str], lasts: list[int]) -> None:
    (bed.dir / "runs" / job).write_text("".join(line + "\n" for line in lines))
    for k, last in enumerate(lasts):
        (bed.dir / "runs" / f"{job}.{k}.last").write_text(f"{last}\n")


def test_audit_counts_steps_lost_beyond_the_checkpoint_and_double_runs(tmp_path):
    bed = _bed(tmp_path)
    me = os.getuid()
    # checkpointed at step 4, resumed at 5, finished: nothing lost
    _runs(bed, "1", [f"start 1 0 1 {me}", "ckpt 2 4", f"start 3 5 1 {me}", "done 4 9"], [4, 9])
    assert bed.audit("1") == {"runs": 2, "lost_steps": 0, "overlap": 0, "done": 1, "checkpoints": 1, "other_uid": 0}
    # the first run went on to step 6 after a checkpoint at 4 (killed without a new one): 2 steps lost
    _runs(bed, "2", [f"start 1 0 1 {me}", "ckpt 2 4", f"start 3 5 1 {me}", "done 4 9"], [6, 9])
    assert bed.audit("2")["lost_steps"] == 2
    # a second start before the first run ended: a duplicate; not every step done
    _runs(bed, "3", [f"start 1 0 1 {me}", f"start 2 0 1 {me}", "done 3 8"], [8, 8])
    a = bed.audit("3")
    assert a["overlap"] == 1 and a["done"] == 0
    # a run made as another uid
    _runs(bed, "4", [f"start 1 0 1 {me + 1}", "done 2 9"], [9])
    assert bed.audit("4")["other_uid"] == 1
    # a job's own step count (the short arrivals)
    bed.targets["5"] = 4
    _runs(bed, "5", [f"start 1 0 1 {me}", "done 2 3"], [3])
    assert bed.audit("5")["done"] == 1
    assert bed.step_now("5") == 3 and bed.step_now("missing") == -1
    # relaunched from step 40, no step done yet in this run: 39 done, not "none"
    _runs(bed, "6", [f"start 1 0 1 {me}", "ckpt 2 39", f"start 3 40 1 {me}"], [39])
    assert bed.step_now("6") == 39


@pytest.mark.parametrize("point", moves.POINTS)
def test_every_point_is_a_crash_point_of_the_service(point):
    from lyasched.live.crash import CRASH_POINTS

    assert point in CRASH_POINTS and point in moves.STEP_AT
