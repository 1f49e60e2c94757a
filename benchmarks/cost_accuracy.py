#!/usr/bin/env python3
"""Accuracy of the cost model on measured multi-GPU iteration times (Pollux artifact data).

For every <app>/placements.csv under --profiles: fit t(b) on the single-GPU rows and the
communication model (link, overlap, slowdown) on ONE multi-GPU placement, then predict
step_time for every other multi-GPU row (and every scalability.csv row). Prints median
and p90 absolute relative error per app and overall. docs/calibration.md discusses it.

    python benchmarks/cost_accuracy.py [--profiles DIR] [--fit-placement 2222] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lyasched.calibration import (  # noqa: E402
    calibrate_app,
    parse_placement,
    read_placements_csv,
    read_scalability_csv,
    summarize,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default=str(REPO.parent / "shared" / "data" / "profiles"),
                    help="directory with <app>/placements.csv (default ../shared/data/profiles from the repo)")
    ap.add_argument("--fit-placement", default=None,
                    help="the one multi-GPU placement to fit the communication model on (default: 2222 or the "
                         "widest 2-GPUs-per-node placement present)")
    ap.add_argument("--plain", action="store_true",
                    help="baseline: the plain ring term (no overlap, no multi-GPU slowdown), only V/bw fitted")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)

    root = Path(args.profiles)
    if not root.is_absolute() and not root.exists():
        root = REPO / root
    files = sorted(root.glob("*/placements.csv"))
    if not files:
        print(f"error: no <app>/placements.csv under {root}", file=sys.stderr)
        return 2
    try:
        fp = parse_placement(args.fit_placement) if args.fit_placement else None
        reports = []
        for f in files:
            scal_path = f.parent / "scalability.csv"
            scal = read_scalability_csv(scal_path) if scal_path.exists() else []
            reports.append(calibrate_app(f.parent.name, read_placements_csv(f), fp, scal, plain=args.plain))
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    overall = summarize([e for r in reports for e in r.errors])
    scal_all = [e for r in reports for e in r.scal_errors]
    if args.json:
        out = {
            "apps": {r.app: r.placements.as_dict() for r in reports},
            "overall": overall.as_dict(),
            "fits": {
                r.app: {
                    "alpha": r.profile.alpha, "beta": r.profile.beta,
                    "fitted_on": r.comm.fitted_on,
                    "allreduce_volume_time_s": 1.0 / r.comm.inter.bandwidth if len(r.comm.fitted_on) > 1
                    else 1.0 / r.comm.intra.bandwidth,
                    "overlap_gamma": r.comm.overlap, "slowdown": r.comm.slowdown,
                }
                for r in reports
            },
        }
        if scal_all:
            out["scalability"] = {
                "apps": {r.app: r.scalability.as_dict() for r in reports if r.scalability},
                "overall": summarize(scal_all).as_dict(),
            }
        print(json.dumps(out, indent=2))
        return 0

    print(f"profiles: {root}" + ("   (baseline: plain ring, no overlap)" if args.plain else ""))
    for r in reports:
        c = r.comm
        vol = 1.0 / (c.inter.bandwidth if c.derived == "intra" else c.intra.bandwidth)
        print(f"\n{r.app}: t(b) = {r.profile.alpha * 1e3:.2f} ms + {r.profile.beta * 1e3:.4f} ms/sample; "
              f"fitted on placement {c.fitted_on}: V/bw = {vol * 1e3:.1f} ms, overlap gamma = {c.overlap:.2f}, "
              f"multi-GPU slowdown = {c.slowdown:.3f} (fit residual median {c.residual_median:.1%})")
        print(f"  placements.csv  rows={r.placements.rows:4d}  median={r.placements.median_abs_rel_err:6.1%}  "
              f"p90={r.placements.p90_abs_rel_err:6.1%}")
        for n, a in r.by_nodes.items():
            print(f"    {n} node(s)     rows={a.rows:4d}  median={a.median_abs_rel_err:6.1%}  p90={a.p90_abs_rel_err:6.1%}")
        if r.scalability:
            s = r.scalability
            print(f"  scalability.csv rows={s.rows:4d}  median={s.median_abs_rel_err:6.1%}  p90={s.p90_abs_rel_err:6.1%}")
    print(f"\noverall placements.csv  rows={overall.rows:4d}  median={overall.median_abs_rel_err:6.1%}  "
          f"p90={overall.p90_abs_rel_err:6.1%}   (target median <= 10%, p90 <= 20%)")
    if scal_all:
        s = summarize(scal_all)
        print(f"overall scalability.csv rows={s.rows:4d}  median={s.median_abs_rel_err:6.1%}  p90={s.p90_abs_rel_err:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
