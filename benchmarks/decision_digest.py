"""A digest of the shipped policies' decisions: check that a change which should not change a
decision (a refactor, a speed-up, code moved) does not.

    python benchmarks/decision_digest.py [--policies lyapunov,elastic,...] [--json]

Eight replays (the four seed groups at seed 0, the seed groups ``seed-small-bursty`` and
``seed-large-scattered`` at seed 1, the issue-8 synthetic ``synth:mixed160`` at seeds 0 and 1), each under every policy named (default: every
registered one, the srpt-oracle reference included): per policy, a SHA-1 over every job's
segments (start, end, GPUs, across nodes), preemptions and resizes (with ``--slots`` also the Q and Z of
every slot the policy was asked: that series depends on how often the simulator asks, so a replay
that skips slots where nothing can change keeps the decisions' digest and changes that one); then
one `decide` of lyapunov and of elastic on benchmarks/decision_overhead.py's slot (2,000 waiting
jobs, running jobs on the busy GPUs), hashed as that script hashes them (``decisions_sha1``).
Run it before and after the change and compare the ``all`` line (or any per-policy line).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import hashlib
import json
import sys
import time

import numpy as np

import lyasched

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # decision_overhead's slot

from decision_overhead import build  # noqa: E402

from lyasched.cli.nativeout import native_stdout_to_stderr  # noqa: E402
from lyasched.policy import POLICIES, make_policy  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.workloads import load_workload  # noqa: E402

REPLAYS: list[tuple[str, int, dict]] = [
    ("seed-small-bursty", 0, {}),
    ("seed-small-scattered", 0, {}),
    ("seed-large-bursty", 0, {}),
    ("seed-large-scattered", 0, {}),
    ("seed-small-bursty", 1, {}),
    ("seed-large-scattered", 1, {}),
    ("synth:mixed160", 0, {}),
    ("synth:mixed160", 1, {}),
]


def replay_digest(result, slots: bool = False) -> str:
    """SHA-1 of a replay's decisions: every job's segments, first start, end, preemptions and
    resizes; with ``slots`` also the Q and Z the policy returned at each call."""
    h = hashlib.sha1()
    for r in sorted(result.records, key=lambda r: r.job.job_id):
        segs = [(s.start, s.end, s.gpus, s.spans_nodes) for s in r.segments]
        h.update(repr((r.job.job_id, segs, r.first_start, r.end, r.preemptions, r.resizes)).encode())
    if slots:
        h.update(np.asarray(result.slot_q, dtype=float).tobytes())
        h.update(np.asarray(result.slot_z, dtype=float).tobytes())
    return h.hexdigest()


def slot_digest(policy: str) -> str:
    state = build(2000, 256, 4, 16, 0, running=True)
    res = make_policy(policy).decide(state)
    return hashlib.sha1(repr(([(d.job_id, d.gpus, d.placement, d.score, d.reason) for d in res.starts],
                              res.q, res.z, sorted(res.info.items()))).encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--slots", action="store_true", help="hash every call's Q and Z too (depends on slot skipping)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p]
    per: dict[str, list[str]] = {p: [] for p in policies}
    names = []
    for name, seed, kw in REPLAYS:
        w = load_workload(name, seed=seed, **kw)
        label = f"{os.path.basename(name)}@{seed}"
        names.append(label)
        sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction)
        for p in policies:
            t = time.perf_counter()
            with native_stdout_to_stderr():  # (sia's solver prints with printf)
                per[p].append(replay_digest(sim.run(make_policy(p, seed=seed), name=p), a.slots))
            print(f"{label} {p}: {per[p][-1][:12]} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    out: dict = {"replays": names, "policies": {p: hashlib.sha1("".join(v).encode()).hexdigest() for p, v in per.items()},
                 "per_replay": {p: dict(zip(names, (d[:12] for d in v))) for p, v in per.items()}}
    for p in ("lyapunov", "elastic"):
        if p in policies:
            out["slot_" + p] = slot_digest(p)
    out["all"] = hashlib.sha1(json.dumps(out, sort_keys=True).encode()).hexdigest()
    out["package"] = os.path.dirname(os.path.dirname(os.path.abspath(lyasched.__file__)))  # the tree digested
    if a.json:
        print(json.dumps(out))
    else:
        for p, d in out["policies"].items():
            print(f"{p:12s} {d}")
        for k in ("slot_lyapunov", "slot_elastic"):
            if k in out:
                print(f"{k:12s} {out[k]}")
        print(f"{'all':12s} {out['all']}  (package {out['package']})")


if __name__ == "__main__":
    main()
