"""Where lyapunov loses to shortest-first on Philly windows: estimate noise and the start order.

    python benchmarks/experiments/philly_order.py [--trace FILE] [--windows 40000@1.2,62000@1.0] [--seeds 6]
        [--jobs 3000] [--diff] [--param lyapunov.KEY=VALUE ...] [--json]

Per window (offset@load: a ``--jobs``-job stretch of the trace on a cluster sized for that load,
as benchmarks/robustness.py builds it) and per simulator seed 0..N-1 (same jobs, other draws of
the estimate errors and true run times): lyapunov's average JCT over sjf-oracle's, and over it
**sjf-estimate**, sjf-oracle's rule (shortest first at the request, skipping jobs that do not
fit) fed the estimated rows instead of the true ones, a reference that sees what lyapunov sees.

``--diff`` (seed 0): the jobs whose best run is under 10 minutes, their average wait under each
policy; and slot by slot, the starts lyapunov makes against the ones sjf-estimate would make from
the same state (how many decisions differ, the median wait and run at the request of the jobs
only one of them starts, and how many starts put a job on another GPU count). Issue 8, seventh
pass (README). ``--param`` sets lyapunov's parameters (its measured variants too) in both parts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # the variants and sweeps here, robustness.py in benchmarks/

import robustness as R  # noqa: E402
from variants import make_policy, parse_params  # noqa: E402
from lyasched.policy.common import Capabilities  # noqa: E402
from lyasched.policy.params import ParamError  # noqa: E402
from lyasched.policy.sjf_oracle import SjfOracle  # noqa: E402
from lyasched.policy.state import SlotResult, SlotState, WaitingJob  # noqa: E402
from variants.core import LyapunovVariant  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.workloads import read_trace, select_rows  # noqa: E402


class SjfEstimate(SjfOracle):
    """sjf-oracle's rule on the estimated rows (the simulator hands it what lyapunov sees)."""

    name = "sjf-estimate"
    capabilities = Capabilities(needs_true_runtimes=False, time_invariant=True)


def _run_at_request(w: WaitingJob) -> float:
    t = float(w.run_one_node[w.requested_gpus - 1])
    return t if np.isfinite(t) else float(w.run_multi_node[w.requested_gpus - 1])


