"""Workloads for `lyasched replay`: the seed talk's four experiment groups and CSV traces.

Built-in groups are generated from a seed number (same seed, same jobs). Traces give each
job a CNN profile deterministically and solve its iteration count so that its predicted
run time at the requested GPU count equals the trace's duration. docs/simulator.md
documents the groups, their default clusters and the trace mapping.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Sequence

import numpy as np

from lyasched.costmodel.cost import ClusterSpec, CostModel, Link
from lyasched.costmodel.goodput import Adaptive, NoiseScale
from lyasched.costmodel.jobspec import Job
from lyasched.policy.placement import parse_constraint
from lyasched.sim.hetero import parse_allowed
from lyasched.sim.models import MODELS, epoch_iterations, profile


class TraceError(ValueError):
    """A trace file that cannot be replayed (message is one line)."""


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: tuple[Job, ...]
    cluster: ClusterSpec  # the default cluster (used when --nodes is not given)
    description: str = ""
    # job id -> share of its run a job does before it ends early (cancelled/failed; synthetic workloads)
    end_fraction: dict = field(default_factory=dict)
    # job id -> the GPU types it allows (a ``gpu_types`` column; lyasched.sim.hetero); absent = any
    gpu_types: dict = field(default_factory=dict)
    # job id -> its node-feature constraint (a ``constraint`` column, Slurm's --constraint); absent = none
    constraints: dict = field(default_factory=dict)


# 25 Gb/s Ethernet between nodes, NVLink-class inside one: cross-node data parallelism
# costs real time for the large models, as in the talk's communication/computation balance.
SEED_INTRA = Link(bandwidth=50e9, latency=10e-6)
SEED_INTER = Link(bandwidth=3.125e9, latency=50e-6)


@dataclass(frozen=True)
class GroupSpec:
    large_frac: float  # share of large-data (ImageNet-scale) jobs
    bursts: int  # 0 = Poisson arrivals; else that many bursts
    burst_window: float  # seconds over which one burst's jobs arrive
    load: float  # offered load on the default cluster (requested GPU-seconds / capacity)
    nodes: int
    gpus_per_node: int
    jobs: int
    description: str


SEED_GROUPS: dict[str, GroupSpec] = {
    "seed-small-scattered": GroupSpec(
        0.15, 0, 0.0, 0.8, 4, 4, 200, "mostly small-data (CIFAR-scale) jobs, Poisson arrivals"
    ),
    "seed-small-bursty": GroupSpec(
        0.15, 5, 600.0, 0.8, 4, 4, 200, "the same job mix arriving in 5 bursts of 10 minutes"
    ),
    "seed-large-scattered": GroupSpec(
        0.8, 0, 0.0, 0.8, 4, 8, 150, "mostly large-data (ImageNet-scale) jobs, Poisson arrivals"
    ),
    "seed-large-bursty": GroupSpec(
        0.8, 1, 1800.0, 1.0, 4, 8, 150, "many large-data jobs all arriving within 30 minutes"
    ),
}


def _pick_batch(rng: np.random.Generator, choices: Sequence[int]) -> int:
    return int(choices[int(rng.integers(len(choices)))])


def _make_job(
    rng: np.random.Generator, idx: int, large: bool, cost: CostModel, max_choices: Sequence[int]
) -> Job:
    names = list(MODELS)
    model = names[rng.integers(len(names))]
    if large:
        dataset, batch = "imagenet", _pick_batch(rng, (128, 256, 512))
        epochs = float(rng.uniform(0.5, 3.0))  # short ImageNet runs / fine-tuning: 1-10 GPU-hours
    else:
        dataset, batch = "cifar10", _pick_batch(rng, (64, 128, 256, 512))
        epochs = float(rng.uniform(5.0, 40.0))  # a few minutes to an hour on one GPU
    prof = profile(model, dataset)
    iterations = max(1, int(round(epochs * epoch_iterations(dataset, batch))))
    max_gpus = min(int(max_choices[int(rng.integers(len(max_choices)))]), cost.cluster.total_gpus)
    allowed = cost.allowed_counts(prof, batch, 1, max_gpus)
    if not allowed:  # cannot happen with the library's batches on 32 GB GPUs; keep jobs runnable
        raise ValueError(f"{model}/{dataset} batch {batch} fits no GPU count")
    # users mostly ask for 1-2 GPUs for small jobs, 1-8 for large ones, never a count that cannot run
    wish = (1, 2, 4, 8) if large else (1, 1, 1, 2, 4)
    req = int(wish[rng.integers(len(wish))])
    ok = [g for g in allowed if g >= req] or allowed
    requested = min(ok)
    gpn = cost.cluster.gpus_per_node
    est = cost.run_time(prof, batch, iterations, requested, requested > gpn)
    limit = math.ceil(est * float(rng.uniform(1.5, 4.0)) / 60.0) * 60.0  # users round up and pad
    return Job(
        job_id=f"j{idx:04d}",
        profile=prof,
        global_batch=batch,
        iterations=iterations,
        submit_time=0.0,
        min_gpus=1,
        max_gpus=max_gpus,
        requested_gpus=requested,
        time_limit=limit,
        user=f"user{int(rng.integers(8))}",
    )


def seed_cluster(name: str) -> ClusterSpec:
    g = SEED_GROUPS[name]
    return ClusterSpec(nodes=g.nodes, gpus_per_node=g.gpus_per_node, intra=SEED_INTRA, inter=SEED_INTER)


def seed_workload(name: str, seed: int = 0, n_jobs: int | None = None) -> Workload:
    """One of the talk's four experiment groups, reproducible from ``seed``."""
    if name not in SEED_GROUPS:
        raise ValueError(f"unknown workload {name!r}; built-in: {', '.join(SEED_GROUPS)}")
    spec = SEED_GROUPS[name]
    cluster = seed_cluster(name)
    cost = CostModel(cluster)
    rng = np.random.default_rng([int(seed), list(SEED_GROUPS).index(name)])
    n = spec.jobs if n_jobs is None else int(n_jobs)
    large = rng.random(n) < spec.large_frac
    jobs = [_make_job(rng, i, bool(large[i]), cost, (4, 8, 16)) for i in range(n)]
    gpn = cluster.gpus_per_node
    demand = sum(j.requested_gpus * j.run_time(cost, j.requested_gpus, j.requested_gpus > gpn) for j in jobs)
    span = demand / (spec.load * cluster.total_gpus)  # arrival span that gives the target load
    if spec.bursts == 0:
        gaps = rng.exponential(span / n, n)
        times = np.cumsum(gaps) - gaps[0]
    else:
        starts = np.linspace(0.0, max(0.0, span - spec.burst_window), spec.bursts) if spec.bursts > 1 else np.zeros(1)
        which = np.sort(rng.integers(spec.bursts, size=n))
        times = np.sort(starts[which] + rng.uniform(0.0, spec.burst_window, n))
        times -= times[0]
    jobs = [Job(**{**j.__dict__, "submit_time": float(round(t, 3))}) for j, t in zip(jobs, times)]
    return Workload(name=name, jobs=tuple(jobs), cluster=cluster, description=spec.description)


