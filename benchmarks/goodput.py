"""Goodput benchmark (issue 35): elastic choosing each adaptive job's batch with its GPUs, against
pollux, elastic with every batch fixed at M0, and tiresias.

    python benchmarks/goodput.py [--quick] [--json] [--only design|heldout] [--loads 0.5,1,2]
        [--jobs N] [--family-only] [--wall-limit SECONDS] [--policy elastic|hesrpt|...]

Workloads: the ``synth:adaptive`` family (160 mixed jobs on 16 x 4 GPUs, 3/4 of them adaptive,
phi curves rising, flat and late) at loads 0.5, 1.0 and 2.0 on several seeds, plus
`benchmarks/robustness.py`'s seed groups and synthetic shapes with half of their jobs made
adaptive (the ``synth:`` family's own curves, `mix_adaptive`). Each workload is replayed four ways:

* ``goodput``: `elastic` on the adaptive jobs (its rows are at each job's best batch per GPU
  count; a start's ``Decision.batch`` None runs it at that batch, docs/elastic.md);
* ``pollux``: the Pollux baseline on the same jobs;
* ``elastic``: `elastic` on the same jobs with ``adaptive`` stripped (every batch fixed at M0);
* ``tiresias``: `tiresias` on the stripped jobs (a fixed-batch scheduler, as in Pollux's paper).

Sets, fixed before any rule was tried: ``design`` (seeds 0 and 1 of the family, the seed groups
at seed 0) is what the policy was looked at on; ``heldout`` (seeds 101-103 of the family, a
second shape of it on another cluster, the seed groups at seed 3, two synthetic shapes) was
run only to judge; ``heldout`` also holds ``wide`` rows (FAMILY_WIDE: adaptive jobs may take up
to 4 nodes; added with the adaptive-aware rules, fixed before any was tried), summarised apart
from the family's (``heldout/wide``). ``--json`` prints {"workloads": [...], "worst": {...}, "median": {...},
"sets": {...}}; ratios are the goodput policy's average JCT over the other's. Targets (issue
35, on the adaptive family at every load): median vs_pollux <= 0.85 and worst <= 1.00; median
vs_elastic <= 0.80. Progress on stderr. A replay that takes more than ``--wall-limit`` seconds of
wall time (pollux on a few mixed workloads) is listed in its row's ``timed_out``, without figures.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Sequence

import numpy as np

from lyasched.costmodel.jobspec import Job
from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.simulator import WallTimeExceeded
from lyasched.sim.synth import SynthSpec, _adaptive, synth_workload
from lyasched.sim.workloads import SEED_GROUPS, seed_workload

RATIOS = ("vs_pollux", "vs_elastic", "vs_tiresias")
# the lowest vs_pollux / vs_elastic any policy could reach on a workload: the mean of each job's best
# run alone on the cluster (adaptive, at its best batch) over the other's average JCT
BOUNDS = ("bound_vs_pollux", "bound_vs_elastic")
# (label, policy, jobs): which policy replays which version of the workload's jobs
RUNS = (("goodput", "elastic", "adaptive"), ("pollux", "pollux", "adaptive"),
        ("elastic", "elastic", "fixed"), ("tiresias", "tiresias", "fixed"))
LOADS = (0.5, 1.0, 2.0)
FAMILY = "synth:adaptive"
# the family's second shape (held out): 8 x 8 GPUs, bursts, models that scale well, other curves mix
FAMILY_2 = "synth:adaptive,nodes=8,gpn=8,arrival=bursts,bursts=6,models=good,max_mult=16"
# a third held-out shape, added with the adaptive-aware rules (fixed before any was tried) and reported in
# rows of its own (``wide``, outside the family's summaries): the family's jobs with an adaptive job's
# GPUs capped at max(request, 4 nodes) instead of one node, so choosing the batch can shorten a job more
FAMILY_WIDE = "synth:adaptive,ad_nodes=4"
DESIGN_SEEDS = (0, 1)
HELDOUT_SEEDS = (101, 102, 103)
MIX_SHARE = 0.5  # share of a robustness workload's jobs made adaptive
# robustness.py's synthetic shapes (spec, seed) with adaptive jobs mixed in
SYNTH_MIXED_DESIGN = [("synth:mixed160", 0), ("synth:jobs=300,models=good,one_gpu=0.3,dur=bimodal,load=0.8", 0)]
SYNTH_MIXED_HELDOUT = [("synth:mixed160,load=1.2", 11), ("synth:jobs=300,one_gpu=0.2,max_req=16,dur=const,models=good,arrival=bursts,load=0.6", 8)]


def fixed(jobs: Sequence[Job]) -> tuple[Job, ...]:
    """The same jobs with every batch fixed at its base batch M0 (``adaptive`` stripped)."""
    return tuple(replace(j, adaptive=None) if j.adaptive is not None else j for j in jobs)


def mix_adaptive(jobs: Sequence[Job], seed: int, share: float = MIX_SHARE) -> tuple[Job, ...]:
    """``jobs`` with a ``share`` of them opted in to batch choice, drawn as the ``synth:`` family
    draws its adaptive jobs (its own RNG stream: the jobs themselves are unchanged)."""
    return tuple(_adaptive(list(jobs), SynthSpec(adaptive=share), seed))


def family_row(spec: str, load: float, seed: int, set_name: str, jobs: int | None = None, wide: bool = False) -> dict:
    """A family workload; ``wide``: the FAMILY_WIDE shape (its own rows, not the family's)."""
    spec = spec if jobs is None else f"{spec},jobs={jobs}"
    s = synth_workload(spec, seed, load=load)
    return dict(name=f"{spec} load {load:g} seed {seed}", set=set_name, family=not wide, wide=wide, load=load,
                jobs=s.jobs, cluster=s.cluster, end_fraction=s.end_fraction, seed=seed)


def workloads(quick: bool, only: str | None, loads: Sequence[float] = LOADS, jobs: int | None = None,
              family_only: bool = False) -> list[dict]:
    """The benchmark's workloads: dict(name, set, family, load, jobs, cluster, end_fraction, seed).
    ``jobs``: the family's job count (default 160, 60 quick); ``family_only``: no mixed workloads."""
    out: list[dict] = []
    small = jobs if jobs is not None else 60 if quick else None
    # (set, family seeds, second shape, wide shape, group seed, mixes)
    sets = (("design", DESIGN_SEEDS, (), (), 0, SYNTH_MIXED_DESIGN),
            ("heldout", HELDOUT_SEEDS, (FAMILY_2,), (FAMILY_WIDE,), 3, SYNTH_MIXED_HELDOUT))
    for name, seeds, shapes, wides, group_seed, mixed in sets:
        if only not in (None, name):
            continue
        for load in loads:
            for s in seeds[:1] if quick else seeds:
                out.append(family_row(FAMILY, load, s, name, small))
            for shape in shapes:
                out.append(family_row(shape, load, seeds[0], name, small))
            for shape in wides:
                out.append(family_row(shape, load, seeds[0], name, small, wide=True))
        for g in () if family_only else list(SEED_GROUPS)[:2] if quick else SEED_GROUPS:
            w = seed_workload(g, group_seed)
            out.append(dict(name=f"{g} seed {group_seed} + adaptive", set=name, family=False, wide=False,
                            jobs=mix_adaptive(w.jobs, group_seed), cluster=w.cluster, end_fraction={}, seed=group_seed))
        for spec, s in () if family_only else mixed[:1] if quick else mixed:
            w = synth_workload(spec, s)
            out.append(dict(name=f"{spec} seed {s} + adaptive", set=name, family=False, wide=False,
                            jobs=mix_adaptive(w.jobs, s), cluster=w.cluster, end_fraction=w.end_fraction, seed=s))
    return out


def run_one(w: dict, runs: Sequence[tuple[str, str, str]] = RUNS, wall_limit_s: float | None = None) -> dict:
    """Replay ``w`` under each run; average JCT per run and the goodput policy's ratios. A replay
    past ``wall_limit_s`` seconds of wall time is listed in ``timed_out`` and has no figures (nor
    do the ratios that need it)."""
    versions = {"adaptive": tuple(w["jobs"]), "fixed": fixed(w["jobs"])}
    sims: dict[str, Simulation] = {}
    per: dict[str, dict] = {}
    timed_out: list[str] = []
    for label, policy, version in runs:
        sim = sims.get(version)
        if sim is None:
            sim = sims[version] = Simulation(versions[version], w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"])
        try:
            per[label] = summarize(sim.run(make_policy(policy, seed=w["seed"]), name=label, wall_limit_s=wall_limit_s))
        except WallTimeExceeded:
            timed_out.append(label)
    jct = {k: v["avg_jct_s"] for k, v in per.items()}
    # no policy's average JCT is below the mean of each job's best run alone on the cluster
    bound = {v: float(np.mean(s.best_true_runs())) for v, s in sims.items()}
    c = w["cluster"]
    row = {
        "name": w["name"], "set": w["set"], "family": w["family"], "wide": w.get("wide", False), "load": w.get("load"),
        "jobs": len(w["jobs"]),
        "adaptive_jobs": sum(j.adaptive is not None for j in w["jobs"]), "cluster": f"{c.nodes}x{c.gpus_per_node}",
        "avg_jct_s": jct,
        "bound_s": bound,
        "resizes": {k: v["resizes"] for k, v in per.items()},
        "preemptions": {k: v["preemptions"] for k, v in per.items()},
        "gpu_util": {k: v["gpu_util"] for k, v in per.items()},
        "timed_out": timed_out,
    }
    for k in RATIOS:
        other = k[3:]
        if "goodput" in jct and other in jct:
            row[k] = jct["goodput"] / jct[other]
    if "pollux" in jct and "adaptive" in bound:  # the lowest vs_pollux any policy could reach here
        row["bound_vs_pollux"] = bound["adaptive"] / jct["pollux"]
    if "elastic" in jct and "adaptive" in bound:
        row["bound_vs_elastic"] = bound["adaptive"] / jct["elastic"]
    return row


def summary(rows: list[dict], ratios: Sequence[str] = RATIOS) -> tuple[dict, dict]:
    """Worst and median of each ratio over the rows that have it (a timed-out replay has none)."""
    keys = [k for k in ratios if any(k in r for r in rows)]
    worst = {k: float(max(r[k] for r in rows if k in r)) for k in keys}
    med = {k: float(np.median([r[k] for r in rows if k in r])) for k in keys}
    return worst, med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60-job family workloads, one seed per set, fewer mixed ones")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=("design", "heldout"), default=None)
    ap.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS), help="loads of the adaptive family")
    ap.add_argument("--jobs", type=int, default=None, help="jobs per family workload (default 160; 60 with --quick)")
    ap.add_argument("--family-only", action="store_true", help="only the adaptive family, no mixed workloads")
    ap.add_argument("--policy", default="elastic", help="the policy of the goodput run (default elastic)")
    ap.add_argument("--wall-limit", type=float, default=900.0,
                    help="seconds of wall time a replay may take before it is listed as timed out (default 900)")
    a = ap.parse_args()
    if a.jobs is not None and a.jobs < 1:
        ap.exit(2, f"goodput.py: --jobs {a.jobs}: expected a count >= 1\n")
    try:
        loads = [float(x) for x in a.loads.split(",") if x]
        if not loads or min(loads) <= 0:
            raise ValueError
    except ValueError:
        ap.exit(2, f"goodput.py: --loads {a.loads!r}: expected numbers > 0, e.g. 0.5,1,2\n")
    from lyasched.policy import POLICIES

    if a.policy not in POLICIES:
        ap.exit(2, f"goodput.py: --policy {a.policy!r}: expected one of {', '.join(POLICIES)}\n")
    runs = tuple((label, a.policy if label == "goodput" else policy, version) for label, policy, version in RUNS)
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    ws = workloads(a.quick, a.only, loads, a.jobs, a.family_only)
    rows = []
    t0 = time.perf_counter()
    for k, w in enumerate(ws):
        r = run_one(w, runs, wall_limit_s=a.wall_limit)
        rows.append(r)
        j = r["avg_jct_s"]
        print(f"[{k + 1}/{len(ws)} {time.perf_counter() - t0:.0f}s] {r['name']}: "
              + " ".join(f"{p} {j[p]:.0f}s" for p in j) + "  "
              + " ".join(f"{x} {r[x]:.3f}" for x in RATIOS if x in r)
              + (f"  timed out: {', '.join(r['timed_out'])}" if r["timed_out"] else ""), file=sys.stderr, flush=True)
    worst, med = summary(rows)
    groups = {}
    both = (*RATIOS, *BOUNDS)
    for s in ("design", "heldout"):
        for name, sel in (("family", lambda r: r["family"]), ("wide", lambda r: r["wide"]),
                          ("mixed", lambda r: not r["family"] and not r["wide"])):
            sub = [r for r in rows if sel(r) and r["set"] == s]
            if sub:
                sw, sm = summary(sub, both)
                groups[f"{s}/{name}"] = {"workloads": len(sub), "worst": sw, "median": sm}
        for load in loads:  # the targets are per load of the family
            for name in ("family", "wide"):
                sub = [r for r in rows if r[name] and r["set"] == s and r["load"] == load]
                if sub:
                    sw, sm = summary(sub, both)
                    groups[f"{s}/{name}/load {load:g}"] = {"workloads": len(sub), "worst": sw, "median": sm}
    report = {"workloads": rows, "worst": worst, "median": med, "sets": groups, "wall_s": round(time.perf_counter() - t0, 1)}
    if a.json:
        print(json.dumps(report))
        return
    print(f"{'workload':72s} {'set':7s} {'goodput':>8s} {'pollux':>8s} {'elastic':>8s} {'tiresias':>8s}  "
          f"{'/pol':>5s} {'/ela':>5s} {'/tir':>5s}")
    for r in rows:
        j = r["avg_jct_s"]
        print(f"{r['name'][:72]:72s} {r['set']:7s} " + " ".join(f"{j.get(p, float('nan')):8.0f}" for p in
                                                             ("goodput", "pollux", "elastic", "tiresias"))
              + "  " + " ".join(f"{r.get(k, float('nan')):5.2f}" for k in RATIOS))
    for label, d in [("all", {"worst": worst, "median": med}), *groups.items()]:
        print(f"{label:16s} worst  " + "  ".join(f"{k} {v:.3f}" for k, v in d["worst"].items()))
        print(f"{label:16s} median " + "  ".join(f"{k} {v:.3f}" for k, v in d["median"].items()))


if __name__ == "__main__":
    main()
