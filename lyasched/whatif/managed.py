"""`lyasched whatif --managed`: the history replayed as if its GPU partitions had been managed
by lyasched, where a plain job tells only its GPU count, time limit, user, account and name.

Each job's run time, as every policy sees it, is the estimate `lyasched.estimates` would have
made at its arrival from the jobs that had ended by then in the record (never its own run);
its true run is the recorded one. The simulation's rows are built from the estimates and the
per-job true/predicted factors set to recorded / estimated run, so the replay needs no change
to the simulator: ``Simulation.factors`` is what it multiplies a predicted run by.
Jobs are rigid (their recorded GPU count). Backfill is replayed twice: planning with the same
estimates (its time limits replaced by them) and with the users' time limits (what Slurm does).
A running job that outlives its estimate is shown, from then on, with what the history (the jobs
ended before that moment) says of similar jobs that ran that long, capped at its time limit
(`RuntimeEstimator.expected_run`, the rule the live service follows too).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.jobspec import Job
from lyasched.estimates import Estimate, Request, RuntimeEstimator
from lyasched.estimates.estimator import SOURCES, EstimatorParams
from lyasched.estimates.sacct import finished_of_job, request_of_job
from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.workloads import TraceRow, trace_jobs
from lyasched.whatif.history import HistoryJob
from lyasched.whatif.replay import HistoryTooBig, Replay
from lyasched.whatif.typed import TypedSite, on_recorded_type, simulation, unit_on

BACKFILL = "backfill"
# the outcome name of backfill planning with the users' time limits (Slurm as it is)
BACKFILL_LIMITS = "backfill-limits"
MIN_RUN_S = 1.0  # a recorded run of 0 s is replayed as this (a job occupies its GPUs a moment)


@dataclass(frozen=True)
class ArrivalEstimate(Estimate):
    """An estimate made at a job's arrival, with the request it was made for (the replay asks
    the history about the same request again when the job outlives it)."""

    request: Request


def history_estimates(hist: Sequence[HistoryJob], names: Mapping[int, str] | None = None,
                      params: EstimatorParams | None = None) -> list[Estimate]:
    """Each job's estimate at its arrival, learnt only from the jobs whose recorded end came
    strictly before it. ``names``: job name by the sacct line of the job's last run."""
    names = names or {}
    reqs = [request_of_job(j, names.get(j.line, "")) for j in hist]
    est = RuntimeEstimator(params)
    by_end = sorted(range(len(hist)), key=lambda k: (hist[k].end, k))
    out: list[Estimate | None] = [None] * len(hist)
    e = 0
    for k in sorted(range(len(hist)), key=lambda k: (hist[k].arrival, k)):
        t = hist[k].arrival
        while e < len(by_end) and hist[by_end[e]].end < t:
            j = hist[by_end[e]]
            est.observe(finished_of_job(j, names.get(j.line, "")))
            e += 1
        e_k = est.estimate(reqs[k], t)
        out[k] = ArrivalEstimate(e_k.mean_s, e_k.spread, e_k.source, e_k.n, reqs[k])
    return [x for x in out if x is not None]


def outlived_rule(hist: Sequence[HistoryJob], ests: Sequence[Estimate], index: Mapping[str, int],
                  sim_jobs: Sequence[Job], params: EstimatorParams | None = None) -> Callable[[int, float, float, float], float]:
    """The simulator's ``running_estimate``: what to show a running job past its prediction,
    from the jobs whose recorded end came before that moment (an estimator that keeps every
    run, asked "as of now"; it reads each key's latest ``outlived_window`` runs, as the live one)."""
    base = params or EstimatorParams()
    est = RuntimeEstimator(replace(base, keep=max(base.keep, len(hist) + 1)))
    reqs = [e.request if isinstance(e, ArrivalEstimate) else request_of_job(j) for j, e in zip(hist, ests)]
    est.observe_all(finished_of_job(j, r.name) for j, r in zip(hist, reqs))
    req_of = [reqs[index[j.job_id]] for j in sim_jobs]

    def rule(i: int, predicted_s: float, elapsed_s: float, now: float) -> float:
        return est.expected_run(req_of[i], predicted_s, elapsed_s, now)

    return rule


