#!/usr/bin/env python3
"""Accuracy of the cost model on measured multi-GPU iteration times.

Protocol ``per-app`` (the old one): for every <app>/placements.csv under --profiles, fit t(b)
on the single-GPU rows and the communication model (link, overlap, slowdown) on ONE
multi-GPU placement of that app, then predict every other multi-GPU row.

Protocol ``leave-one-app-out`` (default): every cluster-level parameter (overlap, contention,
growth of the all-reduce with GPUs and nodes: `lyasched.costmodel.commshape`) is fitted on the OTHER
apps of the held-out app's cluster; of the held-out app only its single-GPU rows and ONE
multi-GPU placement are used; every other row of it, scalability.csv included, is predicted.
Each --profiles directory is one cluster (default: the shared Pollux profiles, the profiles
measured on this machine, benchmarks/data/profiles, and those measured on the CPU cores of the
GPU machine lent on 2026-11-26, benchmarks/data/profiles-h200host, and this machine's profiles
measured again a day later, benchmarks/data/profiles-rerun). A CPU cluster's profiles record
the measuring host's ``cores=`` and ``threads_per_rank=`` (the replicas a node runs side by
side: `CommShape.parallel`). Apps named by ``held_out=`` in a cluster's CLUSTER file (or
``--held-out``) are predicted the same way but are in no other app's training set, and are
reported apart from "overall". docs/calibration.md.

Protocol ``online`` (issue 34): the same cluster fit as prior; of each app its 1-GPU rows and
the rows of the first k = 1, 2, 3 placements it would meet (its request, then neighbours); the
job's own model (`lyasched.costmodel.online.fit_job`) predicts every other placement. ``--by
placement|shape`` adds signed residual tables to leave-one-app-out. The list of (application,
node count) target misses closes the default output.

    python benchmarks/cost_accuracy.py [--protocol leave-one-app-out|per-app|online] [--profiles DIR ...]
        [--held-out APP ...] [--by placement|shape] [--batch-fit shape|line] [--online-fit job|v] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lyasched.costmodel.calibration import (  # noqa: E402
    Accuracy,
    BATCH_FITS,
    by_placement,
    AppData,
    calibrate_app,
    leave_one_app_out,
    parse_placement,
    read_grad_bytes,
    read_parallel,
    read_placements_csv,
    read_scalability_csv,
    summarize,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=["leave-one-app-out", "per-app", "online"], default="leave-one-app-out")
    ap.add_argument("--profiles", action="append", default=None,
                    help="directory with <app>/placements.csv, one per cluster, repeatable (default "
                         "../shared/data/profiles from the repo, benchmarks/data/pollux-apps (bert and yolov3 of the "
                         "same testbed, held out), benchmarks/data/profiles, "
                         "benchmarks/data/profiles-h200host and benchmarks/data/profiles-rerun)")
    ap.add_argument("--fit-placement", default=None,
                    help="the one multi-GPU placement to fit the communication model on (default: 2222 or the "
                         "widest 2-GPUs-per-node placement present)")
    ap.add_argument("--plain", action="store_true",
                    help="baseline: the plain ring term (no overlap, no multi-GPU slowdown), only V/bw fitted")
    ap.add_argument("--ignore-grad-bytes", action="store_true",
                    help="baseline: ignore grad_bytes= in the profiles (one all-reduce growth rate per cluster, "
                         "no latency/bandwidth split)")
    ap.add_argument("--held-out", action="append", default=[], metavar="APP",
                    help="predict APP (name or cluster/app) but use it in no other app's fit; repeatable; adds to "
                         "the held_out= list of its cluster's CLUSTER file")
    ap.add_argument("--batch-fit", choices=list(BATCH_FITS), default="shape",
                    help="t(b) from the 1-GPU rows: flat-then-linear in relative error (shape, default) or the "
                         "least-squares line used before (line: a baseline)")
    ap.add_argument("--by", choices=["placement", "shape"], default=None,
                    help="leave-one-app-out: add per-app residual tables by placement, or by nodes x GPUs per node "
                         "(shape); signed median > 0: predicted too slow")
    ap.add_argument("--online-fit", choices=["job", "v"], default="job",
                    help="--protocol online: fit the job's own compute, all-reduce and growth (job, default) or only "
                         "its all-reduce time v (v: the baseline, the offline model refitted on every placement seen)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    dirs = args.profiles or [str(shared_profiles()), str(REPO / "benchmarks" / "data" / "pollux-apps"),
                             str(REPO / "benchmarks" / "data" / "profiles"),
                             str(REPO / "benchmarks" / "data" / "profiles-h200host"),
                             str(REPO / "benchmarks" / "data" / "profiles-rerun")]
    if args.protocol in ("leave-one-app-out", "online"):
        return leave_one_out(dirs, args)
    if len(dirs) > 1 and args.profiles is None:
        dirs = dirs[:1]
    if len(dirs) > 1:
        print("error: --protocol per-app takes one --profiles directory", file=sys.stderr)
        return 2

    root = Path(dirs[0])
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


def shared_profiles() -> Path:
    """../shared/data/profiles from the repo (the nearest ancestor that has one: worktrees sit deeper)."""
    for parent in REPO.parents:
        cand = parent / "shared" / "data" / "profiles"
        if cand.is_dir():
            return cand
    return REPO.parent / "shared" / "data" / "profiles"


def _resolve(d: str) -> Path:
    root = Path(d)
    return REPO / root if not root.is_absolute() and not root.exists() else root


def cluster_parallel(root: Path) -> float:
    """Replicas one node of the cluster computes side by side at full speed (a CPU node: its cores
    over the threads per replica; GPUs: unlimited). From the profiles' own headers (``cores=``,
    ``threads_per_rank=``, written by measure_ddp_profiles.py), which must agree; else
    ``parallel=N`` in the CLUSTER file; else unlimited."""
    found = {p for p in (read_parallel(f) for f in sorted(root.glob("*/placements.csv"))) if p is not None}
    if len(found) > 1:
        raise ValueError(f"{root}: profiles measured on hosts of different cores/threads_per_rank "
                         f"({sorted(found)}): one cluster per directory")
    if found:
        return found.pop()
    f = root / "CLUSTER"
    for word in (f.read_text().split() if f.exists() else []):
        if word.startswith("parallel="):
            try:
                v = float(word.split("=", 1)[1])
            except ValueError:
                raise ValueError(f"{f}: parallel= needs a number") from None
            if v <= 0:
                raise ValueError(f"{f}: parallel= must be > 0")
            return v
    return float("inf")


def cluster_held_out(root: Path) -> set[str]:
    """``held_out=A,B`` in the CLUSTER file: apps measured after the model's form was chosen,
    predicted but used in no other app's fit."""
    f = root / "CLUSTER"
    out: set[str] = set()
    for word in (f.read_text().split() if f.exists() else []):
        if word.startswith("held_out="):
            out |= {w for w in word.split("=", 1)[1].split(",") if w}
    return out