# --- traces -----------------------------------------------------------------------------

TRACE_GPUS_PER_NODE = 8
TRACE_DEFAULT_LOAD = 0.8
TRACE_MAX_GPUS = 65536  # per job: beyond that a row is garbage, and the cluster sized for it would be too
TRACE_MAX_DURATION = 1e9  # seconds (~32 years): beyond that sizing the cluster overflows


@dataclass(frozen=True)
class TraceRow:
    row: int  # 0-based data row in the file: keys the deterministic profile choice
    submit: float
    duration: float
    gpus: int
    group: str
    adaptive: Adaptive | None = None  # optional columns max_batch and noise_scale (lyasched.costmodel.goodput)
    gpu_types: tuple[str, ...] = ()  # optional column gpu_types: the GPU types the job allows (() = any)
    constraint: str = ""  # optional column constraint: node features it needs (Slurm's --constraint; "" = none)


def _parse_time(text: str) -> float:
    if not (text[4:5] == "-" and text[:4].isdigit()):  # not YYYY-...: no float starts so; skip the raise
        try:
            return float(text)
        except ValueError:
            pass
    d = datetime.fromisoformat(text.strip())
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


def read_trace(path: str) -> list[TraceRow]:
    """Read a `submit_time|timestamp,duration,num_gpus` CSV; one-line TraceError on bad input."""
    if not os.path.isfile(path):
        raise TraceError(f"trace {path}: no such file")
    out: list[TraceRow] = []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            cols = reader.fieldnames or []
            tcol = "submit_time" if "submit_time" in cols else "timestamp" if "timestamp" in cols else None
            missing = [c for c in ("duration", "num_gpus") if c not in cols]
            if tcol is None:
                missing.insert(0, "submit_time (or timestamp)")
            if missing:
                raise TraceError(f"trace {path}: missing column(s) {', '.join(missing)}")
            gcol = "cluster" if "cluster" in cols else "user" if "user" in cols else None
            adaptive_cols = "max_batch" in cols or "noise_scale" in cols
            for k, r in enumerate(reader):
                line = k + 2
                vals = (r.get(tcol), r.get("duration"), r.get("num_gpus"))
                if not (vals[0] and vals[1] and vals[2]) or not (vals[0].strip() and vals[1].strip() and vals[2].strip()):
                    raise TraceError(f"trace {path} line {line}: truncated row (empty submit time, duration or num_gpus)")
                try:
                    submit = _parse_time(str(vals[0]))
                except ValueError:
                    raise TraceError(f"trace {path} line {line}: bad {tcol} {vals[0]!r}") from None
                try:
                    duration = float(str(vals[1]))
                except ValueError:
                    raise TraceError(f"trace {path} line {line}: bad duration {vals[1]!r}") from None
                try:
                    g = float(str(vals[2]))
                except ValueError:
                    raise TraceError(f"trace {path} line {line}: bad num_gpus {vals[2]!r}") from None
                if not (math.isfinite(submit) and math.isfinite(duration)):
                    raise TraceError(f"trace {path} line {line}: non-finite time or duration")
                if duration < 0:
                    raise TraceError(f"trace {path} line {line}: negative duration {duration:g}")
                if not math.isfinite(g) or g != int(g) or g < 1:
                    raise TraceError(f"trace {path} line {line}: num_gpus must be a positive integer, got {vals[2]!r}")
                if duration > TRACE_MAX_DURATION or g > TRACE_MAX_GPUS:
                    raise TraceError(f"trace {path} line {line}: duration {duration:g} or num_gpus {g:g} out of range "
                                     f"(at most {TRACE_MAX_DURATION:g} s and {TRACE_MAX_GPUS} GPUs)")
                ad = _adaptive(path, line, r) if adaptive_cols else None
                try:
                    types = parse_allowed(r.get("gpu_types") or "") if "gpu_types" in cols else ()
                except ValueError as e:
                    raise TraceError(f"trace {path} line {line}: {e}") from None
                ft = (r.get("constraint") or "").strip() if "constraint" in cols else ""
                if ft:
                    try:
                        parse_constraint(ft)
                    except ValueError as e:
                        raise TraceError(f"trace {path} line {line}: {e}") from None
                out.append(TraceRow(k, submit, duration, int(g), (r.get(gcol) or "") if gcol else "", ad, types, ft))
    except UnicodeDecodeError:
        raise TraceError(f"trace {path}: not a text CSV file") from None
    except csv.Error as e:
        raise TraceError(f"trace {path}: {e}") from None
    if not out:
        raise TraceError(f"trace {path}: no jobs")
    return out


