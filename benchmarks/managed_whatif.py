"""Issue 37's target on recorded histories: `lyasched whatif --managed` (rigid GPU counts, run
times estimated only from jobs that ended earlier), lyapunov's average JCT over backfill's with
the same estimates (target <= 0.85), and the estimates' median error.

    python benchmarks/managed_whatif.py [--set design|heldout|all] [--keep DIR] [--json]

Histories, fixed before the rule was tried (the estimator: Tsafrir et al.'s last-two average,
docs/estimates.md, and a running job past its estimate shown `RuntimeEstimator.expected_run`;
the policies as they are):

* ``synth-S`` (design S = 0, 1; held out S = 2, 3, 4): made-up but realistic `sacct` histories
  (`synthetic_history`): 14 days, ~3,000 GPU jobs on 16 x 8 GPUs at an offered load of 0.9;
  48 users in 8 accounts with Zipf activity; each user has 1-4 kinds of job (a job name, a GPU
  count from a Philly-like mix, a median run time lognormal around 1.5 h) submitted in sessions
  of a few jobs (sweeps); run time = the kind's median x lognormal noise, sigma 0.15-0.4 for
  steady users and 1.0-1.6 for the erratic fifth; a third of users name every job alike
  (``run.sh``); time limits 2-10x the kind's median rounded up to the hour, or the partition's
  24 h for a third of users; 7% of runs fail early (FAILED), a run past its limit ends there
  (TIMEOUT). What actually happened is a FIFO first-fit schedule (whole nodes for jobs over 8
  GPUs); the file is `sacct --parsable2` text with JobName.
* ``philly-O`` (design O = 20000, held out O = 50000): 3,000 consecutive jobs (by submit time) of
  the Philly trace (../shared/data/traces/philly.csv), cluster sized for an offered load of 0.8
  as `benchmarks/replay_quality.py` does. The trace has no users, names or time limits: its
  virtual-cluster id (15 of them, each a team sharing a quota) stands in as the user AND the
  account, so "the user's last jobs" are the team's last jobs; no JobName and no Timelimit
  (backfill with limits plans with none; a job with no similar past gets the 1 h site default).
  The trace records submit times and run times only, so the "actual" schedule (and the ends
  the estimator learns from) is the same FIFO first-fit schedule.

Each history is written as a sacct file and replayed through the CLI in-process, exactly
`lyasched whatif --sacct FILE --managed --nodes N --gpus-per-node 8 --json` (printed per history).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import sys
import tempfile
import time
from datetime import datetime

import numpy as np
from click.testing import CliRunner

from lyasched.cli import main as cli_main
from lyasched.sim.workloads import read_trace, select_rows, size_cluster
from lyasched.slurm.sacct import FIELDS

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "shared", "data", "traces", "philly.csv")
T0 = datetime(2026, 10, 1).timestamp()
GPN = 8
SETS = {
    "design": ["synth-0", "synth-1", "philly-20000"],
    "heldout": ["synth-2", "synth-3", "synth-4", "philly-50000"],
}
SIZES = (1, 2, 4, 8, 16)
SIZE_P = (0.55, 0.15, 0.15, 0.12, 0.03)


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def first_fit(arrival: np.ndarray, run: np.ndarray, gpus: np.ndarray, nodes: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """What "actually" happened: FIFO first-fit (a later job starts when it fits, no reservation;
    whole nodes for jobs over a node). Returns start times and each job's nodes."""
    n = len(run)
    free = [GPN] * nodes
    ends: list[tuple[float, int]] = []
    start = np.full(n, np.nan)
    placed: list[tuple[int, ...]] = [()] * n
    waiting: list[int] = []
    order = np.argsort(arrival, kind="stable")
    i = 0
    while i < n or ends:
        now = min(arrival[order[i]] if i < n else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= now:
            _, j = heapq.heappop(ends)
            per = GPN if gpus[j] > GPN else gpus[j]
            for k in placed[j]:
                free[k] += per
        while i < n and arrival[order[i]] <= now:
            waiting.append(int(order[i]))
            i += 1
        keep = []
        for j in waiting:
            g = int(gpus[j])
            if g <= GPN:
                cand = [k for k, f in enumerate(free) if f >= g]
                nodes_j = (min(cand, key=lambda k: (free[k], k)),) if cand else None
                per = g
            else:
                whole = [k for k, f in enumerate(free) if f == GPN]
                need = -(-g // GPN)
                nodes_j = tuple(whole[:need]) if len(whole) >= need else None
                per = GPN
            if nodes_j is None:
                keep.append(j)
                continue
            for k in nodes_j:
                free[k] -= per
            start[j], placed[j] = now, nodes_j
            heapq.heappush(ends, (now + run[j], j))
        waiting = keep
    return start, placed


def _sacct(rows: list[dict], nodes: int) -> str:
    head = "|".join((*FIELDS, "JobName"))
    out = [head]
    for r in rows:
        g = r["gpus"]
        nn = max(1, -(-g // GPN))
        tres = f"billing={g * 4},cpu={g * 4},gres/gpu={g},mem=64G,node={nn}"
        nl = ",".join(f"gpu{k + 1:03d}" for k in r["nodes"])
        out.append("|".join([str(r["id"]), r["user"], r["account"], "gpu", _ts(r["submit"]), _ts(r["submit"]),
                             _ts(r["start"]), _ts(r["start"] + r["run"]), str(int(r["run"])), r["state"], str(nn), nl,
                             tres, tres, r["limit"], r["name"]]))
    return "\n".join(out) + "\n"


def synthetic_history(seed: int, jobs: int = 3000, nodes: int = 16, load: float = 0.9, days: float = 14.0) -> str:
    """sacct text of a site whose users have habits (see the module docstring)."""
    rng = np.random.default_rng([seed, 37])
    n_users = 48
    activity = 1.0 / np.arange(1, n_users + 1)
    activity = rng.permutation(activity / activity.sum())
    users = []
    for u in range(n_users):
        erratic = rng.random() < 0.2
        plain_names = rng.random() < 1 / 3
        default_limit = rng.random() < 1 / 3
        kinds = []
        for k in range(int(rng.integers(1, 5))):
            med = float(np.clip(np.exp(rng.normal(math.log(5400), 1.2)), 120, 3 * 86400))
            limit = 86400.0 if default_limit else math.ceil(med * rng.uniform(2, 10) / 3600) * 3600.0
            kinds.append({
                "name": "run.sh" if plain_names else f"p{u}-{['train', 'sweep', 'eval', 'finetune'][k]}",
                "gpus": int(rng.choice(SIZES, p=SIZE_P)),
                "median": med,
                "sigma": float(rng.uniform(1.0, 1.6) if erratic else rng.uniform(0.15, 0.4)),
                "limit": limit,
                "weight": float(rng.random() + 0.2),
            })
        users.append({"name": f"user{u:02d}", "account": f"acct{u % 8}", "kinds": kinds})
    # sessions: a user picks one of their kinds and submits a few jobs minutes apart
    sub, kind_of, who = [], [], []
    t_sess = np.sort(rng.uniform(0, days * 86400, jobs))
    for ts in t_sess:
        if len(sub) >= jobs:
            break
        u = int(rng.choice(n_users, p=activity))
        ks = users[u]["kinds"]
        w = np.array([k["weight"] for k in ks])
        k = int(rng.choice(len(ks), p=w / w.sum()))
        m = int(rng.geometric(1 / 3))
        t = float(ts)
        for _ in range(m):
            sub.append(t)
            kind_of.append(k)
            who.append(u)
            t += float(rng.exponential(600))
    n = min(len(sub), jobs)
    sub_a, who_a, kind_a = np.array(sub[:n]), who[:n], kind_of[:n]
    run = np.empty(n)
    gpus = np.empty(n, dtype=int)
    limit = np.empty(n)
    state = []
    for j in range(n):
        kd = users[who_a[j]]["kinds"][kind_a[j]]
        r = kd["median"] * math.exp(rng.normal(0, kd["sigma"]))
        st = "COMPLETED"
        if rng.random() < 0.07:
            r *= rng.uniform(0.01, 0.2)
            st = "FAILED"
        if r >= kd["limit"]:
            r, st = kd["limit"], "TIMEOUT"
        run[j], gpus[j], limit[j] = max(round(r), 1), kd["gpus"], kd["limit"]
        state.append(st)
    # arrivals stretched so that the offered load is `load` of the cluster over the span
    span = float(np.sum(run * gpus)) / (load * nodes * GPN)
    arrival = T0 + np.round(sub_a / max(sub_a.max(), 1.0) * span)
    start, placed = first_fit(arrival, run, gpus, nodes)
    rows = []
    for j in np.argsort(arrival, kind="stable"):
        u = users[who_a[j]]
        rows.append({"id": 1000 + int(j), "user": u["name"], "account": u["account"], "submit": float(arrival[j]),
                     "start": float(start[j]), "run": float(run[j]), "gpus": int(gpus[j]), "nodes": placed[j],
                     "state": state[j], "limit": _hms(limit[j]), "name": u["kinds"][kind_a[j]]["name"]})
    return _sacct(rows, nodes)


def philly_history(offset: int, jobs: int = 3000, load: float = 0.8) -> tuple[str, int]:
    """sacct text of a Philly window (virtual cluster as user and account, no names, no limits)."""
    win = select_rows(read_trace(PHILLY))[offset: offset + jobs]
    cluster = size_cluster(win, load)
    arrival = np.array([T0 + (r.submit - win[0].submit) for r in win])
    run = np.array([max(round(r.duration), 1) for r in win], dtype=float)
    gpus = np.array([r.gpus for r in win], dtype=int)
    start, placed = first_fit(arrival, run, gpus, cluster.nodes)
    rows = [{"id": 1 + k, "user": f"vc-{r.group}", "account": f"vc-{r.group}", "submit": float(arrival[k]),
             "start": float(start[k]), "run": float(run[k]), "gpus": int(gpus[k]), "nodes": placed[k],
             "state": "COMPLETED", "limit": "UNLIMITED", "name": ""} for k, r in enumerate(win)]
    return _sacct(rows, cluster.nodes), cluster.nodes


def history(name: str) -> tuple[str, int]:
    kind, _, arg = name.partition("-")
    if kind == "synth":
        return synthetic_history(int(arg)), 16
    if kind == "philly":
        return philly_history(int(arg))
    raise SystemExit(f"unknown history {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("design", "heldout", "all"), default="all")
    ap.add_argument("--histories", default=None, help="comma-separated names instead of --set (synth-S, philly-O)")
    ap.add_argument("--keep", default=None, help="write the sacct files here (default: a temporary directory)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="replay seeds 0..N-1 (whatif --seed: the jobs' profiles, so how much slower a job placed "
                         "across nodes runs); figures are seed 0's, ratios also per seed and their geometric mean")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = a.histories.split(",") if a.histories else [*SETS["design"], *SETS["heldout"]] if a.set == "all" else SETS[a.set]
    out_dir = a.keep or tempfile.mkdtemp(prefix="managed-whatif-")
    os.makedirs(out_dir, exist_ok=True)
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    report: dict = {"histories": {}}
    for name in names:
        t = time.perf_counter()
        text, nodes = history(name)
        path = os.path.join(out_dir, f"{name}.sacct")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        args = ["whatif", "--sacct", path, "--managed", "--nodes", str(nodes), "--gpus-per-node", str(GPN), "--json"]
        runs = []
        for seed in range(max(1, a.seeds)):
            sargs = args + (["--seed", str(seed)] if seed else [])
            print(f"{name}: lyasched {' '.join(sargs)}", file=sys.stderr, flush=True)
            r = CliRunner().invoke(cli_main, sargs)
            if r.exit_code != 0:
                raise SystemExit(f"{name}: whatif failed: {r.output.strip().splitlines()[-1:]}")
            runs.append(json.loads(r.stdout))
        s = runs[0]
        by_seed = [x["managed"]["avg_jct_vs_backfill"]["lyapunov"] for x in runs]
        est = s["managed"]["estimates"]
        pol = s["policies"]
        ratio = s["managed"]["avg_jct_vs_backfill"]
        row = {
            "set": next((k for k, v in SETS.items() if name in v), "other"),
            "command": "lyasched " + " ".join(args),
            "jobs": s["jobs"]["gpu"],
            "cluster": f"{nodes}x{GPN}",
            "avg_jct_s": {"actual": s["actual"]["avg_jct_s"], **{k: v["avg_jct_s"] for k, v in pol.items()}},
            "lyapunov_vs_backfill": ratio["lyapunov"],
            "lyapunov_vs_backfill_limits": pol["lyapunov"]["avg_jct_s"] / pol["backfill-limits"]["avg_jct_s"],
            "target_met": ratio["lyapunov"] <= 0.85,
            "lyapunov_vs_backfill_by_seed": by_seed,
            "lyapunov_vs_backfill_geomean_over_seeds": float(np.exp(np.mean(np.log(by_seed)))),
            "estimates": {k: est[k] for k in ("median_rel_error", "median_log_ratio", "median_abs_log_ratio", "within_2x",
                                              "sources")},
            "time_limits_median_rel_error": est.get("time_limits", {}).get("median_rel_error"),
            "wall_s": round(time.perf_counter() - t, 1),
        }
        report["histories"][name] = row
        print(f"{name}: {row['jobs']} jobs on {row['cluster']}: avg JCT lyapunov {pol['lyapunov']['avg_jct_s']:.0f} s, "
              f"backfill (estimates) {pol['backfill']['avg_jct_s']:.0f} s, backfill (limits) "
              f"{pol['backfill-limits']['avg_jct_s']:.0f} s, actual {s['actual']['avg_jct_s']:.0f} s; lyapunov / backfill "
              f"{row['lyapunov_vs_backfill']:.3f} (target <= 0.85: {'met' if row['target_met'] else 'missed'}), / backfill "
              f"with limits {row['lyapunov_vs_backfill_limits']:.3f}; estimates median error {est['median_rel_error']:.0%}, "
              f"median log(est/actual) {est['median_log_ratio']:+.2f}, within 2x {est['within_2x']:.0%} (time limits "
              f"alone: {row['time_limits_median_rel_error'] if row['time_limits_median_rel_error'] is None else format(row['time_limits_median_rel_error'], '.0%')}); "
              f"{row['wall_s']} s" + (f"; lyapunov / backfill by seed {', '.join(f'{x:.3f}' for x in by_seed)}"
                                      if len(by_seed) > 1 else ""), file=sys.stderr, flush=True)
    for k in SETS:
        rs = [v["lyapunov_vs_backfill"] for v in report["histories"].values() if v["set"] == k]
        if rs:
            report[f"{k}_geomean_lyapunov_vs_backfill"] = float(np.exp(np.mean(np.log(rs))))
        rs = [x for v in report["histories"].values() if v["set"] == k for x in v["lyapunov_vs_backfill_by_seed"]]
        if rs and a.seeds > 1:
            report[f"{k}_geomean_lyapunov_vs_backfill_all_seeds"] = float(np.exp(np.mean(np.log(rs))))
    report["files"] = out_dir
    if a.json:
        print(json.dumps(report))
    else:
        for k in SETS:
            if f"{k}_geomean_lyapunov_vs_backfill" in report:
                print(f"{k}: geometric mean lyapunov / backfill (same estimates) {report[f'{k}_geomean_lyapunov_vs_backfill']:.3f}")


if __name__ == "__main__":
    main()
