"""Unit tests of the reliability runner's own arithmetic (tests/reliability/run.py, the figures of
benchmarks/reliability.py): how suites run per Slurm backend are merged into one set of figures.
No cluster needed."""

from __future__ import annotations

from reliability import run

SIZES = run.FULL


def _suites(lost: int = 0) -> dict:
    return {"kills": {"kills_tried": 20, "kills_survived": 20, "jobs_lost": lost, "jobs_duplicated": 0},
            "outage": {"outages_survived": 1, "jobs_lost": 0, "jobs_duplicated": 0},
            "flaky": {"jobs_lost": 0, "jobs_duplicated": 0},
            "minjobage": {"jobs_lost": 0}}


MOVES = {"kills_tried": 16, "kills_survived": 16, "kills_during_moves": 12, "jobs_lost": 0, "jobs_duplicated": 0,
         "steps_lost_beyond_checkpoint": 0}


def test_a_suite_run_for_the_cli_backend_only_keeps_its_figures_with_both_backends():
    # `--backend cli,pyslurm` runs the moves suite for cli only; its figures used to come out null
    by_backend = {"cli": {**_suites(), "moves": MOVES}, "pyslurm": _suites()}
    merged = run.merge_faults(by_backend)
    assert merged["moves"] == MOVES
    assert list(merged) == ["kills", "outage", "flaky", "minjobage", "moves"]
    f = run.figures(merged, None, None, None, SIZES)
    assert (f["kills_tried"], f["kills_survived"], f["outages_survived"]) == (40, 40, 2)
    assert (f["kills_during_moves"], f["move_kills_tried"], f["move_kills_survived"]) == (12, 16, 16)
    assert f["steps_lost_beyond_checkpoint"] == 0
    assert (f["jobs_lost"], f["jobs_duplicated"]) == (0, 0)


def test_with_both_backends_a_moves_loss_counts_in_the_totals():
    lossy = {**MOVES, "jobs_lost": 1, "steps_lost_beyond_checkpoint": 3}
    f = run.figures(run.merge_faults({"cli": {**_suites(), "moves": lossy}, "pyslurm": _suites(lost=2)}),
                    None, None, None, SIZES)
    assert f["jobs_lost"] == 3 and f["steps_lost_beyond_checkpoint"] == 3


def test_a_suite_that_failed_on_one_backend_gives_null_figures():
    merged = run.merge_faults({"cli": {**_suites(), "moves": None}, "pyslurm": {**_suites(), "kills": None}})
    assert merged["moves"] is None and merged["kills"] is None
    f = run.figures(merged, None, None, None, SIZES)
    assert f["kills_tried"] is None and f["kills_during_moves"] is None
    assert f["outages_survived"] == 2


def test_one_backend_is_taken_as_it_is():
    suites = {**_suites(), "moves": MOVES}
    assert run.merge_faults({"cli": suites}) is suites
    assert run.merge_faults({}) == {}