def _adaptive(path: str, line: int, r: dict) -> Adaptive | None:
    """A row's opt-in to batch choice: both ``max_batch`` and ``noise_scale`` set, or neither."""
    mb, ns = (r.get("max_batch") or "").strip(), (r.get("noise_scale") or "").strip()
    if not mb and not ns:
        return None
    if not (mb and ns):
        raise TraceError(f"trace {path} line {line}: max_batch and noise_scale go together (one is empty)")
    try:
        m = float(mb)
    except ValueError:
        raise TraceError(f"trace {path} line {line}: bad max_batch {mb!r}") from None
    if not math.isfinite(m) or m != int(m) or m < 1:
        raise TraceError(f"trace {path} line {line}: max_batch must be a positive integer, got {mb!r}")
    try:
        return Adaptive(int(m), NoiseScale.parse(ns))
    except ValueError as e:
        raise TraceError(f"trace {path} line {line}: {e}") from None


def select_rows(
    rows: Sequence[TraceRow], max_jobs: int | None = None, start: float | None = None, end: float | None = None
) -> list[TraceRow]:
    """Window [start, end) in seconds from the first submission, then the first ``max_jobs``."""
    rows = sorted(rows, key=lambda r: (r.submit, r.row))
    t0 = rows[0].submit
    lo = -math.inf if start is None else t0 + start
    hi = math.inf if end is None else t0 + end
    sel = [r for r in rows if lo <= r.submit < hi]
    if max_jobs is not None:
        sel = sel[: max(0, int(max_jobs))]
    if not sel:
        raise TraceError("trace selection is empty (check --start/--end/--max-jobs)")
    return sel