def cluster_name(root: Path) -> str:
    """A cluster's name: the first line of its CLUSTER file, else its parent directory's name
    (or grandparent's, for .../NAME/data/profiles) when the directory is a generic 'profiles',
    else the directory's name: ../shared/data/profiles is cluster 'shared'."""
    f = root / "CLUSTER"
    if f.exists() and f.read_text().strip():
        return f.read_text().split()[0]
    if root.name == "profiles":
        return root.parent.parent.name if root.parent.name == "data" else root.parent.name
    return root.name


def leave_one_out(dirs: list[str], args: argparse.Namespace) -> int:
    apps: list[AppData] = []
    try:
        fp = parse_placement(args.fit_placement) if args.fit_placement else None
        for d in dirs:
            root = _resolve(d)
            files = sorted(root.glob("*/placements.csv"))
            if not files:
                print(f"error: no <app>/placements.csv under {root}", file=sys.stderr)
                return 2
            cluster, parallel = cluster_name(root), cluster_parallel(root)
            held = cluster_held_out(root)
            for f in files:
                scal_path = f.parent / "scalability.csv"
                scal = read_scalability_csv(scal_path) if scal_path.exists() else []
                name = f.parent.name
                apps.append(AppData(name, cluster, read_placements_csv(f), scal, parallel,
                                    None if args.ignore_grad_bytes else read_grad_bytes(f),
                                    held_out=bool({name, f"{cluster}/{name}"} & (held | set(args.held_out)))))
        unknown = set(args.held_out) - {a.app for a in apps} - {a.key for a in apps}
        if unknown:
            print(f"error: --held-out {sorted(unknown)[0]}: no such app", file=sys.stderr)
            return 2
        if sum(1 for a in apps if not a.held_out) < 2:
            print("error: leave-one-app-out needs at least two applications that are not held out", file=sys.stderr)
            return 2
        if len(apps) < 2:
            print("error: leave-one-app-out needs at least two applications", file=sys.stderr)
            return 2
        if args.protocol == "online":
            return online(apps, args)
        print(f"leave-one-app-out over {len(apps)} apps ...", file=sys.stderr)
        reports = leave_one_app_out(apps, fp, args.batch_fit)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    design = [r for r in reports if not r.held_out]
    place_all = [e for r in design for e in r.errors]
    scal_all = [e for r in design for e in r.scal_errors]
    every = place_all + scal_all
    held_errs = [e for r in reports if r.held_out for e in r.errors + r.scal_errors]

    def app_acc(r) -> Accuracy:
        return summarize(r.errors + r.scal_errors)

    if args.json:
        out = {
            "protocol": "leave-one-app-out",
            "apps": {
                f"{r.cluster}/{r.app}": {
                    "all": app_acc(r).as_dict(), "held_out": r.held_out, "placements": r.placements.as_dict(),
                    "scalability": r.scalability.as_dict() if r.scalability else None,
                    "by_nodes": {str(n): a.as_dict() for n, a in r.by_nodes.items()},
                    "by_gpus_one_node": {str(g): a.as_dict() for g, a in r.by_gpus.items()},
                    **({f"by_{args.by}": by_placement(r.residuals, args.by)} if args.by else {}),
                    "fit": {"alpha": r.profile.alpha, "beta": r.profile.beta, "v_s": r.v, "fitted_on": r.fitted_on,
                            "shape": r.shape.to_dict(), "shape_fitted_on": r.shape_from,
                            "grad_bytes": r.grad_bytes, "bw_share": r.shape.bw_share(r.grad_bytes)},
                }
                for r in reports
            },
            "overall": summarize(every).as_dict(),  # every app that is not held out
            "overall_held_out": summarize(held_errs).as_dict() if held_errs else None,
            "overall_with_held_out": summarize(every + held_errs).as_dict(),
            "overall_placements": summarize(place_all).as_dict(),
            "overall_scalability": summarize(scal_all).as_dict() if scal_all else None,
            "target": TARGET,
            "target_misses": target_misses(reports),
        }
        print(json.dumps(out, indent=2))
        return 0
    print("leave-one-app-out: cluster parameters from the other apps of the same cluster; of the held-out app "
          "only its 1-GPU rows and one multi-GPU placement")
    for r in reports:
        s = r.shape
        print(f"\n{r.cluster}/{r.app}{' (held out entirely)' if r.held_out else ''}: t(b) = {r.profile.alpha * 1e3:.2f} ms + {r.profile.beta * 1e3:.4f} ms/sample; "
              f"v = {r.v * 1e3:.2f} ms fitted on placement {r.fitted_on}; shape from {', '.join(r.shape_from)}: "
              f"gamma {s.gamma:.2f}, slowdown {s.s_multi:.3f} + {s.sigma:.3f}/co-located GPU, inter/intra "
              f"{s.inter_ratio:.1f}, growth intra {s.d_intra:.3f}/GPU"
              + (f" (bandwidth part {s.d_intra_bw:.3f}/GPU, bandwidth share {s.bw_share(r.grad_bytes):.2f}, "
                 f"link latency {s.lat_s * 1e3:.2f} ms)"
                 if s.lat_bytes > 0 else "") + f" inter {s.d_inter:.3f}/GPU {s.d_nodes:.3f}/log2 node"
              + (f", two nodes x(1 + {s.d_two_nodes:.2f}*log2 GPUs/node)" if s.d_two_nodes > 0 else "")
              + (f", across nodes x(1 + {s.d_node_gpus:.3f}*log2 GPUs on the fullest node)" if s.d_node_gpus > 0 else ""))
        a = app_acc(r)
        print(f"  all rows        rows={a.rows:4d}  median={a.median_abs_rel_err:6.1%}  p90={a.p90_abs_rel_err:6.1%}")
        print(f"  placements.csv  rows={r.placements.rows:4d}  median={r.placements.median_abs_rel_err:6.1%}  "
              f"p90={r.placements.p90_abs_rel_err:6.1%}")
        for n, x in r.by_nodes.items():
            print(f"    {n} node(s)     rows={x.rows:4d}  median={x.median_abs_rel_err:6.1%}  p90={x.p90_abs_rel_err:6.1%}")
        if r.scalability:
            x = r.scalability
            print(f"  scalability.csv rows={x.rows:4d}  median={x.median_abs_rel_err:6.1%}  p90={x.p90_abs_rel_err:6.1%}")
        if args.by:
            print_by(by_placement(r.residuals, args.by), args.by)
    for name, errs in (("overall (all rows)", every), ("overall placements.csv", place_all),
                       ("overall scalability.csv", scal_all), ("held-out apps", held_errs),
                       ("overall with held-out", every + held_errs if held_errs else [])):
        if errs:
            x = summarize(errs)
            print(f"{'' if name != 'overall (all rows)' else chr(10)}{name:24s} rows={x.rows:4d}  "
                  f"median={x.median_abs_rel_err:6.1%}  p90={x.p90_abs_rel_err:6.1%}")
    print("target per app and overall: median <= 10%, p90 <= 20%" + ("; 'overall' leaves the held-out apps out"
                                                                     if held_errs else ""))
    misses = target_misses(reports)
    print(f"\ntarget per application and node count: {len(misses)} miss(es)" + (":" if misses else ""))
    for m in misses:
        print(f"  {m['app']:42s} {m['nodes']:>9s}  rows={m['rows']:4d}  median={m['median_abs_rel_err']:6.1%}  "
              f"p90={m['p90_abs_rel_err']:6.1%}")
    return 0


