"""Typed records (lyasched.store.jobrecord) and the one placement shape (lyasched.store.placement):
every form a placement takes converts to NodePlacement and back, and a job row written by the
records functions reads back as the same typed values."""

from __future__ import annotations

import math

import pytest

from lyasched.store import jobrecord, records
from lyasched.store.jobrecord import DecisionRecord, JobRecord, decode_times, encode_times
from lyasched.store.placement import NodePlacement, nodes_from_json, nodes_to_json
from lyasched.summary import CostSummary

NAMES = ["node1", "node2", "node3"]


def test_placement_forms_round_trip() -> None:
    p = NodePlacement.from_indices(((0, 2), (2, 2)), NAMES)
    assert p.parts == (("node1", 2), ("node3", 2))
    assert p.to_indices({n: i for i, n in enumerate(NAMES)}) == ((0, 2), (2, 2))
    assert NodePlacement.from_json(p.to_json()) == p
    assert p.to_json() == '[["node1", 2], ["node3", 2]]'  # the records' text form, unchanged
    assert p.hostlist() == "node1,node3"  # what ReqNodeList= gets (a plain list is a hostlist)
    assert NodePlacement.from_hostlist("node[1,3]", 2) == p == NodePlacement.from_slurm(("node1", "node3"), 2)
    assert (p.nodes, p.gpus, p.per_node) == (("node1", "node3"), 4, 2)


def test_nodes_column_codec() -> None:
    """The records' ``nodes`` column (node names alone) has one writer and one reader."""
    assert nodes_to_json(("node1", "node3")) == '["node1", "node3"]' == nodes_to_json(["node1", "node3"])
    assert nodes_from_json('["node1", "node3"]') == ("node1", "node3")
    assert nodes_from_json(None) == nodes_from_json("") == () and nodes_to_json(()) == "[]"


def test_placement_rules() -> None:
    uneven = NodePlacement((("node1", 4), ("node2", 2)))
    assert uneven.per_node is None  # Slurm cannot express it (TresPerNode is one count)
    assert uneven.to_indices({"node2": 0}) == ((0, 2),)  # a node the slot no longer has is left out
    assert not NodePlacement.from_json(None) and not NodePlacement.from_json("")
    with pytest.raises(ValueError):
        NodePlacement((("node1", 1), ("node1", 1)))
    with pytest.raises(ValueError):
        NodePlacement((("node1", 0),))


def test_times_codec() -> None:
    row = (10.0, math.inf, 3.14159)
    assert encode_times(row) == "[10.0, null, 3.142]"
    assert decode_times(encode_times(row)) == (10.0, math.inf, 3.142)
    assert decode_times(None) == ()


def _summary() -> CostSummary:
    return CostSummary(uid="rec0000000001", sig="mlp:test", global_batch=8, iterations=100, min_gpus=1, max_gpus=4,
                       alpha=0.01, beta=0.002, params=1_000_000)


def test_job_record_reads_what_the_records_wrote(tmp_path) -> None:
    db = records.open_records(tmp_path / "s.db")
    s = _summary()
    records.upsert_job(db, s.uid, slurm_id="42", user="lyatest", summary=s.encode(), sig=s.sig, state="running",
                       gpus=4, nodes='["node1", "node2"]', placement='[["node1", 2], ["node2", 2]]',
                       pred_one=encode_times([100.0, 60.0, math.inf]), pred_multi=encode_times([]),
                       predicted=None, submit_time=1.0)
    rec = jobrecord.job_by_slurm_id(db, "42")
    assert rec is not None and rec == jobrecord.job(db, s.uid) == jobrecord.jobs(db, user="lyatest")[0]
    assert rec.nodes == ("node1", "node2") and rec.placement.per_node == 2
    assert rec.pred_one == (100.0, 60.0, math.inf) and rec.best_predicted == 60.0
    assert rec.cost_summary() == s
    # and back: the row it gives is what was written (JSON in the same text form)
    again = JobRecord.from_row(rec.to_row())
    assert again == rec
    assert JobRecord(uid="x", summary="lyasched:v1;garbage").cost_summary() is None  # an invalid job


def test_decision_record(tmp_path) -> None:
    db = records.open_records(tmp_path / "s.db")
    records.record_decision(db, time=5.0, uid="u1", slurm_id="7", action="start", gpus=2, nodes='["node3"]',
                            placement='[["node3", 2]]', score=1.5, predicted=30.0, reason="lyapunov")
    [d] = jobrecord.decisions(db, "u1")
    assert isinstance(d, DecisionRecord) and d.placement == NodePlacement((("node3", 2),)) and d.nodes == ("node3",)
    assert DecisionRecord.from_row(d.to_row()) == d


