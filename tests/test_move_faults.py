"""SIGKILLs of an `elastic` service during moves, on the real cluster (tests/reliability/moves.py,
small size; benchmarks/reliability.py runs 12)."""

from __future__ import annotations

import pytest

from conftest import CLUSTER_KIND

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(CLUSTER_KIND != "native", reason="native cluster only")]


def test_kills_during_moves_lose_nothing():
    from reliability.moves import run_move_kills

    r = run_move_kills(3)
    assert r["kills_survived"] == r["kills_tried"] >= 3, r["failures"]
    assert r["jobs_lost"] == 0 and r["jobs_duplicated"] == 0 and r["jobs_held_forever"] == 0, r
    assert r["steps_lost_beyond_checkpoint"] == 0 and r["moves_left_open"] == 0 and r["db_problems"] == [], r
    assert r["relaunches"] > 0, r  # some job was moved and resumed