TARGET = {"median_abs_rel_err": 0.10, "p90_abs_rel_err": 0.20}


def target_misses(reports: list) -> list[dict]:
    """Every (application, node count) whose predicted rows miss TARGET: placements.csv rows by
    their node count ("1 node" = one node, several GPUs), scalability.csv rows as one group."""
    out = []
    for r in reports:
        groups = {f"{n} node{'s' if n > 1 else ''}": a for n, a in r.by_nodes.items()}
        if r.scalability:
            groups["6-16 nodes"] = r.scalability
        for name, a in groups.items():
            if a.median_abs_rel_err > TARGET["median_abs_rel_err"] or a.p90_abs_rel_err > TARGET["p90_abs_rel_err"]:
                out.append({"app": f"{r.cluster}/{r.app}", "nodes": name, **a.as_dict()})
    return out


def print_by(table: dict[str, dict], group: str) -> None:
    """One residual table (`calibration.by_placement`), compact: several groups per line."""
    cells = [f"{k:>{8 if group == 'shape' else 6}s} {v['rows']:3d} {v['median_rel_err']:+6.1%} {v['p90_abs_rel_err']:5.1%}"
             for k, v in table.items()]
    print(f"    by {group}: rows, signed median (> 0: predicted too slow), p90 |error|")
    for i in range(0, len(cells), 4):
        print("     " + "   ".join(cells[i:i + 4]))


