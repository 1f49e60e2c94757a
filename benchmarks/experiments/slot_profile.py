#!/usr/bin/env python3
"""Where a `lyasched serve` slot's time goes, without a cluster (prints figures; asserts nothing).

Slurm is answered in-process by a recorded state shaped like `benchmarks/slot_duration.py
--backend`'s run on the test cluster: N held lyasched jobs of one user (cost summaries as
benchmarks/rel_load.py submits them) on M nodes x 4 GPUs, every GPU held by another job (so the
slots read, record and decide, but start nothing); ``--free`` leaves GPUs free instead (the policy
then scores every waiting job and starts some; the recorded state does not change, so later
slots decide again on the same state). The backend hands the service already-built values, so
the figures are the slot's own cost: what is the same whichever Slurm backend read the state.

Per slot part (median over ``--slots`` later slots, after a first slot that records every job):
the Slurm reads (here: handing over the lists), reconcile, records (`sync.listed`, `_sync` before: decode + rows),
vanished-job check, building the policy's input (`inputs.waiting`, `_waiting` before), the policy, the slot record.
``--profile`` adds cProfile's top functions of the later slots; ``--json`` prints one object.

    python benchmarks/experiments/slot_profile.py [--jobs 10000] [--nodes 4] [--slots 5] [--free] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lyasched.config import Config  # noqa: E402
from lyasched.service import Service  # noqa: E402
from lyasched.slurm.types import NodeInfo, SlurmJob  # noqa: E402
from lyasched.store.records import open_records  # noqa: E402
from lyasched.summary import CostSummary  # noqa: E402

USER = "lyatest"


class RecordedSlurm:
    """The `Slurm` calls a slot makes, answered from a fixed state (no I/O)."""

    name = "recorded"

    def __init__(self, jobs: int, nodes: int, free: bool) -> None:
        self._nodes = [NodeInfo(name=f"lyanode{i + 1}", state="MIXED" if not free else "IDLE", gpus_total=4,
                                gpus_alloc=0 if free else 4, partitions=("gpu",)) for i in range(nodes)]
        self._jobs = []
        for i in range(jobs):
            comment = CostSummary(uid=f"lhprof-{i:06d}", sig="lyaload0000000ab", global_batch=64,
                                  iterations=100 + 7 * (i % 500), min_gpus=1, max_gpus=8, alpha=0.01, beta=0.001,
                                  params=1_000_000).encode()
            self._jobs.append(SlurmJob(
                job_id=str(1000 + i), user=USER, unix_uid=2000, state="PENDING", reason="JobHeldUser", priority=0,
                submit_time=1.7e9 + i, start_time=None, end_time=None, time_limit=600.0, num_nodes=1,
                gpus_per_node=1, nodes=(), partition="gpu", comment=comment, name="lyaheld"))
        self.released: list[str] = []

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def jobs(self, *, user=None, job_ids=(), lyasched_only=True) -> list[SlurmJob]:
        return list(self._jobs)

    def config(self):
        from lyasched.slurm.types import ClusterConfig

        return ClusterConfig(version="22.05.8", accounting=False, submit_plugins=("lua",))

    def resize(self, job_id, num_nodes, gpus_per_node, nodes=()) -> None:
        pass

    def release(self, job_id) -> None:
        self.released.append(job_id)  # the recorded state stays as it is: later slots decide it again

    def hold(self, job_id) -> None:
        pass

    def work_dir(self, job_id):
        return None

    def job(self, job_id):
        return None

    def accounting(self, job_ids):
        return []

    def cancel(self, job_id) -> None:
        pass

    def submit(self, opts, script=None) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


PARTS = {  # part name -> (object attribute path on the service, method)
    "slurm reads": [("slurm", "nodes"), ("slurm", "jobs")],
    "reconcile": [("", "reconcile"), ("starter", "reconcile")],
    "records (sync)": [("", "_sync"), ("sync", "listed")],
    "vanished check": [("", "_vanished"), ("sync", "vanished")],
    "policy input": [("", "_waiting"), ("inputs", "waiting")],
    "policy": [("policy", "decide")],
}


def instrument(svc: Service, acc: dict[str, float]) -> None:
    """Wrap the slot's parts (where this version of the service has them) to add up their time."""
    for part, spots in PARTS.items():
        for owner_path, meth in spots:
            owner = getattr(svc, owner_path, None) if owner_path else svc
            fn = getattr(owner, meth, None) if owner is not None else None
            if fn is None:
                continue

            def timed(*a, _fn=fn, _part=part, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    acc[_part] += time.perf_counter() - t0

            setattr(owner, meth, timed)


def run(jobs: int, nodes: int, slots: int, free: bool, profile: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lyasched-slotprof-"))
    slurm = RecordedSlurm(jobs, nodes, free)
    svc = Service(Config(slot_seconds=30, users=(USER,)), open_records(tmp / "svc.db"), slurm=slurm,
                  clock=lambda: 1.7e9 + jobs + 600)
    acc: dict[str, float] = defaultdict(float)
    instrument(svc, acc)
    first = svc.run_slot()
    if first.error:
        raise SystemExit(f"slot_profile: error: first slot failed: {first.error}")
    per_part: dict[str, list[float]] = defaultdict(list)
    durations = []
    prof = cProfile.Profile() if profile else None
    for _ in range(slots):
        acc.clear()
        if prof:
            prof.enable()
        rep = svc.run_slot()
        if prof:
            prof.disable()
        if rep.error:
            raise SystemExit(f"slot_profile: error: slot failed: {rep.error}")
        durations.append(rep.duration)
        for part in PARTS:
            per_part[part].append(acc.get(part, 0.0))
        per_part["other (slot record, bookkeeping)"].append(rep.duration - sum(acc.values()))
    out = {
        "jobs": jobs, "nodes": nodes, "free_gpus": free, "slots": slots, "first_slot_s": first.duration,
        "waiting": first.waiting, "started_per_slot": len(rep.started),
        "median_slot_s": statistics.median(durations),
        "parts_median_s": {p: statistics.median(v) for p, v in per_part.items()},
    }
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        out["profile"] = s.getvalue()
    return out


def worker_parts(rounds: int = 5, held: int = 0) -> dict:
    """``--worker``, on the real test cluster (flock; root) with whatever jobs it lists, plus
    ``held`` held lyasched jobs of the test user submitted first and cancelled after: the pyslurm
    worker's every-slot job read (Worker.jobs_delta, a full read: the queue changed) in parts,
    beside PySlurm's Jobs.load path (before the direct read) and squeue's run and parse (the CLI)."""
    import cProfile
    import pickle
    import pstats
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from reliability.load import HELD_NAME, TEST_USER, cancel_named, submit_held, workdir

    from lyasched.slurm import query as q
    from lyasched.slurm.pyslurm_worker import Worker, _fields
    from lyasched.slurm.types import TAG

    work = workdir("lyasched-slotprof-")
    try:
        if held:
            sub = submit_held(held, 8, TEST_USER, work)
            print(f"[slot_profile] {sub['submitted']} held jobs submitted in {sub['submit_s']:.0f} s", file=sys.stderr)
        w = Worker()
        if w._direct is None:
            raise SystemExit("slot_profile: error: the pyslurm worker has no direct job read here")
        d, ps = w._direct, w.ps
        parts: dict[str, list[float]] = defaultdict(list)
        token, order, changed = w.jobs_delta(None)  # the first read (and the check against PySlurm)
        prof = cProfile.Profile()
        n = 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            got = d.load(0)  # slurm_load_jobs: Slurm's own time (RPC + unpack)
            t1 = time.perf_counter()
            assert got is not None
            n = int(got[1].contents.record_count)
            rows = d.rows(got[1], dict(w._final))  # finished jobs known (as in every later read)
            t2 = time.perf_counter()
            d.rows(got[1], {})  # nothing known: every lyasched job read
            t3 = time.perf_counter()
            d.free(got[1])
            t4 = time.perf_counter()
            w._as_of = 0  # as if the queue had changed: a full read
            prof.enable()
            token, order, changed = w.jobs_delta(token)
            prof.disable()
            t5 = time.perf_counter()
            blob = pickle.dumps(("ok", (token, order, changed)), protocol=pickle.HIGHEST_PROTOCOL)
            t6 = time.perf_counter()
            pickle.loads(blob)
            t7 = time.perf_counter()
            jobs = ps.Jobs.load(preload_passwd_info=True)
            t8 = time.perf_counter()
            fields = [_fields(j, c) for j, c in ((j, j.comment or "") for _, j in jobs.items()) if c.startswith(TAG)]
            t9 = time.perf_counter()
            out = subprocess.run(q.squeue_args(), capture_output=True, text=True).stdout
            t10 = time.perf_counter()
            q.parse_squeue(out)
            t11 = time.perf_counter()
            for k, v in (("direct: slurm_load_jobs (Slurm's time)", t1 - t0),
                         ("direct: fields of new lyasched jobs (finished known)", t2 - t1),
                         ("direct: fields of every lyasched job", t3 - t2), ("direct: free", t4 - t3),
                         ("direct: whole jobs_delta (load, fields, compare)", t5 - t4),
                         ("answer pickle (worker)", t6 - t5), ("answer unpickle (service)", t7 - t6),
                         ("pyslurm Jobs.load (RPC + wrap)", t8 - t7), ("pyslurm fields of every lyasched job", t9 - t8),
                         ("squeue run", t10 - t9), ("squeue parse", t11 - t10)):
                parts[k].append(v)
            parts["answer bytes"].append(len(blob))
            parts["squeue bytes"].append(len(out))
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        print(s.getvalue(), file=sys.stderr)
        return {"jobs_listed": n, "lyasched_jobs": len(order), "fields_of": len(rows), "pyslurm_fields": len(fields),
                "changed_last": len(changed), "parts_median": {k: statistics.median(v) for k, v in parts.items()}}
    finally:
        if held:
            cancel_named(TEST_USER, HELD_NAME)
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--slots", type=int, default=5)
    ap.add_argument("--free", action="store_true", help="leave the GPUs free (the policy scores and starts)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions (tottime)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", action="store_true",
                    help="on the real test cluster (flock): the pyslurm worker's job read in parts")
    ap.add_argument("--held", type=int, default=0, help="with --worker: submit this many held jobs first (cancelled after)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker_parts(a.slots, a.held)))
        return
    if a.jobs < 1 or a.nodes < 1 or a.slots < 1:
        print("slot_profile: error: --jobs, --nodes and --slots must be positive", file=sys.stderr)
        sys.exit(2)
    res = run(a.jobs, a.nodes, a.slots, a.free, a.profile)
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if k != "profile"}))
    else:
        print(f"{res['jobs']} held jobs on {res['nodes']}x4 GPUs ({'free' if res['free_gpus'] else 'all busy'}), "
              f"{res['waiting']} waiting, {res['started_per_slot']} started per slot")
        print(f"first slot {res['first_slot_s'] * 1000:.0f} ms; later slots median {res['median_slot_s'] * 1000:.0f} ms:")
        for p, v in res["parts_median_s"].items():
            print(f"  {p:34s} {v * 1000:8.1f} ms")
    if a.profile:
        print(res["profile"], file=sys.stderr if a.json else sys.stdout)


if __name__ == "__main__":
    main()
