"""Many processes writing one lyasched SQLite file at once (issue 5, "Load"): `lyasub`-style
cost-table writes (profiles, remembered signatures, refinements) next to the service's records
(job upserts, slots with their decisions) and `lyastat`-style readers. WAL, the busy timeout
and short transactions must mean: no "database is locked", no lost row, no lost update."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import traceback
from pathlib import Path

import pytest

from lyasched.store import open_db
from lyasched.store import costtable, records

WRITERS = 6  # cost-table writers (lyasub / profiler)
SERVICES = 2  # records writers (service slots)
READERS = 2
ROUNDS = 150


def _cost_writer(path: str, k: int, out: mp.Queue) -> None:
    try:
        db = open_db(path)
        for i in range(ROUNDS):
            costtable.put(db, {"signature": f"sig{k:02d}{i:04d}", "device_type": "gpu", "model": "mlp",
                               "alpha": 1e-3, "beta": 1e-5, "params": 1000, "source": "measured"})
            costtable.put_signature(db, f"mlp|{k}|{i}", f"sig{k:02d}{i:04d}")
            costtable.refine(db, "shared", "gpu", 10.0, 12.0)  # read-modify-write on one row by everybody
        out.put(("ok", k))
    except Exception:  # noqa: BLE001 - reported to the parent, which fails the test
        out.put(("error", traceback.format_exc()))


def _service(path: str, k: int, out: mp.Queue) -> None:
    try:
        db = records.open_records(path)
        for i in range(ROUNDS):
            uid = f"svc{k}-{i:04d}"
            records.upsert_job(db, uid, slurm_id=str(k * 10_000 + i), user="lyatest", state="waiting")
            records.upsert_job(db, uid, state="released", gpus=2)
            records.touch_jobs(db, [uid], float(i))
            records.record_slot(
                db, decision_rows=[{"time": float(i), "uid": uid, "slurm_id": str(k * 10_000 + i), "action": "start",
                                    "gpus": 2, "reason": "test"}],
                time=float(i), q=1.0, z=1.0, free_gpus=0, free="{}", waiting=1, running=0, decisions="[]",
                duration=0.01, policy=f"svc{k}", error="",
            )
        out.put(("ok", k))
    except Exception:  # noqa: BLE001
        out.put(("error", traceback.format_exc()))


def _reader(path: str, k: int, out: mp.Queue) -> None:
    try:
        db = records.open_records(path)
        for _ in range(ROUNDS):
            records.list_jobs(db)
            costtable.list_entries(db)
        out.put(("ok", k))
    except Exception:  # noqa: BLE001
        out.put(("error", traceback.format_exc()))


def test_concurrent_writers_lose_nothing_and_never_see_locked(tmp_path: Path) -> None:
    path = str(tmp_path / "lyasched.db")
    db = records.open_records(path)
    costtable.put(db, {"signature": "shared", "device_type": "gpu", "model": "mlp", "alpha": 1e-3, "beta": 1e-5,
                       "params": 1000, "source": "measured"})
    db.conn.close()

    ctx = mp.get_context("spawn")  # fresh interpreters, like separate lyasub processes
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_cost_writer, args=(path, k, out)) for k in range(WRITERS)]
    procs += [ctx.Process(target=_service, args=(path, k, out)) for k in range(SERVICES)]
    procs += [ctx.Process(target=_reader, args=(path, k, out)) for k in range(READERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r[1] for r in results if r[0] == "error"]
    assert not errors, errors[0]
    assert all(p.exitcode == 0 for p in procs)

    db = open_db(path)
    n_profiles = db.execute("select count(*) from profiles where signature != 'shared'").fetchone()[0]
    assert n_profiles == WRITERS * ROUNDS
    assert db.execute("select count(*) from signatures").fetchone()[0] == WRITERS * ROUNDS
    shared = costtable.get(db, "shared", "gpu")
    assert shared is not None and shared.observations == WRITERS * ROUNDS  # no lost read-modify-write
    assert db.execute("select count(*) from jobs where state = 'released' and gpus = 2").fetchone()[0] == SERVICES * ROUNDS
    assert db.execute("select count(*) from slots").fetchone()[0] == SERVICES * ROUNDS
    assert db.execute("select count(*) from decisions").fetchone()[0] == SERVICES * ROUNDS
    # each slot's decision row is attached to that slot (one transaction, not interleaved)
    assert db.execute("select count(*) from decisions d join slots s on d.slot = s.id").fetchone()[0] == SERVICES * ROUNDS


def test_without_busy_timeout_the_same_load_does_lock(tmp_path: Path) -> None:
    """The check above can fail: two connections without a busy timeout, one holding the write
    lock, give exactly the error users must never see."""
    path = tmp_path / "bare.db"
    a = sqlite3.connect(path, timeout=0, isolation_level=None)
    a.execute("PRAGMA journal_mode=WAL")
    a.execute("create table t (x)")
    b = sqlite3.connect(path, timeout=0, isolation_level=None)
    a.execute("BEGIN IMMEDIATE")
    a.execute("insert into t values (1)")
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        b.execute("insert into t values (2)")
    a.execute("COMMIT")
