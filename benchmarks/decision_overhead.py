"""Time one Lyapunov decision with 10,000 waiting jobs on 1,024 nodes x 4 GPUs (target: <= 25 ms median, one core).

    python benchmarks/decision_overhead.py [--jobs 10000] [--nodes 1024] [--repeats 21] [--json]
        [--policy lyapunov|elastic] [--running] [--full] [--param POLICY.KEY=VALUE ...]
        [--against DIR [--rounds 5]] [--types 3] [--digest]

Builds the WaitingJob rows once (the simulator and the service keep them per job), then
times the policy's `decide` alone (`--policy`, default lyapunov). The policy copies a job's rows into its matrices the
first time it sees the job (as in serve/replay, where the same jobs wait slot after slot):
the first call is reported separately. About 30% of the GPUs are free, spread unevenly.

``--running`` fills the busy GPUs with running jobs (one node each, 1-4 GPUs, a random share of
their run done), checkpointable ones as `MovableJob`s: what `--policy elastic` (asked every slot,
and deciding moves of running jobs too) looks at in `serve` on such a cluster. No target is set
for elastic; the figure says what a slot costs there. ``--full``: no GPU free (all busy), where
a moving policy can only make room by moves.

``--types N`` times the same slot on a cluster of N GPU types (equal blocks of nodes: a100,
rtx2080ti, t4), each waiting job with its rows on every type (the roofline), side by side with
the one-type slot, in turn, and prints both medians and their ratio (target: <= 2x).

``--digest`` times nothing: it prints a digest (SHA-1) of typed slots' decisions (starts with their
placements, scores and reasons, preemptions, Q, Z and info) for lyapunov and elastic, seeds 0 and 1,
with running jobs on the busy GPUs, at 2,000 waiting jobs on 256 nodes of 3 types, at 1 free GPU per
type, and at a few waiting jobs (where the slot may end with no start); run it on two trees: a
speed change of the typed slot that keeps the decisions gives the same ``all`` line.

``--against DIR`` times the same slot with another checkout's package (e.g. ``git worktree add
/tmp/before REV``) side by side: this script runs in turn with ``DIR`` and with this tree first
on the import path, ``--rounds`` times each, and prints both medians, their ratio per round and
overall, and whether the two made the same decisions (a digest of the starts, scores, reasons,
Q and Z): a speed change that keeps the decisions says so here.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core, as the target says

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import lyasched

from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.costmodel.jobspec import Job
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


TYPES = ("a100", "rtx2080ti", "t4")


def typed(state: SlotState, n_types: int, gpn: int, max_gpus: int) -> SlotState:
    """``state`` on a cluster of ``n_types`` GPU types (equal blocks of consecutive nodes): each
    waiting job gets its rows on every type (`lyasched.policy.snapshot.type_rows`: the roofline from
    the first type's profile, each type's memory). Same jobs, same free GPUs."""
    from dataclasses import replace

    from lyasched.costmodel.roofline import lookup
    from lyasched.policy.snapshot import type_rows

    names = TYPES[:n_types]
    nodes = len(state.free)
    node_types = tuple(names[min(i * n_types // nodes, n_types - 1)] for i in range(nodes))
    costs = {t: CostModel(ClusterSpec(nodes=node_types.count(t), gpus_per_node=gpn, gpu_mem=lookup(t).memory,
                                      intra=Link(100e9, 1e-5), inter=Link(10e9, 5e-5))) for t in names}
    jobs = []
    for i, w in enumerate(state.waiting):
        job = _job(np.random.default_rng([1, i]), w.job_id, state.now)
        job = replace(job, submit_time=w.submit_time)
        jobs.append(replace(w, by_type=type_rows(job, costs, (), names[0], max_gpus)))
    return replace(state, waiting=tuple(jobs), node_types=node_types)


def _time(pol, state: SlotState, repeats: int, cpu: list[float] | None = None) -> tuple[float, list[float], object]:
    """(first call's wall seconds, each repeat's, the last answer); each repeat's CPU seconds into ``cpu``."""
    t = time.perf_counter()
    res = pol.decide(state)
    cold = time.perf_counter() - t
    times: list[float] = []
    for _ in range(repeats):
        c, t = time.process_time(), time.perf_counter()
        res = pol.decide(state)
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
    return cold, times, res


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
    ap.add_argument("--types", type=int, default=1, choices=(1, 2, 3),
                    help="also time the same slot on a cluster of this many GPU types, side by side (target: <= 2x)")
    ap.add_argument("--digest", action="store_true", help="print a digest of typed slots' decisions (no timing)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against", metavar="DIR", help="another checkout of lyasched: time both, side by side")
    ap.add_argument("--rounds", type=int, default=5, help="with --against: runs of each tree, in turn")
    a = ap.parse_args()
    if a.against:
        if not os.path.isfile(os.path.join(a.against, "lyasched", "__init__.py")):
            ap.exit(2, f"decision_overhead.py: --against: no lyasched package in {a.against}\n")
        compare(a)
        return
    try:
        params = parse_params(a.param, [a.policy]).get(a.policy, {})
    except ParamError as e:
        ap.exit(2, f"decision_overhead.py: --param: {e}\n")
    if a.digest:
        out = digest()
        print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
        return
    t0 = time.perf_counter()
    state = build(a.jobs, a.nodes, a.gpus_per_node, a.max_gpus, 0, running=a.running, full=a.full)
    build_s = time.perf_counter() - t0
    pol = make_policy(a.policy, **{"V": a.V, **params})
    if a.types > 1:  # side by side: the same slot untyped and typed, in turn, medians compared
        tstate = typed(state, a.types, a.gpus_per_node, a.max_gpus)
        tpol = make_policy(a.policy, **{"V": a.V, **params})
        one, many = [], []
        cpu1: list[float] = []
        cpu2: list[float] = []
        res1 = rest = None
        for _ in range(3):
            _, t1, res1 = _time(pol, state, max(1, a.repeats // 3), cpu1)
            _, t2, rest = _time(tpol, tstate, max(1, a.repeats // 3), cpu2)
            one += t1
            many += t2
        out = {"policy": a.policy, "jobs": a.jobs, "nodes": a.nodes, "types": a.types, "free_gpus": sum(state.free),
               "median_ms_one_type": statistics.median(one) * 1e3, "median_ms_typed": statistics.median(many) * 1e3,
               "cpu_median_ms_one_type": statistics.median(cpu1) * 1e3, "cpu_median_ms_typed": statistics.median(cpu2) * 1e3,
               "started_one_type": len(res1.starts), "started_typed": len(rest.starts), "load": os.getloadavg()[0]}
        out["ratio"] = out["median_ms_typed"] / out["median_ms_one_type"]
        out["cpu_ratio"] = out["cpu_median_ms_typed"] / out["cpu_median_ms_one_type"]
        out["target_ratio"] = 2.0
        if a.json:
            print(json.dumps(out))
        else:
            print(f"{a.policy} decision, {a.jobs} waiting jobs on {a.nodes}x{a.gpus_per_node} GPUs ({out['free_gpus']} free): "
                  f"one type {out['median_ms_one_type']:.1f} ms, {a.types} types {out['median_ms_typed']:.1f} ms, "
                  f"ratio {out['ratio']:.2f} (CPU {out['cpu_median_ms_one_type']:.1f} / {out['cpu_median_ms_typed']:.1f} ms, "
                  f"{out['cpu_ratio']:.2f}; target <= 2; load {out['load']:.1f}); started {out['started_one_type']} / {out['started_typed']}")
        return
    cold, times, res = _time(pol, state, a.repeats)  # cold: the policy copies every job's rows into its matrices once
    out = {
        "policy": a.policy, "params": params, "running": len(state.running), "jobs": a.jobs, "nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "free_gpus": sum(state.free),
        "median_ms": statistics.median(times) * 1e3, "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))] * 1e3,
        "cold_first_ms": cold * 1e3,
        "started": len(res.starts), "solver": res.info.get("solver"), "rows_build_s": build_s, "target_ms": 25.0 if a.policy == "lyapunov" else None,
        "decisions_sha1": hashlib.sha1(repr(([(d.job_id, d.gpus, d.placement, d.score, d.reason) for d in res.starts],
                                             res.q, res.z, sorted(res.info.items()))).encode()).hexdigest(),
        "package": os.path.dirname(os.path.dirname(os.path.abspath(lyasched.__file__))),  # the tree timed
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.policy} decision with {a.jobs} waiting jobs, {len(state.running)} running, on {a.nodes}x{a.gpus_per_node} GPUs ({out['free_gpus']} free): "
              f"median {out['median_ms']:.1f} ms, p90 {out['p90_ms']:.1f} ms over {a.repeats} runs "
              f"(first call, rows not yet cached: {out['cold_first_ms']:.1f} ms) "
              f"[{out['solver']}, {out['started']} started]" + (" (target <= 25 ms)" if a.policy == "lyapunov" else ""))


def _hash(res) -> str:
    """A slot's whole answer: starts (placements, scores, reasons), preemptions, Q, Z and info."""
    info = sorted((k, repr(v)) for k, v in res.info.items())
    return hashlib.sha1(repr(([(d.job_id, d.gpus, d.placement, d.score, d.reason, d.batch) for d in res.starts],
                              res.preempt, res.q, res.z, info)).encode()).hexdigest()


def digest() -> dict[str, str]:
    """`--digest`: per (policy, seed, case) the SHA-1 of one typed slot's answer, and one over all.
    Cases: ``many`` (2,000 waiting jobs, 256 nodes of 3 types, running jobs on the busy GPUs),
    ``scarce`` (the same with one free GPU per type), ``few`` (12 of its waiting jobs, where the
    slot may start nothing and answer a wake-up time)."""
    from dataclasses import replace

    out: dict[str, str] = {}
    for seed in (0, 1):
        base = typed(build(2000, 256, 4, 16, seed, running=True), 3, 4, 16)
        nt = base.node_types
        first = {t: nt.index(t) for t in dict.fromkeys(nt)}
        scarce = tuple(1 if i in first.values() else 0 for i in range(len(nt)))
        cases = {"many": base, "scarce": replace(base, free=scarce),
                 "few": replace(base, waiting=base.waiting[:12], free=scarce)}
        for policy in ("lyapunov", "elastic"):
            for case, st in cases.items():
                pol = make_policy(policy)
                out[f"{policy}/{seed}/{case}"] = _hash(pol.decide(st)) + "/" + _hash(pol.decide(st))
    out["all"] = hashlib.sha1(repr(sorted(out.items())).encode()).hexdigest()
    return out


def compare(a: argparse.Namespace) -> None:
    """This tree against ``a.against``, each run in a fresh process with its package first on the path."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [sys.argv[0], *_strip(sys.argv[1:]), "--json"]
    trees = {"against": os.path.abspath(a.against), "this": here}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for i in range(a.rounds):
        for k, root in trees.items():
            env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
            p = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"decision_overhead.py: the run with {root} failed: {p.stderr.strip().splitlines()[-1:]}")
            d = json.loads(p.stdout)
            if os.path.realpath(d["package"]) != os.path.realpath(root):
                sys.exit(f"decision_overhead.py: the run meant for {root} imported {d['package']}")
            runs[k].append(d)
            print(f"[round {i + 1}/{a.rounds}] {k}: {d['median_ms']:.2f} ms", file=sys.stderr, flush=True)
    ratios = [t["median_ms"] / o["median_ms"] for t, o in zip(runs["this"], runs["against"])]
    out = {
        "against": trees["against"], "this": here, "rounds": a.rounds, "policy": a.policy,
        "median_ms": {k: statistics.median(r["median_ms"] for r in v) for k, v in runs.items()},
        "ratio_per_round": ratios, "ratio": statistics.median(ratios),
        "same_decisions": len({r["decisions_sha1"] for v in runs.values() for r in v}) == 1,
    }
    if a.json:
        print(json.dumps(out))
    else:
        m = out["median_ms"]
        print(f"{a.policy}: this tree {m['this']:.2f} ms, {a.against} {m['against']:.2f} ms, ratio {out['ratio']:.3f} "
              f"(per round {', '.join(f'{x:.3f}' for x in ratios)}); same decisions: {out['same_decisions']}")


def _strip(argv: list[str]) -> list[str]:
    """The command line less --against/--rounds/--json (the child runs are single timings in JSON)."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x in ("--against", "--rounds"):
            skip = True
            continue
        if x == "--json" or x.startswith("--against=") or x.startswith("--rounds="):
            continue
        out.append(x)
    return out


if __name__ == "__main__":
    main()