def size_cluster(
    rows: Sequence[TraceRow], load: float, gpus_per_node: int = TRACE_GPUS_PER_NODE, **links: Any
) -> ClusterSpec:
    """Nodes for offered load ``load``: requested GPU-seconds / (span x load), rounded up."""
    if load <= 0:
        raise ValueError("load must be > 0")
    demand = sum(r.duration * r.gpus for r in rows)
    span = max(r.submit for r in rows) - min(r.submit for r in rows)
    span = max(span, max(r.duration for r in rows), 1.0)
    nodes = math.ceil(demand / (span * load) / gpus_per_node)
    nodes = max(nodes, math.ceil(max(r.gpus for r in rows) / gpus_per_node), 1)
    return ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node, **links)


def trace_jobs(rows: Sequence[TraceRow], cluster: ClusterSpec, seed: int = 0) -> list[Job]:
    """Give each trace row a CNN profile and solve its iterations to match its duration.

    A row with ``max_batch`` and ``noise_scale`` opts in to batch choice (`Job.adaptive`): its
    global batch is then its base batch M0 and its iterations base steps.

    Row r gets model ``MODELS[h % len]`` (h from an RNG seeded by (seed, r), so the choice
    does not depend on the window), ImageNet data, global batch = requested GPUs x the model's
    typical per-GPU batch, max_gpus = max(requested, GPUs per node) and
    iterations = round(duration / predicted iteration time at the requested count, packed
    on one node when it fits).
    """
    cost = CostModel(cluster)
    gpn = cluster.gpus_per_node
    names = list(MODELS)
    top = max(r.row for r in rows) + 1
    draws = np.random.default_rng([int(seed), 0x7ACE]).random((top, 2)).tolist()  # the same floats as Python's
    t0 = min(r.submit for r in rows)
    jobs = []
    # a model's profile and its iteration time per GPU count, computed once (the same pure calls)
    profs: dict[str, Any] = {}
    iters: dict[tuple[str, int], float] = {}
    for r in rows:
        d0, d1 = draws[r.row]
        spec = MODELS[names[int(d0 * len(names))]]
        prof = profs.get(spec.name)
        if prof is None:
            prof = profs[spec.name] = profile(spec.name, "imagenet")
        g = min(r.gpus, cluster.total_gpus)
        batch = g * spec.local_batch
        it = iters.get((spec.name, g))
        if it is None:
            it = iters[spec.name, g] = cost.iter_time(prof, batch, g, g > gpn)
        iterations = max(1, int(round(r.duration / it)))
        limit = math.ceil(max(r.duration, it) * (1.5 + 2.5 * d1) / 60.0) * 60.0
        jobs.append(
            Job(
                job_id=f"t{r.row}",
                profile=prof,
                global_batch=batch,
                iterations=iterations,
                submit_time=r.submit - t0,
                min_gpus=1,
                max_gpus=max(g, gpn),
                requested_gpus=g,
                time_limit=limit,
                user=r.group,
                adaptive=r.adaptive,
            )
        )
    return jobs


