"""Writes tests/data/unversioned.sqlite3: a lyasched database as the last lyasched before schema
versioning (commit 00de925) wrote it: the service's records (jobs, slots, decisions, intents,
moves, meta) and the cost table (profiles, profile_runs, profile_events, profile_own, startup,
cluster_params, signatures) in one file, PRAGMA user_version 0. Run against that tree:

    git archive 00de925 lyasched | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/make_unversioned_db.py tests/data/unversioned.sqlite3
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from lyasched.costmodel import startup
from lyasched.costmodel.cost import Link
from lyasched.store import costtable, moves, records
from lyasched.store.cluster import save_cluster_link


def main(out: Path) -> None:
    for f in (out, Path(f"{out}-wal"), Path(f"{out}-shm")):
        f.unlink(missing_ok=True)
    db = records.open_records(out)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    for i in range(40):
        records.upsert_job(db, f"uid-{i:04d}-abcdefgh", slurm_id=str(100 + i), user="alice", name=f"job{i}",
                           state="finished" if i % 2 else "waiting", gpus=i % 4 + 1, predicted=60.0 + i,
                           submit_time=1000.0 + i, reason="recorded " * 10)
    records.record_slot(db, [{"time": 2000.0, "uid": "uid-0001-abcdefgh", "slurm_id": "101", "action": "start",
                              "gpus": 2, "reason": "fits"}], time=2000.0, q=10.0, z=1.0, free_gpus=4, waiting=3,
                        running=1, duration=0.01, policy="lyapunov")
    iid = records.open_intent(db, uid="uid-0003-abcdefgh", slurm_id="103", created=2000.0, gpus=2, per_node=2)
    records.mark_intent(db, iid, state="applied", resolved=2001.0)
    mid = moves.open_move(db, uid="uid-0005-abcdefgh", slurm_id="105", kind="shrink", created=2100.0,
                          from_gpus=4, to_gpus=2)
    moves.mark(db, mid, state="done", restarted_at=2200.0)
    costtable.put(db, {"model": "mlp", "signature": "sig-mlp", "device_type": "gpu", "device_name": "GPU",
                       "source": "measured", "alpha": 0.002, "beta": 1e-5, "r2": 0.99, "m0": 5e6, "m1": 1e4,
                       "mem_r2": 0.9, "batches": [1, 2, 4], "step_times": [0.00201, 0.00202, 0.00204],
                       "mem_points": [5.01e6, 5.02e6, 5.04e6], "params": 669706, "bytes_per_param": 4,
                       "grad_bytes": 4, "schema_version": 1})
    costtable.put_signature(db, "mlp|key", "sig-mlp")
    startup.observe(db, "cluster", startup.DEFAULT_LAUNCHER, 12.5, job_id="101", user="alice")
    save_cluster_link(db, "intra", Link(bandwidth=1e11, latency=1e-5), source="recorded")
    db.conn.close()
    conn = sqlite3.connect(out)  # fold the WAL in and shrink: one self-contained file
    conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