def test_slot_record_decodes_its_json_columns(tmp_path):
    import sqlite_utils

    from lyasched.store import jobrecord

    db = sqlite_utils.Database(tmp_path / "s.db")
    records.ensure_schema(db)
    assert jobrecord.last_slot(db) is None
    records.record_slot(db, time=10.0, q=1.5, z=2.5, free_gpus=3, free='{"n1": 1, "n2": 2}', waiting=4, running=1,
                        decisions='[{"slurm_id": "7", "gpus": 2}]', duration=0.01, policy="lyapunov", error="")
    records.record_slot(db, time=40.0, free="not json", decisions=None, policy="lyapunov", error=None)
    first = jobrecord.SlotRecord.from_row(next(iter(db.query("select * from slots order by id"))))
    assert first.free == {"n1": 1, "n2": 2} and first.started == ({"slurm_id": "7", "gpus": 2},) and first.q == 1.5
    last = jobrecord.last_slot(db)
    assert last is not None and last.time == 40.0 and last.free == {} and last.started == () and last.error == ""


def test_move_record_decodes_its_placements(tmp_path):
    import sqlite_utils

    from lyasched.store import moves

    db = sqlite_utils.Database(tmp_path / "m.db")
    records.ensure_schema(db)
    assert jobrecord.moves(db, "u1") == []
    moves.open_move(db, uid="u1", slurm_id="7", kind="grow", reason="more GPUs", created=5.0, from_gpus=2,
                    from_placement='[["node1", 2]]', to_gpus=4, to_placement='[["node1", 2], ["node2", 2]]', per_node=2)
    moves.open_move(db, uid="u1", slurm_id="7", kind="suspend", created=9.0, from_gpus=4,
                    from_placement="not json", to_gpus=0, to_placement=None)
    grow, suspend = jobrecord.moves(db, "u1")
    assert isinstance(grow, jobrecord.MoveRecord) and grow.kind == "grow" and grow.step == "decided"
    assert grow.to_placement == NodePlacement((("node1", 2), ("node2", 2))) and grow.to_placement.per_node == 2
    assert grow.from_placement.nodes == ("node1",) and grow.created == 5.0 and grow.state == "open"
    assert not suspend.to_placement and not suspend.from_placement and suspend.to_gpus == 0  # unreadable: empty
    assert jobrecord.moves(db, "u2") == []


def test_encode_times_writes_what_json_dumps_would():
    """`encode_times` builds its JSON text by hand (a row per GPU of the cluster, two per held job in
    a first slot): the same text as json.dumps of the rounded list, whatever the row holds."""
    import json

    import numpy as np

    def reference(row):
        return json.dumps([None if not math.isfinite(float(x)) else round(float(x), 3) for x in row])

    rng = np.random.default_rng(3)
    rows: list = [[], (), [0.0, -0.0, 0.0005, 0.0015, 2.675, -1.25e-7], [math.nan, math.inf, -math.inf, 1e308, 1.7976931348623157e308],
                  (3, 4), np.array([1.0, np.inf]), [np.float64(12.3456), 5], list(rng.normal(0, 1e6, 300))]
    for _ in range(50):
        a = np.full(256, np.inf)
        k = int(rng.integers(0, 257))
        a[:k] = rng.exponential(1e4, k) * rng.choice([1.0, 1e-4, 1e9], k)
        rows += [a, a.tolist()]
    for row in rows:
        assert encode_times(row) == reference(row)


def test_upsert_jobs_writes_as_upsert_job_does(tmp_path):
    """Many jobs' columns in one statement: the same rows as one `upsert_job` per job, inside an
    open transaction or in its own; an unknown column is refused before anything is written."""
    a, b = records.open_records(tmp_path / "a.db"), records.open_records(tmp_path / "b.db")
    for db in (a, b):
        records.upsert_job(db, "u1", state="waiting", work=1.0)
    rows = [("u1", "[1.0]", 2.5), ("u2", "[null]", math.inf)]
    for uid, one, work in rows:
        records.upsert_job(a, uid, pred_one=one, work=work)
    records.upsert_jobs(b, ("pred_one", "work"), rows)
    with records.transaction(b):
        records.upsert_jobs(b, ("pred_one", "work"), rows)
    dump = lambda db: db.execute("select * from jobs order by uid").fetchall()  # noqa: E731
    assert dump(a) == dump(b) and len(dump(a)) == 2
    with pytest.raises(KeyError):
        records.upsert_jobs(b, ("pred_one", "nope"), [("u3", "[]", 1)])
    assert len(dump(b)) == 2
