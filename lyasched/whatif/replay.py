"""Replay a site's history under policies, through the same entry points as `lyasched replay`
uses for a CSV trace (`trace_jobs`, `Simulation`, `make_policy`).

Truth is the record: a job started on the GPU count it actually got runs exactly as long as
it did (other counts scale by the cost model). What a policy sees is an estimate with the
usual lognormal error (``estimate_error``): the trace rows are given duration / f, where f
is the simulator's per-job true/predicted factor, so that f x prediction = the recorded run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.jobspec import Job
from lyasched.policy import make_policy
from lyasched.sim import SimResult, Simulation, true_factors
from lyasched.sim.workloads import TraceRow, trace_jobs
from lyasched.whatif.history import HistoryJob
from lyasched.whatif.typed import TypedSite, on_recorded_type, simulation


class HistoryTooBig(ValueError):
    """A recorded job needs more GPUs than the replay cluster has."""


@dataclass
class Replay:
    sim: Simulation
    index: dict[str, int]  # replay job id -> position in the history's job list
    results: list[SimResult]


def _jobs(hist: Sequence[HistoryJob], cluster: ClusterSpec, seed: int, factors: dict[str, float], rigid: bool) -> list[Job]:
    rows = [TraceRow(k, j.arrival, j.work_s / factors.get(f"t{k}", 1.0), j.gpus, j.user) for k, j in enumerate(hist)]
    jobs = trace_jobs(rows, cluster, seed)
    # the site's own time limits (backfill reads them) instead of the trace's synthetic ones;
    # rigid: only the recorded GPU count is allowed (a policy chooses when, not how many)
    out = []
    for job, h in zip(jobs, hist):
        fields = {**job.__dict__, "time_limit": h.time_limit}
        if rigid:
            fields["min_gpus"] = fields["max_gpus"] = job.requested_gpus
        out.append(Job(**fields))
    return out


def build_simulation(hist: Sequence[HistoryJob], cluster: ClusterSpec, *, slot: float, estimate_error: float,
                     seed: int, rigid: bool = False, typed: TypedSite | None = None) -> tuple[Simulation, dict[str, int]]:
    """A Simulation whose true run times are the recorded ones (see the module docstring).

    The factors are drawn as the simulator draws them (`true_factors`, in its job order: by
    submit time, then id); the Simulation's own factors are then checked against them, and
    if they differ (the simulator changed how it draws) the rows are rebuilt from its factors.
    """
    too_big = [j for j in hist if j.gpus > cluster.total_gpus]
    if too_big:
        worst = max(too_big, key=lambda j: j.gpus)
        raise HistoryTooBig(f"{len(too_big)} recorded jobs used more than the cluster's {cluster.total_gpus} GPUs "
                            f"(job {worst.job_id}: {worst.gpus}); give more --nodes or --gpus-per-node")
    kw: dict[str, Any] = dict(slot_len=slot, estimate_error=estimate_error, seed=seed)
    index = {f"t{k}": k for k in range(len(hist))}
    order = sorted(index, key=lambda jid: (hist[index[jid]].arrival, jid))
    factors = dict(zip(order, map(float, true_factors(len(hist), estimate_error, seed))))

    def make(jobs: list[Job]) -> Simulation:
        return Simulation(jobs, cluster, **kw) if typed is None else simulation(jobs, typed, **kw)

    sim = make(_jobs(hist, cluster, seed, factors, rigid))
    if not np.array_equal(np.array([factors[j.job_id] for j in sim.jobs]), np.asarray(sim.factors, dtype=float)):
        factors = {j.job_id: float(f) for j, f in zip(sim.jobs, sim.factors)}
        sim = make(_jobs(hist, cluster, seed, factors, rigid))
        if not np.array_equal(np.array([factors[j.job_id] for j in sim.jobs]), np.asarray(sim.factors, dtype=float)):
            raise RuntimeError("the simulator's true/predicted factors cannot be matched to the recorded runs")
    if typed is not None:  # the same jobs in the same order (same factors), run on their recorded types
        sim = make(on_recorded_type(sim, typed, index, {j: hist[k].work_s / factors[j] for j, k in index.items()}))
    return sim, index


def replay_history(
    hist: Sequence[HistoryJob],
    cluster: ClusterSpec,
    policies: Sequence[str],
    params: dict[str, dict[str, Any]],
    *,
    slot: float,
    estimate_error: float,
    seed: int,
    rigid: bool = False,
    progress: bool = False,
    say: Callable[[str], None] = lambda s: None,
    typed: TypedSite | None = None,
) -> Replay:
    """Run every policy over the history; ``say`` gets one progress line per step."""
    t = time.perf_counter()
    sim, index = build_simulation(hist, cluster, slot=slot, estimate_error=estimate_error, seed=seed, rigid=rigid,
                                  typed=typed)
    where = typed.cluster.describe() if typed is not None else f"{cluster.nodes}x{cluster.gpus_per_node}"
    say(f"built {len(hist)} replay jobs on {where} GPUs in {time.perf_counter() - t:.1f} s")
    built = [(n, make_policy(n, seed=seed, **params.get(n, {}))) for n in policies]
    results = []
    for k, (name, pol) in enumerate(built, 1):
        say(f"replaying under {name} ({k}/{len(built)})")
        res = sim.run(pol, progress=progress, name=name)
        say(f"{name}: done in {res.wall_s:.1f} s")
        results.append(res)
    return Replay(sim=sim, index=index, results=results)