def load_workload(
    name: str,
    *,
    seed: int = 0,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    load: float | None = None,
    max_jobs: int | None = None,
    start: float | None = None,
    end: float | None = None,
) -> Workload:
    """A built-in group by name, a ``synth:`` spec (lyasched.sim.synth) or a CSV trace by path,
    on the cluster the options describe."""
    from lyasched.sim.synth import is_synth, synth_workload

    if is_synth(name):
        try:
            s = synth_workload(name, seed, nodes=nodes, gpus_per_node=gpus_per_node, load=load)
        except ValueError as e:
            raise TraceError(str(e)) from None
        jobs = list(s.jobs)
        if start is not None or end is not None or max_jobs is not None:
            rows = [TraceRow(k, j.submit_time, 1.0, 1, "") for k, j in enumerate(jobs)]
            keep = {r.row for r in select_rows(rows, max_jobs, start, end)}
            jobs = [j for k, j in enumerate(jobs) if k in keep]
        ends = {j.job_id: s.end_fraction[j.job_id] for j in jobs if j.job_id in s.end_fraction}
        return Workload(name=s.name, jobs=tuple(jobs), cluster=s.cluster, description=s.description, end_fraction=ends)
    if name in SEED_GROUPS:
        base = seed_workload(name, seed)
        rows = [
            TraceRow(k, j.submit_time, j.run_time(CostModel(base.cluster), j.requested_gpus, j.requested_gpus > base.cluster.gpus_per_node), j.requested_gpus, "")
            for k, j in enumerate(base.jobs)
        ]
        gpn = gpus_per_node or base.cluster.gpus_per_node
        links: dict[str, Any] = dict(intra=base.cluster.intra, inter=base.cluster.inter)
        if nodes is not None:
            cluster = ClusterSpec(nodes=nodes, gpus_per_node=gpn, **links)
        elif load is not None:
            cluster = size_cluster(rows, load, gpn, **links)
        else:
            cluster = ClusterSpec(nodes=base.cluster.nodes, gpus_per_node=gpn, **links)
        jobs = list(base.jobs)
        if start is not None or end is not None or max_jobs is not None:
            keep = {r.row for r in select_rows(rows, max_jobs, start, end)}
            jobs = [j for k, j in enumerate(jobs) if k in keep]
        if cluster != base.cluster:  # regenerate so GPU ranges and requests fit the new cluster
            cost = CostModel(cluster)
            jobs = [_refit(j, cost) for j in jobs]
        return Workload(name=name, jobs=tuple(jobs), cluster=cluster, description=base.description)
    if not (name.endswith(".csv") or os.sep in name or os.path.exists(name)):
        raise TraceError(f"unknown workload {name!r}: not a built-in ({', '.join(SEED_GROUPS)}), a synth:... spec nor a CSV path")
    rows = select_rows(read_trace(name), max_jobs, start, end)
    gpn = gpus_per_node or TRACE_GPUS_PER_NODE
    if nodes is not None:
        cluster = ClusterSpec(nodes=nodes, gpus_per_node=gpn)
    else:
        cluster = size_cluster(rows, TRACE_DEFAULT_LOAD if load is None else load, gpn)
    too_big = [r for r in rows if r.gpus > cluster.total_gpus]
    if too_big:
        raise TraceError(
            f"{len(too_big)} trace jobs ask for more than the cluster's {cluster.total_gpus} GPUs "
            f"(largest {max(r.gpus for r in too_big)}); use more --nodes"
        )
    return Workload(name=os.path.basename(name), jobs=tuple(trace_jobs(rows, cluster, seed)), cluster=cluster, description="trace",
                    gpu_types={f"t{r.row}": r.gpu_types for r in rows if r.gpu_types},
                    constraints={f"t{r.row}": r.constraint for r in rows if r.constraint})


def _refit(job: Job, cost: CostModel) -> Job:
    """Clamp a generated job's GPU range and request to a smaller/other cluster."""
    total = cost.cluster.total_gpus
    max_gpus = min(job.max_gpus, total)
    allowed = cost.allowed_counts(job.profile, job.global_batch, job.min_gpus, max_gpus)
    if not allowed:
        raise TraceError(f"job {job.job_id} ({job.profile.model}) cannot run on {total} GPUs")
    req = job.requested_gpus if job.requested_gpus in allowed else max(g for g in allowed if g <= max(job.requested_gpus, allowed[0]))
    return Job(**{**job.__dict__, "max_gpus": max_gpus, "requested_gpus": req})


# --------------------------------------------------------------------------- multi-tenant workloads
# Several tenants, each with its own synthetic job stream (a ``synth:`` spec generated on the shared
# cluster, so its ``load`` is that tenant's offered load there), merged on one cluster; jobs are
# renamed ``TENANT-ID`` and their ``user`` is the tenant. Shares (equal unless given) go to the
# simulator and the fairness figures (lyasched.sim.fairness; docs/fairness.md).


@dataclass(frozen=True)
class Tenant:
    name: str
    spec: str  # a synth: spec; its nodes/gpn are replaced by the shared cluster's
    share: float = 1.0


def tenant_workload(name: str, tenants: Sequence[Tenant], *, nodes: int, gpus_per_node: int,
                    seed: int = 0) -> tuple[Workload, dict[str, float]]:
    """The tenants' jobs merged on a ``nodes`` x ``gpus_per_node`` cluster, and their shares.
    Tenant k's jobs are generated from seed ``seed * 1000 + k``: same seed, same jobs."""
    from lyasched.sim.synth import synth_workload

    if len({t.name for t in tenants}) != len(tenants):
        raise ValueError("tenant names must differ")
    jobs, ends = [], {}
    for k, t in enumerate(tenants):
        w = synth_workload(t.spec, seed=seed * 1000 + k, nodes=nodes, gpus_per_node=gpus_per_node)
        for j in w.jobs:
            jid = f"{t.name}-{j.job_id}"
            jobs.append(replace(j, job_id=jid, user=t.name))
            if j.job_id in w.end_fraction:
                ends[jid] = w.end_fraction[j.job_id]
    cluster = ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node)
    desc = "; ".join(f"{t.name} (share {t.share:g}): {t.spec}" for t in tenants)
    shares = {t.name: float(t.share) for t in tenants}
    return Workload(name=name, jobs=tuple(jobs), cluster=cluster, description=desc, end_fraction=ends), shares