ONLINE_KS = (1, 2, 3)
ONLINE_TARGET = {"k": 2, "median_abs_rel_err": 0.05, "p90_abs_rel_err": 0.10}


def online(apps: list[AppData], args: argparse.Namespace) -> int:
    """--protocol online: per application, its own model from the first k placements it meets
    (`lyasched.costmodel.online.online_protocol`), the cluster fit from the other apps as prior."""
    from lyasched.costmodel.online import online_protocol

    print(f"online protocol over {len(apps)} apps ...", file=sys.stderr)
    reports = online_protocol(apps, ONLINE_KS, args.batch_fit, args.online_fit)
    design = [r for r in reports if not r.held_out]
    overall = {k: summarize([e for r in design for e in r.errors.get(k, [])]) for k in ONLINE_KS}
    if args.json:
        print(json.dumps({
            "protocol": "online", "online_fit": args.online_fit,
            "apps": {f"{r.cluster}/{r.app}": {"held_out": r.held_out, "order": r.order,
                                              "online": {str(k): summarize(e).as_dict() for k, e in r.errors.items()},
                                              "scatter": summarize(r.scatter).as_dict()}
                     for r in reports},
            "overall": {str(k): a.as_dict() for k, a in overall.items()},
            "target": ONLINE_TARGET,
        }, indent=2))
        return 0
    print("online: the job's own model (cluster fit from the other apps as prior) from the rows of the first k "
          "placements it meets (its request, then neighbours); every other placement predicted")
    t = ONLINE_TARGET
    print(f"\n{'app':45s} {'placements met':16s}" + "".join(f"  k={k}: median / p90 (rows)" for k in ONLINE_KS)
          + "  scatter median / p90")
    for r in reports:
        cells = "".join(f"  {a.median_abs_rel_err:6.1%} / {a.p90_abs_rel_err:6.1%} ({a.rows:4d})"
                        for a in (summarize(r.errors[k]) for k in ONLINE_KS if k in r.errors))
        met = r.errors.get(t["k"])
        ok = "" if met is None else ("  met" if summarize(met).median_abs_rel_err <= t["median_abs_rel_err"]
                                      and summarize(met).p90_abs_rel_err <= t["p90_abs_rel_err"] else "  missed")
        name = f"{r.cluster}/{r.app}" + (" (held out)" if r.held_out else "")
        sc = summarize(r.scatter)
        pad = "".join(" " * 29 for k in ONLINE_KS if k not in r.errors)
        print(f"{name:45s} {' '.join(r.order[:3]):16s}{cells}{pad}  {sc.median_abs_rel_err:5.1%} / "
              f"{sc.p90_abs_rel_err:5.1%}{ok}")
    print(f"\n{'overall':45s} {'':16s}" + "".join(f"  {a.median_abs_rel_err:6.1%} / {a.p90_abs_rel_err:6.1%} ({a.rows:4d})"
                                               for a in overall.values()))
    print(f"target with k = {t['k']} on every application: median <= {t['median_abs_rel_err']:.0%}, "
          f"p90 <= {t['p90_abs_rel_err']:.0%}. scatter: each placement's rows about their own quadratic in the "
          "batch (3 parameters per placement, in-sample): what no prediction of an unseen placement can beat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
