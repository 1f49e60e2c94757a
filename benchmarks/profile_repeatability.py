"""How far two measurements of the same profiles differ: the noise floor of the cost model's per-app
accuracy (issue 12).

`benchmarks/cost_accuracy.py` reports, per app, the median and p90 of |predicted / measured - 1|. A
prediction cannot be judged more finely than the measurement repeats: this script compares two
profile directories of the same machine and models (``<app>/placements.csv`` each, e.g. the same
`measure_ddp_profiles.py` command on two days) row by row, matched on placement and per-GPU batch,
and prints per app the median and p90 of |t_b / t_a - 1| over the multi-GPU rows (what
cost_accuracy predicts) and over the one-GPU rows (what it fits compute on). docs/calibration.md.

    python benchmarks/profile_repeatability.py DIR_A DIR_B [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lyasched.costmodel.calibration import PlacementRow, read_placements_csv, summarize  # noqa: E402


def differences(a: list[PlacementRow], b: list[PlacementRow]) -> tuple[list[float], list[float]]:
    """|t_b / t_a - 1| of the rows both lists measured (same placement and per-GPU batch):
    (one-GPU rows, multi-GPU rows)."""
    by_key = {(r.placement, r.local_bsz): r for r in a if r.step_time > 0}
    one: list[float] = []
    multi: list[float] = []
    for r in b:
        ra = by_key.get((r.placement, r.local_bsz))
        if ra is None or r.step_time <= 0:
            continue
        (multi if r.gpus > 1 else one).append(abs(r.step_time / ra.step_time - 1.0))
    return one, multi


def compare(dir_a: Path, dir_b: Path) -> dict:
    """Per app present in both directories, and over all of them, the row-by-row differences."""
    apps = sorted({p.parent.name for p in dir_a.glob("*/placements.csv")}
                  & {p.parent.name for p in dir_b.glob("*/placements.csv")})
    if not apps:
        raise ValueError(f"no <app>/placements.csv in both {dir_a} and {dir_b}")
    out: dict = {"apps": {}}
    all_one: list[float] = []
    all_multi: list[float] = []
    for app in apps:
        one, multi = differences(read_placements_csv(dir_a / app / "placements.csv"),
                                 read_placements_csv(dir_b / app / "placements.csv"))
        if not one and not multi:
            raise ValueError(f"{app}: the two directories share no row (placement and batch)")
        out["apps"][app] = {"one_gpu": summarize(one).as_dict(), "multi_gpu": summarize(multi).as_dict()}
        all_one += one
        all_multi += multi
    out["overall"] = {"one_gpu": summarize(all_one).as_dict(), "multi_gpu": summarize(all_multi).as_dict()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir_a", help="profiles directory (<app>/placements.csv)")
    ap.add_argument("dir_b", help="the same apps measured again")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    try:
        res = compare(Path(args.dir_a), Path(args.dir_b))
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"|t_b / t_a - 1| row by row, {args.dir_a} -> {args.dir_b}")
    print(f"{'app':14s} {'1 GPU: rows':>11s} {'median':>7s} {'p90':>7s}   {'multi: rows':>11s} {'median':>7s} {'p90':>7s}")
    for name, r in list(res["apps"].items()) + [("overall", res["overall"])]:
        o, m = r["one_gpu"], r["multi_gpu"]
        print(f"{name:14s} {o['rows']:11d} {o['median_abs_rel_err']:7.1%} {o['p90_abs_rel_err']:7.1%}   "
              f"{m['rows']:11d} {m['median_abs_rel_err']:7.1%} {m['p90_abs_rel_err']:7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
