#!/usr/bin/env python3
"""Elastic on a family of workloads, not one: a synthetic spec (default `synth:mixed160`, issue
8's 160 mixed jobs on 16 x 4 GPUs) over many seeds and loads, elastic against lyapunov and tiresias.

Each workload is replayed as `lyasched replay -w synth:SPEC,load=L --seed S --policies
lyapunov,elastic,tiresias` would (`elastic_sweep.run_one`: the same simulator defaults, estimates
with their default error); per variant it prints elastic's worst and median ratio to lyapunov and
to tiresias, how many workloads meet issue 13's targets (<= 1.00x lyapunov, <= 0.90x tiresias)
and the worst four. A VARIANT is ``;``-separated ``elastic.KEY=VALUE`` items ("" = the defaults).

``--noise-seeds 0,1,2`` replays every workload under several simulator seeds (seed + 7919 n, as
robustness_variants.py: other draws of the estimates' errors and true run times, the jobs the
same) and judges each policy on its average JCT over them: on a 160-job workload one draw moves
elastic / lyapunov by 10% and more (issue 13, eleventh pass). Rows then carry the per-draw ratios.

    python benchmarks/experiments/elastic_family.py [--spec mixed160] [--first-seed 0] [--seeds 30] [--loads 0.8,1.0,1.2]
        [--noise-seeds 0] [--json] VARIANT [VARIANT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # the variants and sweeps here, robustness.py in benchmarks/
from elastic_sweep import run_draws  # noqa: E402
from robustness import noise_seeds, synth_row  # noqa: E402

from lyasched.policy.params import ParamError  # noqa: E402
from variants import parse_params  # noqa: E402
from lyasched.sim.synth import synth_workload  # noqa: E402


def replay(spec: str, load: float, seed: int, params: dict[str, dict], noise: Sequence[int] = (0,)) -> dict:
    """One member of the family (`elastic_sweep.run_draws`): lyapunov's, elastic's and tiresias's
    average JCT (means over the draws ``noise``) and, with several draws, each draw's ratios."""
    r = run_draws(synth_row(f"synth:{spec},load={load}", seed, "family"), params, noise)
    return {**r["avg_jct_s"], **{k: v for k, v in r.items() if k.startswith("draws_")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", metavar="VARIANT")
    ap.add_argument("--seeds", type=int, default=30, help="seeds FIRST..FIRST+N-1")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--spec", default="mixed160", help="the family's synthetic spec without its load (docs/simulator.md)")
    ap.add_argument("--loads", default="0.8,1.0,1.2")
    ap.add_argument("--noise-seeds", default="0", help="comma-separated n >= 0: average each policy's JCT over "
                    "simulator seeds seed + 7919 n (default: one draw, n = 0)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        noise = noise_seeds(args.noise_seeds)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        loads = [float(x) for x in args.loads.split(",") if x]
    except ValueError:
        print(f"error: --loads {args.loads!r}: expected comma-separated numbers", file=sys.stderr)
        return 2
    if args.seeds < 1 or not loads:
        print("error: --seeds must be >= 1 and --loads non-empty", file=sys.stderr)
        return 2
    try:
        parsed = [parse_params([p for p in v.split(";") if p], ["elastic"]) for v in args.variants]
        synth_workload(f"synth:{args.spec},load={loads[0]}", args.first_seed)
    except (ParamError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = []
    for v, params in zip(args.variants, parsed):
        rows = []
        for load in loads:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                r = replay(args.spec, load, seed, params, noise)
                rows.append({"load": load, "seed": seed, **r, "vs_lyapunov": r["elastic"] / r["lyapunov"],
                             "vs_tiresias": r["elastic"] / r["tiresias"]})
                print(f"[{v or 'defaults'}] load {load} seed {seed}: {rows[-1]['vs_lyapunov']:.3f} / {rows[-1]['vs_tiresias']:.3f}",
                      file=sys.stderr, flush=True)
        vl = [r["vs_lyapunov"] for r in rows]
        vt = [r["vs_tiresias"] for r in rows]
        summary = {"variant": v, "workloads": len(rows),
                   "vs_lyapunov": {"worst": max(vl), "median": statistics.median(vl), "met": sum(x <= 1.0 for x in vl)},
                   "vs_tiresias": {"worst": max(vt), "median": statistics.median(vt), "met": sum(x <= 0.9 for x in vt)},
                   "worst4": sorted(rows, key=lambda r: -r["vs_lyapunov"])[:4], "rows": rows}
        report.append(summary)
        if not args.json:
            a, b = summary["vs_lyapunov"], summary["vs_tiresias"]
            print(f"[{v or 'defaults'}] vs lyapunov: worst {a['worst']:.3f} median {a['median']:.3f} met {a['met']}/{len(rows)} | "
                  f"vs tiresias: worst {b['worst']:.3f} median {b['median']:.3f} met(<=0.90) {b['met']}/{len(rows)} | worst: "
                  + ", ".join(f"{r['load']}/s{r['seed']} {r['vs_lyapunov']:.3f}" for r in summary["worst4"]), flush=True)
    if args.json:
        print(json.dumps({"family": f"synth:{args.spec}", "loads": loads, "first_seed": args.first_seed, "seeds": args.seeds,
                          "noise_seeds": noise, "variants": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
