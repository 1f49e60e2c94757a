"""Time one Lyapunov decision with 10,000 waiting jobs on 1,024 nodes x 4 GPUs (target: <= 25 ms median, one core).

    python benchmarks/decision_overhead.py [--jobs 10000] [--nodes 1024] [--repeats 21] [--json]
        [--policy lyapunov|elastic] [--running] [--full] [--param POLICY.KEY=VALUE ...]

Builds the WaitingJob rows once (the simulator and the service keep them per job), then
times the policy's `decide` alone (`--policy`, default lyapunov). The policy copies a job's rows into its matrices the
first time it sees the job (as in serve/replay, where the same jobs wait slot after slot):
the first call is reported separately. About 30% of the GPUs are free, spread unevenly.

``--running`` fills the busy GPUs with running jobs (one node each, 1-4 GPUs, a random share of
their run done), checkpointable ones as `MovableJob`s: what `--policy elastic` (asked every slot,
and deciding moves of running jobs too) looks at in `serve` on such a cluster. No target is set
for elastic; the figure says what a slot costs there. ``--full``: no GPU free (all busy), where
a moving policy can only make room by moves.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core, as the target says

import argparse
import json
import statistics
import time

import numpy as np

from lyasched.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.job import Job
from lyasched.policy import make_policy
from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.movable import movable_job
from lyasched.policy.params import ParamError, parse_params
from lyasched.policy.state import RunningJob, SlotState, waiting_job

MODELS = [
    Profile("resnet50", 0.03, 0.0012, 25_600_000, mem_base=1.5e9, mem_per_sample=90e6),
    Profile("vgg16", 0.04, 0.0030, 138_000_000, mem_base=3.0e9, mem_per_sample=120e6),
    Profile("mobilenet", 0.01, 0.0005, 3_500_000, mem_base=0.5e9, mem_per_sample=40e6),
    Profile("alexnet", 0.01, 0.0004, 61_000_000, mem_base=1.0e9, mem_per_sample=20e6),
]


def _job(rng: np.random.Generator, name: str, now: float, requested: int | None = None) -> Job:
    return Job(name, MODELS[rng.integers(len(MODELS))], int(rng.choice([64, 128, 256, 512])),
               int(rng.integers(500, 50_000)), submit_time=float(rng.uniform(0, now)),
               max_gpus=int(rng.choice([1, 2, 4, 8, 16])),
               requested_gpus=requested if requested is not None else int(rng.choice([1, 2, 4])))


def build(n_jobs: int, nodes: int, gpn: int, max_gpus: int, seed: int, running: bool = False,
          full: bool = False) -> SlotState:
    rng = np.random.default_rng(seed)
    cl = ClusterSpec(nodes=nodes, gpus_per_node=gpn, intra=Link(100e9, 1e-5), inter=Link(10e9, 5e-5))
    cm = CostModel(cl)
    now = 100_000.0
    rows = []
    for i in range(n_jobs):
        rows.append(waiting_job(_job(rng, f"j{i}", now), cm, max_gpus))
    free = tuple(int(x) for x in rng.choice([0, 0, 0, 1, 2, 4], size=nodes))
    if full:  # every GPU busy: what a moving policy meets under load (it may only swap)
        free = (0,) * nodes
    run: list[RunningJob] = []
    if running:
        for node, f in enumerate(free):
            busy = gpn - f
            while busy > 0:
                g = int(rng.choice([s for s in (1, 2, 4) if s <= busy]))
                w = waiting_job(_job(rng, f"r{len(run)}", now, requested=g), cm, max_gpus)
                if not np.isfinite(w.run_one_node[g - 1]):  # a count this model may not run on: draw again
                    continue
                busy -= g
                left, run_s = float(rng.uniform(0.1, 0.9)), float(w.run_one_node[g - 1])
                start = now - (1.0 - left) * run_s
                base = RunningJob(w.job_id, g, ((node, g),), start, start + w.time_limit, predicted_end=start + run_s)
                run.append(movable_job(base, one=w.run_one_node, multi=w.run_multi_node, work=w.work, scale=left,
                                       requested=g, move_cost=float("nan"), waited=float(rng.uniform(0, 3600)),
                                       checkpointable=True))
    return SlotState(now=now, slot_len=30.0, free=free, gpus_per_node=gpn, waiting=tuple(rows), running=tuple(run))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--max-gpus", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--V", type=float, default=LyapunovPolicy().V)
    ap.add_argument("--policy", choices=["lyapunov", "elastic"], default="lyapunov")
    ap.add_argument("--running", action="store_true", help="busy GPUs hold running (checkpointable) jobs")
    ap.add_argument("--full", action="store_true", help="no free GPU (with --running: all of them hold running jobs)")
    ap.add_argument("--param", action="append", default=[], metavar="POLICY.KEY=VALUE",
                    help="a parameter of the policy timed, as in replay (e.g. elastic.max_searches=64)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        params = parse_params(a.param, [a.policy]).get(a.policy, {})
    except ParamError as e:
        ap.exit(2, f"decision_overhead.py: --param: {e}\n")
    t0 = time.perf_counter()
    state = build(a.jobs, a.nodes, a.gpus_per_node, a.max_gpus, 0, running=a.running, full=a.full)
    build_s = time.perf_counter() - t0
    pol = make_policy(a.policy, **{"V": a.V, **params})
    t = time.perf_counter()
    pol.decide(state)  # cold: the policy copies every job's rows into its matrices once
    cold = time.perf_counter() - t
    times, res = [], None
    for _ in range(a.repeats):
        t = time.perf_counter()
        res = pol.decide(state)
        times.append(time.perf_counter() - t)
    out = {
        "policy": a.policy, "params": params, "running": len(state.running), "jobs": a.jobs, "nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "free_gpus": sum(state.free),
        "median_ms": statistics.median(times) * 1e3, "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))] * 1e3,
        "cold_first_ms": cold * 1e3,
        "started": len(res.starts), "solver": res.info.get("solver"), "rows_build_s": build_s, "target_ms": 25.0 if a.policy == "lyapunov" else None,
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.policy} decision with {a.jobs} waiting jobs, {len(state.running)} running, on {a.nodes}x{a.gpus_per_node} GPUs ({out['free_gpus']} free): "
              f"median {out['median_ms']:.1f} ms, p90 {out['p90_ms']:.1f} ms over {a.repeats} runs "
              f"(first call, rows not yet cached: {out['cold_first_ms']:.1f} ms) "
              f"[{out['solver']}, {out['started']} started]" + (" (target <= 25 ms)" if a.policy == "lyapunov" else ""))


if __name__ == "__main__":
    main()