class _Compared(LyapunovVariant):
    """lyapunov, recording each slot's starts against sjf-estimate's choice from the same state."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.slots = self.differ = self.recount = 0
        self.only_ly: list[tuple[float, float]] = []  # (wait, run at the request)
        self.only_sjf: list[tuple[float, float]] = []

    def decide(self, state: SlotState) -> SlotResult:
        res = super().decide(state)
        ref = {d.job_id: d.gpus for d in SjfEstimate(0).decide(state).starts}
        mine = {d.job_id: d.gpus for d in res.starts}
        self.slots += 1
        self.recount += sum(1 for j, g in mine.items() if j in ref and ref[j] != g)
        if set(mine) != set(ref):
            self.differ += 1
            by_id = {w.job_id: w for w in state.waiting}
            for ids, out in ((set(mine) - set(ref), self.only_ly), (set(ref) - set(mine), self.only_sjf)):
                out += [(state.now - by_id[j].submit_time, _run_at_request(by_id[j])) for j in ids]
        return res


def _avg_jct(sim: Simulation, policy) -> tuple[float, list]:
    res = sim.run(policy, name=policy.name)
    return float(np.mean([r.jct for r in res.records])), res.records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=R.PHILLY)
    ap.add_argument("--windows", default="40000@1.2,62000@1.0", help="comma-separated OFFSET@LOAD")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=3000, help="jobs per window")
    ap.add_argument("--diff", action="store_true", help="also the seed-0 comparison of waits and starts")
    ap.add_argument("--param", action="append", default=[], metavar="lyapunov.KEY=VALUE")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        prm = parse_params(a.param, ["lyapunov"]).get("lyapunov", {})
    except ParamError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        windows = [(int(o), float(l)) for o, l in (w.split("@") for w in a.windows.split(",") if w)]
        if not windows or a.seeds < 1 or a.jobs < 1 or any(o < 0 or not 0 < l for o, l in windows):
            raise ValueError
    except ValueError:
        print("error: --windows OFFSET@LOAD[,...] with offset >= 0, load > 0; --seeds and --jobs >= 1", file=sys.stderr)
        return 2
    try:
        rows = select_rows(read_trace(a.trace))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = []
    for off, load in windows:
        if off >= len(rows):
            print(f"error: window {off}: the trace has {len(rows)} usable rows", file=sys.stderr)
            return 2
        w = R.philly_window(rows, off, a.jobs, load, "philly-order")
        cl, jobs = w["cluster"], w["jobs"]
        per_seed = []
        for seed in range(a.seeds):
            sim = Simulation(jobs, cl, seed=seed, end_fraction={})
            ly, _ = _avg_jct(sim, make_policy("lyapunov", seed=seed, **prm))
            oracle, _ = _avg_jct(sim, make_policy("sjf-oracle", seed=seed))
            est, _ = _avg_jct(sim, SjfEstimate(seed))
            per_seed.append({"seed": seed, "lyapunov_vs_oracle": ly / oracle, "sjf_estimate_vs_oracle": est / oracle})
        row: dict = {"window": w["name"], "gpus": cl.total_gpus, "seeds": per_seed}
        if a.diff:
            sim = Simulation(jobs, cl, seed=0, end_fraction={})
            pol = _Compared(**prm)
            _, ly_recs = _avg_jct(sim, pol)
            _, est_recs = _avg_jct(sim, SjfEstimate(0))
            short = {r.job.job_id for r in ly_recs if r.best_true_run < 600}
            wait = lambda recs: float(np.mean([r.wait for r in recs if r.job.job_id in short]))  # noqa: E731
            med = lambda xs, i: float(np.median([x[i] for x in xs])) if xs else float("nan")  # noqa: E731
            row["diff"] = {
                "short_jobs": len(short), "short_wait_lyapunov_s": wait(ly_recs), "short_wait_sjf_estimate_s": wait(est_recs),
                "slots": pol.slots, "slots_differing": pol.differ, "same_job_other_count": pol.recount,
                "only_lyapunov": len(pol.only_ly), "only_lyapunov_median_wait_s": med(pol.only_ly, 0),
                "only_lyapunov_median_run_s": med(pol.only_ly, 1),
                "only_sjf_estimate": len(pol.only_sjf), "only_sjf_estimate_median_wait_s": med(pol.only_sjf, 0),
                "only_sjf_estimate_median_run_s": med(pol.only_sjf, 1),
            }
        out.append(row)
        if not a.json:
            ly = [s["lyapunov_vs_oracle"] for s in per_seed]
            est = [s["sjf_estimate_vs_oracle"] for s in per_seed]
            print(f"{row['window']} ({cl.total_gpus} GPUs), {a.seeds} seeds: lyapunov / sjf-oracle "
                  f"{min(ly):.3f}-{max(ly):.3f} (mean {np.mean(ly):.3f}); sjf-estimate / sjf-oracle "
                  f"{min(est):.3f}-{max(est):.3f} (mean {np.mean(est):.3f})", flush=True)
            if a.diff:
                d = row["diff"]
                print(f"  seed 0: {d['short_jobs']} jobs under 10 min wait {d['short_wait_lyapunov_s']:.0f} s "
                      f"(sjf-estimate {d['short_wait_sjf_estimate_s']:.0f} s); {d['slots_differing']} of {d['slots']} "
                      f"decisions differ; only lyapunov starts {d['only_lyapunov']} (median wait "
                      f"{d['only_lyapunov_median_wait_s']:.0f} s, run {d['only_lyapunov_median_run_s']:.0f} s), only "
                      f"sjf-estimate {d['only_sjf_estimate']} (wait {d['only_sjf_estimate_median_wait_s']:.0f} s, run "
                      f"{d['only_sjf_estimate_median_run_s']:.0f} s); {d['same_job_other_count']} same-job starts on "
                      f"another GPU count", flush=True)
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