def estimate_figures(hist: Sequence[HistoryJob], ests: Sequence[Estimate]) -> dict[str, Any]:
    """How good the estimates were against the recorded runs: the median relative error
    |est - actual| / actual, the median log(est / actual) (below 0: estimates short), the same
    for the time limits alone, and how many estimates each source gave."""
    actual = np.maximum(np.array([j.work_s for j in hist], dtype=float), MIN_RUN_S)
    est = np.maximum(np.array([e.mean_s for e in ests], dtype=float), MIN_RUN_S)
    src = np.array([e.source for e in ests], dtype=object)
    rel = np.abs(est - actual) / actual
    logr = np.log(est / actual)
    per_source = {}
    for s in SOURCES:
        m = src == s
        if m.any():
            per_source[s] = {"jobs": int(m.sum()), "median_rel_error": float(np.median(rel[m])),
                             "median_log_ratio": float(np.median(logr[m]))}
    lim = np.array([j.time_limit if j.time_limit is not None and j.time_limit > 0 else math.nan for j in hist])
    has = np.isfinite(lim)
    out: dict[str, Any] = {
        "jobs": int(len(ests)),
        "median_rel_error": float(np.median(rel)),
        "median_log_ratio": float(np.median(logr)),
        "median_abs_log_ratio": float(np.median(np.abs(logr))),
        "within_2x": float(np.mean(np.abs(logr) <= math.log(2.0))),
        "sources": {s: v["jobs"] for s, v in per_source.items()},
        "per_source": per_source,
    }
    if has.any():
        lr = np.log(np.maximum(lim[has], MIN_RUN_S) / actual[has])
        out["time_limits"] = {"jobs": int(has.sum()),
                              "median_rel_error": float(np.median(np.abs(lim[has] - actual[has]) / actual[has])),
                              "median_log_ratio": float(np.median(lr))}
    return out


def build_managed_simulations(hist: Sequence[HistoryJob], cluster: ClusterSpec, ests: Sequence[Estimate], *,
                              slot: float, seed: int, typed: TypedSite | None = None
                              ) -> tuple[Simulation, Simulation, dict[str, int]]:
    """Two simulations of the same jobs, true runs = recorded, predicted runs = the estimates:
    the first with the users' time limits, the second with the predicted runs as the limits
    (backfill planning with the estimates). Returns them and job id -> history position.
    ``typed``: on the site's typed nodes, each job predicted and run on its recorded type
    (lyasched.whatif.typed)."""
    too_big = [j for j in hist if j.gpus > cluster.total_gpus]
    if too_big:
        worst = max(too_big, key=lambda j: j.gpus)
        raise HistoryTooBig(f"{len(too_big)} recorded jobs used more than the cluster's {cluster.total_gpus} GPUs "
                            f"(job {worst.job_id}: {worst.gpus}); give more --nodes or --gpus-per-node")
    rows = [TraceRow(k, j.arrival, max(e.mean_s, MIN_RUN_S), j.gpus, j.user) for k, (j, e) in enumerate(zip(hist, ests))]
    jobs = []
    for job, h in zip(trace_jobs(rows, cluster, seed), hist):  # rigid: only the recorded GPU count
        jobs.append(Job(**{**job.__dict__, "time_limit": h.time_limit, "min_gpus": job.requested_gpus,
                           "max_gpus": job.requested_gpus}))
    index = {f"t{k}": k for k in range(len(hist))}

    def make(jobs: list[Job]) -> Simulation:
        kw = dict(slot_len=slot, estimate_error=0.0, seed=seed)
        return Simulation(jobs, cluster, **kw) if typed is None else simulation(jobs, typed, **kw)  # type: ignore[arg-type]

    sim = make(jobs)
    if typed is not None:  # the estimate is of a run on its recorded type: iterations solved there
        jobs = on_recorded_type(sim, typed, index, {j: float(rows[k].duration) for j, k in index.items()})
        sim = make(jobs)
        ran = [typed.ran_on[index[j.job_id]] for j in sim.jobs]
        pred = np.array([unit_on(sim, i, t, typed.gpus_per_node(t)) * j.iterations
                         for i, (j, t) in enumerate(zip(sim.jobs, ran))])
    else:
        gpn = cluster.gpus_per_node
        pred = np.array([sim.predicted(i).run_time(j.requested_gpus, j.requested_gpus > gpn) for i, j in enumerate(sim.jobs)])
    recorded = np.array([max(hist[index[j.job_id]].work_s, MIN_RUN_S) for j in sim.jobs])
    factors = recorded / pred  # true run on the recorded count, packed as it must be = the recorded run
    sim.factors = factors
    by_id = dict(zip((j.job_id for j in sim.jobs), pred))
    est_jobs = [replace(j, time_limit=float(by_id[j.job_id])) for j in jobs]
    sim_est = make(est_jobs)
    if [j.job_id for j in sim_est.jobs] != [j.job_id for j in sim.jobs]:
        raise RuntimeError("the two managed simulations order the jobs differently")
    sim_est.factors = factors.copy()
    sim.running_estimate = sim_est.running_estimate = outlived_rule(hist, ests, index, sim.jobs)
    return sim, sim_est, index


