"""Pollux's own benchmark: the OSDI'21 artifact's 8 workloads at each load, replayed under lyasched's
policies, beside the published Pollux, Tiresias+TunedJobs and Optimus+Oracle+TunedJobs figures.

    python benchmarks/pollux_benchmark.py [--json] [--loads 0.5,1.0,1.5,2.0] [--workloads 1-8]
        [--policies pollux,tiresias,elastic,elastic:fixed] [--data ../shared/data/pollux] [--jobs N]

Each workload is read with `lyasched.sim.pollux_trace` on 16 x 4 GPUs, replayed with the
artifact's settings: 60 s scheduling interval, 30 s per (re)allocation, exact run times (the
artifact's simulator knows the measured step times). A policy named ``NAME:fixed`` (and
``tiresias``, ``optimus``: the artifact's TunedJobs) runs every job at its row's batch on its
row's replicas as request; the others run the jobs adaptive (batch from the application's
smallest validated batch up to its largest, as under Pollux).

Figures: per load, the mean over the chosen workloads of each policy's average JCT, in hours,
and the published means over the same workloads (``results/<policy>-<load>/summary.json``).
``--json`` prints ``{"loads": {"0.5": {"published": {"pollux": H, "tiresias": H, "optimus": H},
"policies": {NAME: H}, "workloads": {NAME: {POLICY: H}}}, ...}}``. Held out: workloads 5-8 and
the 1.5x load (``--workloads 5-8``), never looked at while a policy was tuned. Progress on stderr.
``tiresias`` runs with the artifact's settings (one threshold at 16 GPU-hours, no minimum run).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

LOADS = ("0.5", "1.0", "1.5", "2.0")
PUBLISHED = ("pollux", "tiresias", "optimus")
FIXED_BY_NATURE = {"tiresias", "optimus"}
# the artifact's Tiresias (simulator/tiresias.py): two queues split at 16 GPU-hours, preemption at once
ARTIFACT_PARAMS = {"tiresias": {"thresholds": (57600.0,), "min_run_s": 0.0}}
DEFAULT_POLICIES = "pollux,tiresias,elastic"


def workload_path(data: str, load: str, k: int) -> str:
    sub = "workloads" if load == "1.0" else f"workloads-{load}"
    return os.path.join(data, sub, f"workload-{k}.csv")


def replay_one(args: tuple[str, str, int, str]) -> tuple[str, int, str, float, float, float]:
    """(load, workload, policy, average JCT in hours, wall seconds, CPU seconds) of one replay
    (CPU seconds: what it costs on a core of its own, when the machine is shared)."""
    data, load, k, name = args
    from lyasched.policy import make_policy
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    policy, _, mode = name.partition(":")
    fixed = mode == "fixed" or policy in FIXED_BY_NATURE
    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"), adaptive=not fixed)
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    t, c = time.perf_counter(), time.process_time()
    r = sim.run(make_policy(policy, **ARTIFACT_PARAMS.get(policy, {})), name=name)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return load, k, name, summarize(r)["avg_jct_s"] / 3600.0, wall, cpu


def published(data: str, load: str, ks: list[int]) -> dict[str, float]:
    out = {}
    for p in PUBLISHED:
        path = os.path.join(data, "results", f"{p}-{load}", "summary.json")
        if os.path.isfile(path):
            with open(path) as f:
                avgs = json.load(f)["avgs"]
            out[p] = sum(avgs[f"workload-{k}"] for k in ks) / len(ks) / 3600.0
    return out


def parse_range(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "pollux"))
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--workloads", default="1-8")
    ap.add_argument("--policies", default=DEFAULT_POLICIES)
    ap.add_argument("--jobs", type=int, default=2, help="parallel replays (processes)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
        ks = parse_range(a.workloads)
    except ValueError:
        print("Error: --loads are numbers, --workloads a range such as 1-8 or 5,7", file=sys.stderr)
        return 2
    names = [p.strip() for p in a.policies.split(",") if p.strip()]
    from lyasched.policy import POLICIES

    bad = [n for n in names if n.partition(":")[0] not in POLICIES or n.partition(":")[2] not in ("", "fixed")]
    missing = [workload_path(a.data, ld, k) for ld in loads for k in ks if not os.path.isfile(workload_path(a.data, ld, k))]
    if bad or missing or not names:
        print(f"Error: unknown policy {bad}" if bad else f"Error: no workload {missing[:1]}" if missing
              else "Error: no policy", file=sys.stderr)
        return 2
    tasks = [(a.data, ld, k, n) for ld in loads for k in ks for n in names]
    res: dict[str, dict[int, dict[str, float]]] = {ld: {k: {} for k in ks} for ld in loads}
    walls: dict[str, float] = {}
    cpus: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for ld, k, n, h, wall, cpu in ex.map(replay_one, tasks):
            res[ld][k][n] = h
            walls[n] = max(walls.get(n, 0.0), wall)
            cpus[n] = max(cpus.get(n, 0.0), cpu)
            print(f"{ld}x workload-{k} {n}: {h:.3f} h ({wall:.1f} s, {cpu:.1f} s CPU)", file=sys.stderr)
    out = {"loads": {}, "max_replay_s": walls, "max_replay_cpu_s": cpus, "workloads": ks}
    for ld in loads:
        out["loads"][ld] = {
            "published": published(a.data, ld, ks),
            "policies": {n: sum(res[ld][k][n] for k in ks) / len(ks) for n in names},
            "workloads": {f"workload-{k}": res[ld][k] for k in ks},
        }
    if a.json:
        print(json.dumps(out))
        return 0
    refs = {n: n if n in PUBLISHED else "pollux" for n in names}  # each beside its published counterpart
    heads = ["load", *(f"pub {p}" for p in PUBLISHED), *names, *(f"{n}/pub {refs[n]}" for n in names)]
    rows = []
    for ld in loads:
        pub, pol = out["loads"][ld]["published"], out["loads"][ld]["policies"]
        rows.append([ld, *(f"{pub[p]:.2f}" if p in pub else "-" for p in PUBLISHED), *(f"{pol[n]:.2f}" for n in names),
                     *(f"{pol[n] / pub[refs[n]]:.2f}" if refs[n] in pub else "-" for n in names)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    print(f"mean average JCT (h) over workloads {a.workloads}; slowest replay per policy, wall / CPU s: "
          + ", ".join(f"{n} {w:.1f}/{cpus[n]:.1f}" for n, w in walls.items()))
    for r in [heads, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
