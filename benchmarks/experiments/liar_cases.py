"""Why a liars.py case misses: the liar's jobs one by one, honest replay against lying replay.

    python benchmarks/experiments/liar_cases.py [--cases seed-large-scattered@4,...] [--mode trust|trust_known] [--policy lyapunov]

For each case (a seed group at a seed, liars.py's liar: the median user by job count), two
replays with the same trust setting: the liar honest, and the liar claiming ``--claim`` (1%).
Printed per case:

* the first slot whose decisions differ between the two replays, the job started in one and
  not the other at it, and, for each liar job waiting then, its best run as the policy saw it
  in both replays over its true best run (1.0: shown as an honest user's claim would be);
* the liar's first finished job's end (the first evidence the trust factor has), and each liar
  job's start in both replays: started on a 1% claim (before any evidence), its wait honest /
  lying, counted or not (after their first 10 finished);
* the honest users' average JCT lying over honest and which of their jobs moved most.
"""

from __future__ import annotations

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import math

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from liars import FIRST, median_user  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.workloads import load_workload  # noqa: E402

DEFAULT_CASES = ("seed-small-scattered@0,seed-small-scattered@1,seed-small-bursty@2,seed-small-bursty@3,"
                 "seed-small-bursty@4,seed-large-scattered@1,seed-large-scattered@3,seed-large-scattered@4,"
                 "seed-large-bursty@1,seed-large-bursty@2")


def replay(jobs, cl, seed, policy, liar, claim, lie, known):
    """One replay with every slot's (now, starts, {job id: best run shown}) recorded."""
    sim = Simulation(jobs, cl, seed=seed, trust=True, liars={liar: claim} if lie else None)
    if not known:
        sim.known = {}
    p = make_policy(policy, seed=seed)
    log: list[tuple[float, tuple, dict]] = []
    inner = p.decide

    def decide(state):
        res = inner(state)
        log.append((state.now, tuple(sorted((d.job_id, d.gpus) for d in res.starts)),
                    {w.job_id: w.best_run for w in state.waiting}))
        return res

    p.decide = decide  # type: ignore[method-assign]
    return sim, sim.run(p, name=policy), log


def explain(name: str, policy: str, claim: float, mode: str) -> None:
    group, _, s = name.partition("@")
    seed = int(s or 0)
    w = load_workload(group, seed=seed)
    jobs, cl = list(w.jobs), w.cluster
    liar = median_user(jobs)
    known = mode == "trust_known"
    hs, hr, hl = replay(jobs, cl, seed, policy, liar, claim, False, known)
    ls, lr, ll = replay(jobs, cl, seed, policy, liar, claim, True, known)
    user_of = {j.job_id: j.user for j in jobs}
    truth = {j.job_id: hs.predicted(i).best_run for i, j in enumerate(jobs)}  # the honest claim
    print(f"== {name} {policy} {mode}: liar {liar}, {sum(j.user == liar for j in jobs)} of {len(jobs)} jobs")
    for (t0, a, wa), (t1, b, wb) in zip(hl, ll):
        if t0 != t1 or a != b:
            print(f"  first differing slot t={t0:.0f}/{t1:.0f}: honest starts {a}, lying starts {b}")
            for jid in sorted(set(wa) | set(wb)):
                if user_of[jid] == liar:
                    print(f"    liar job {jid}: shown {wa.get(jid, math.nan) / truth[jid]:.4g} (honest replay),"
                          f" {wb.get(jid, math.nan) / truth[jid]:.4g} (lying) x its honest claim")
            break
    else:
        print("  no slot differs")
    lrec = sorted((r for r in lr.records if r.job.user == liar), key=lambda r: r.end)
    first_end = lrec[0].end if lrec else math.nan
    counted = {r.job.job_id for r in lrec[FIRST:]}
    hrec = {r.job.job_id: r for r in hr.records}
    print(f"  liar's first finish t={first_end:.0f}; their jobs (by submit):")
    for r in sorted(lrec, key=lambda r: r.job.submit_time):
        h = hrec[r.job.job_id]
        early = "started before any evidence" if r.first_start < first_end else ""
        print(f"    {r.job.job_id} submit {r.job.submit_time:7.0f} gpus {r.gpus} run {r.run_s:6.0f}"
              f" wait honest {h.wait:6.0f} lying {r.wait:6.0f} {'counted' if r.job.job_id in counted else '       '} {early}")
    hon = [r for r in lr.records if r.job.user != liar]
    jl = float(np.mean([r.jct for r in hon]))
    jh = float(np.mean([hrec[r.job.job_id].jct for r in hon]))
    lw = float(np.mean([r.wait for r in lrec[FIRST:]])) if lrec[FIRST:] else math.nan
    hw = float(np.mean([r.wait for r in hon]))
    lwh = float(np.mean([hrec[r.job.job_id].wait for r in lrec[FIRST:]])) if lrec[FIRST:] else math.nan
    print(f"  liar wait {lw:.0f} (honest replay {lwh:.0f}), honest users' wait {hw:.0f}; honest JCT lying / honest {jl / jh:.3f}")
    moved = sorted(hon, key=lambda r: -abs(r.jct - hrec[r.job.job_id].jct))[:5]
    for r in moved:
        h = hrec[r.job.job_id]
        print(f"    moved most: {r.job.job_id} ({r.job.user}, {r.gpus} GPUs, run {r.run_s:.0f}) JCT {h.jct:.0f} -> {r.jct:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--mode", default="trust", choices=("trust", "trust_known"))
    ap.add_argument("--policy", default="lyapunov")
    ap.add_argument("--claim", type=float, default=0.01)
    a = ap.parse_args()
    for c in a.cases.split(","):
        explain(c.strip(), a.policy, a.claim, a.mode)


if __name__ == "__main__":
    main()