def managed_outcome_names(policies: Sequence[str]) -> list[str]:
    """The outcomes a managed replay shows: each policy, and backfill once more with time limits."""
    out = list(policies)
    if BACKFILL in out:
        out.insert(out.index(BACKFILL) + 1, BACKFILL_LIMITS)
    return out


def replay_managed(
    hist: Sequence[HistoryJob],
    cluster: ClusterSpec,
    ests: Sequence[Estimate],
    policies: Sequence[str],
    params: dict[str, dict[str, Any]],
    *,
    slot: float,
    seed: int,
    progress: bool = False,
    say: Callable[[str], None] = lambda s: None,
    typed: TypedSite | None = None,
) -> Replay:
    """Every policy on the estimates; backfill also with the users' time limits (named
    ``backfill-limits``). The Replay's ``sim`` is the one with the users' limits."""
    t = time.perf_counter()
    sim, sim_est, index = build_managed_simulations(hist, cluster, ests, slot=slot, seed=seed, typed=typed)
    where = typed.cluster.describe() if typed is not None else f"{cluster.nodes}x{cluster.gpus_per_node}"
    say(f"built {len(hist)} managed replay jobs on {where} GPUs "
        f"in {time.perf_counter() - t:.1f} s")
    runs = managed_outcome_names(policies)
    results = []
    for k, name in enumerate(runs, 1):
        pname = BACKFILL if name == BACKFILL_LIMITS else name
        pol = make_policy(pname, seed=seed, **params.get(pname, {}))
        on = sim_est if name == BACKFILL else sim  # only backfill reads limits: give it the estimates
        say(f"replaying under {name} ({k}/{len(runs)})")
        res = on.run(pol, progress=progress, name=name)
        say(f"{name}: done in {res.wall_s:.1f} s")
        results.append(res)
    return Replay(sim=sim, index=index, results=results)


def describe_estimates(fig: Mapping[str, Any]) -> str:
    """One line for the terminal: how far the estimates were from the recorded runs."""
    src = ", ".join(f"{s} {n}" for s, n in fig["sources"].items())
    line = (f"estimates of {fig['jobs']} jobs from the jobs ended before each: median error "
            f"{fig['median_rel_error']:.0%} of the run, median log(est/actual) {fig['median_log_ratio']:+.2f}, "
            f"{fig['within_2x']:.0%} within 2x; sources: {src}")
    lim = fig.get("time_limits")
    if lim:
        line += f"; the time limits alone: median error {lim['median_rel_error']:.0%}"
    return line
