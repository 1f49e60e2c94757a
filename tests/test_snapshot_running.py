"""The builder's running views: made once per start, found again by identity, in the snapshot's order."""

import random

from lyasched.policy.snapshot import ClusterSnapshot, RunningObs, SlotStateBuilder
from lyasched.policy.state import Capabilities


def _obs(i: int) -> RunningObs:
    return RunningObs(f"j{i}", ((i % 7, 1 + i % 3),), float(i), 100.0 + i, 500.0 if i % 2 else float("inf"), 0.0, f"u{i % 4}")


def test_running_views_are_kept_per_start_and_follow_the_snapshot_order():
    rng = random.Random(3)
    builder = SlotStateBuilder(Capabilities())
    fresh = SlotStateBuilder(Capabilities())
    running: list[RunningObs] = []
    seen: dict[str, object] = {}  # job id -> the view first made of it
    nxt = 0
    for slot in range(3200):  # enough starts that the builder drops the views of jobs gone
        while len(running) > 40:
            running.pop(rng.randrange(len(running)))
        for _ in range(rng.randint(0, 3)):
            running.insert(rng.randrange(len(running) + 1), _obs(nxt))
            nxt += 1
        snap = ClusterSnapshot(now=30.0 * slot, slot_len=30.0, nodes=(), free=(), gpus_per_node=8, waiting=(),
                               running=tuple(running))
        views = builder.build(snap).running
        assert [v.job_id for v in views] == [o.job_id for o in running]
        for o, v in zip(running, views):
            if seen.setdefault(o.job_id, v) is v:  # the same object while the job runs
                assert v == fresh.running_job(o, o.start_time, 30.0)  # what a fresh builder makes of it
            else:
                raise AssertionError(f"{o.job_id}: a new view while it runs")
    assert nxt > 4096 + 4 * len(running)
