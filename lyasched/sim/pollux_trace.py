"""Workloads in the Pollux (OSDI'21) artifact's layout, read natively (docs/simulator.md, "Pollux traces").

A workload CSV (``name,time,application,num_replicas,batch_size``) names, per job, an application
whose measured profile lives in ``PROFILES/<application>/``: ``placements.csv`` and
``scalability.csv`` (step and sync times per placement and per-GPU batch) and
``validation-<batch>.csv`` (one row per epoch: ``progress,iteration,metric,grad_sqr,grad_var``).

Each application becomes a cost-model `Profile`: compute t(b) fitted to its one-GPU rows, and its
all-reduce scaled per link so the cost model's ring term gives the median measured sync time
(one node, several nodes). The cluster's links are unit links (bandwidth 1, no latency), so a
profile's ``comm_scale_*`` is its all-reduce time for two ranks' worth of the ring factor.

A job is **adaptive** (what Pollux runs): base batch M0 = the application's smallest validated
batch, largest batch = its largest, iterations = base steps to the end of its last epoch
(``progress`` at ``max_epochs``), one re-tuning piece per epoch, and its noise scale per epoch
phi_e = M0 x grad_var / grad_sqr (the geometric mean over the validated batches), so a step at
batch M is worth what the artifact's gain ``(var + sqr) / (var / s + sqr)`` makes it. With
``adaptive=False`` (what Tiresias+TunedJobs and Optimus run) a job trains at its row's batch on
its row's replicas; its steps are the base steps each epoch divided by that epoch's gain at the
batch, from the statistics interpolated between validated batches, as the artifact does.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from lyasched.costmodel.calibration import PlacementRow, fit_compute, read_placements_csv, read_scalability_csv
from lyasched.costmodel.cost import ClusterSpec, Link, Profile
from lyasched.costmodel.goodput import Adaptive, NoiseScale
from lyasched.costmodel.jobspec import Job
from lyasched.sim.hetero import parse_allowed
from lyasched.sim.workloads import TraceError, Workload

# The artifact's per-application settings (simulator/applications.py): epochs each job trains
# for and the largest per-GPU batch; an application not listed trains for as many epochs as its
# shortest validation file has, with the largest per-GPU batch of its placements.
ARTIFACT_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
ARTIFACT_MAX_LOCAL = {"yolov3": 8}
# ncf runs at one fixed batch on one GPU under Pollux (the artifact's Cluster does so).
FIXED_APPS = {"ncf": 32768}
UNIT = Link(bandwidth=1.0, latency=0.0)
GPU_MEM = 32e9  # the cluster's per-GPU memory (ClusterSpec's default)


def pollux_cluster(nodes: int, gpus_per_node: int) -> ClusterSpec:
    """The cluster a Pollux workload runs on: unit links (each profile carries its measured sync)."""
    return ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node, gpu_mem=GPU_MEM, intra=UNIT, inter=UNIT)


@dataclass(frozen=True)
class Application:
    """One application's measured profile."""

    name: str
    profile: Profile
    min_local: float
    max_local: float
    epochs: int
    batches: tuple[int, ...]  # validated global batches, increasing
    progress: np.ndarray  # [epochs + 1]: base steps done at the end of each epoch (0 first)
    sqr: np.ndarray  # [len(batches), epochs]
    var: np.ndarray

    @property
    def m0(self) -> int:
        return self.batches[0]

    def gain(self, batch: float, e: int) -> float:
        """Base steps one step at ``batch`` is worth in epoch e (statistics interpolated between
        the validated batches bracketing it, as the artifact does)."""
        b = np.asarray(self.batches, dtype=float)
        x = min(max(float(batch), b[0]), b[-1])
        sqr = float(np.interp(x, b, self.sqr[:, e]))
        var = float(np.interp(x, b, self.var[:, e]))
        s = batch / self.m0
        return (var + sqr) / (var / s + sqr)

    def noise(self) -> NoiseScale:
        """phi per epoch (at its middle, in progress), M0 x the geometric mean of var / sqr."""
        total = float(self.progress[-1])
        ratio = np.exp(np.mean(np.log(np.maximum(self.var, 1e-12) / np.maximum(self.sqr, 1e-12)), axis=0))
        mids = (self.progress[:-1] + self.progress[1:]) / 2.0 / total
        return NoiseScale(tuple((float(f), float(self.m0 * r)) for f, r in zip(mids, ratio)))


def _comm_scale(rows: list[PlacementRow], multi_node: bool) -> float:
    vals = [r.sync_time / (2.0 * (r.gpus - 1) / r.gpus) for r in rows
            if r.gpus > 1 and (r.nodes > 1) == multi_node]
    return float(np.median(vals)) if vals else 0.0


def _read_validation(path: str) -> dict[str, np.ndarray]:
    cols: dict[str, list[float]] = {"progress": [], "grad_sqr": [], "grad_var": []}
    with open(path, newline="") as fh:
        for i, rec in enumerate(csv.DictReader(fh), start=2):
            try:
                vals = {k: float(rec[k]) for k in cols}
            except (KeyError, TypeError, ValueError):
                raise TraceError(f"{path}:{i}: expected numeric columns progress, grad_sqr, grad_var") from None
            if any(not math.isfinite(v) or v < 0 for v in vals.values()) or vals["progress"] <= 0:
                raise TraceError(f"{path}:{i}: negative, zero progress or non-finite value")
            for k, v in vals.items():
                cols[k].append(v)
    if not cols["progress"]:
        raise TraceError(f"{path}: no rows")
    return {k: np.array(v) for k, v in cols.items()}


@lru_cache(maxsize=64)
def read_application(directory: str) -> Application:
    """An application's profile from its directory (placements.csv, scalability.csv if present,
    validation-<batch>.csv)."""
    name = os.path.basename(os.path.normpath(directory))
    place = os.path.join(directory, "placements.csv")
    if not os.path.isfile(place):
        raise TraceError(f"{directory}: no placements.csv (application {name!r})")
    try:
        rows = read_placements_csv(place)
        scal = os.path.join(directory, "scalability.csv")
        if os.path.isfile(scal):
            rows = rows + read_scalability_csv(scal)
        compute = fit_compute(name, rows)
    except ValueError as e:
        raise TraceError(str(e).splitlines()[0]) from None
    vals: dict[int, dict[str, np.ndarray]] = {}
    for f in sorted(os.listdir(directory)):
        if f.startswith("validation-") and f.endswith(".csv"):
            try:
                b = int(f[len("validation-"):-4])
            except ValueError:
                raise TraceError(f"{os.path.join(directory, f)}: the name must be validation-<global batch>.csv") from None
            if b < 1:
                raise TraceError(f"{os.path.join(directory, f)}: batch must be >= 1")
            vals[b] = _read_validation(os.path.join(directory, f))
    if not vals:
        raise TraceError(f"{directory}: no validation-<batch>.csv files")
    batches = tuple(sorted(vals))
    shortest = min(len(v["progress"]) for v in vals.values())
    epochs = min(ARTIFACT_EPOCHS.get(name, shortest), shortest)
    prog = np.array([0.0] + [min(float(v["progress"][e]) for v in vals.values()) for e in range(epochs)])
    if np.any(np.diff(prog) <= 0):
        raise TraceError(f"{directory}: validation progress must increase from epoch to epoch")
    locs = [r.local_bsz for r in rows]
    max_local = float(ARTIFACT_MAX_LOCAL.get(name, max(locs)))
    # memory stands for the largest per-GPU batch: beyond it a step accumulates micro-batches
    profile = Profile(model=name, alpha=compute.alpha, beta=compute.beta, knee=compute.knee, params=1,
                      bytes_per_param=1, mem_per_sample=GPU_MEM / max_local, source="measured", comm_scale_intra=_comm_scale(rows, False),
                      comm_scale_inter=_comm_scale(rows, True) or _comm_scale(rows, False))
    return Application(name, profile, float(min(locs)), max_local, epochs, batches, prog,
                       np.array([vals[b]["grad_sqr"][:epochs] for b in batches]),
                       np.array([vals[b]["grad_var"][:epochs] for b in batches]))


def _job(k: int, name: str, submit: float, app: Application, replicas: int, batch: int, total: int,
         adaptive: bool) -> Job:
    cap = min(total, 64)
    if adaptive and app.name not in FIXED_APPS:
        top = app.batches[-1]
        ad = Adaptive(max_batch=top, noise=app.noise(), pieces=app.epochs)
        return Job(job_id=name, profile=app.profile, global_batch=app.m0, iterations=max(1, round(app.progress[-1])),
                   submit_time=submit, min_gpus=1, max_gpus=max(1, min(cap, int(top // app.min_local))),
                   requested_gpus=min(replicas, cap), adaptive=ad, checkpointable=True)
    if adaptive:  # a fixed-batch application under Pollux: its batch on one GPU
        batch, replicas, most = FIXED_APPS[app.name], 1, 1
    else:
        most = max(replicas, min(cap, int(batch // app.min_local)))
    g = max(1, min(replicas, cap))
    m = g * math.ceil(batch / g - 1e-8)  # what the artifact runs: replicas x ceil(batch / replicas)
    steps = sum((app.progress[e + 1] - app.progress[e]) / app.gain(m, e) for e in range(app.epochs))
    # a batch whose per-GPU share exceeds the largest accumulates micro-batches, as in the artifact:
    # the goodput model's one-candidate form (max batch = the batch) carries that step time
    one = Adaptive(max_batch=m, noise=NoiseScale.constant(1.0), pieces=1) if m / g > app.max_local else None
    return Job(job_id=name, profile=app.profile, global_batch=m, iterations=max(1, round(steps)),
               submit_time=submit, min_gpus=1, max_gpus=max(g, min(cap, most)), requested_gpus=g, adaptive=one,
               checkpointable=True)


def measured_types(profiles: str, apps: set[str] | list[str], types: tuple[str, ...]) -> dict[tuple[str, str], Profile]:
    """(application, type) -> its profile measured on that type, from ``<app>/placements-<type>.csv``
    (and ``scalability-<type>.csv``) where the artifact has one; the other pairs are left to the
    roofline (`lyasched.policy.snapshot.type_profile`). Memory and validation are the application's."""
    out: dict[tuple[str, str], Profile] = {}
    for a in sorted(apps):
        d = os.path.join(profiles, a)
        for t in types:
            place = os.path.join(d, f"placements-{t}.csv")
            if not os.path.isfile(place):
                continue
            base = read_application(d).profile
            try:
                rows = read_placements_csv(place)
                scal = os.path.join(d, f"scalability-{t}.csv")
                if os.path.isfile(scal):
                    rows = rows + read_scalability_csv(scal)
                c = fit_compute(a, rows)
            except ValueError as e:
                raise TraceError(str(e).splitlines()[0]) from None
            out[(a, t)] = Profile(model=a, alpha=c.alpha, beta=c.beta, knee=c.knee, params=1, bytes_per_param=1,
                                  mem_per_sample=base.mem_per_sample, source="measured",
                                  comm_scale_intra=_comm_scale(rows, False) or base.comm_scale_intra,
                                  comm_scale_inter=_comm_scale(rows, True) or base.comm_scale_inter)
    return out


def pollux_workload(path: str, profiles: str, nodes: int = 16, gpus_per_node: int = 4, adaptive: bool = True,
                    max_jobs: int | None = None) -> Workload:
    """The jobs of a Pollux workload CSV, each on its application's measured profile; one-line
    `TraceError` for a missing file or column, a bad value or an unknown application."""
    if not os.path.isfile(path):
        raise TraceError(f"{path}: no such workload file")
    if not os.path.isdir(profiles):
        raise TraceError(f"{profiles}: no such profiles directory")
    cluster = pollux_cluster(nodes, gpus_per_node)
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"name", "time", "application", "num_replicas", "batch_size"}
        if not need <= set(reader.fieldnames or ()):
            raise TraceError(f"{path}: needs columns {', '.join(sorted(need))}")
        for i, rec in enumerate(reader, start=2):
            try:
                t, g, b = float(rec["time"]), int(rec["num_replicas"]), int(rec["batch_size"])
            except (TypeError, ValueError):
                raise TraceError(f"{path}:{i}: time, num_replicas and batch_size must be numbers") from None
            if not math.isfinite(t) or t < 0 or g < 1 or b < 1:
                raise TraceError(f"{path}:{i}: negative time or non-positive num_replicas/batch_size")
            app = (rec["application"] or "").strip()
            if not app or os.sep in app or not os.path.isdir(os.path.join(profiles, app)):
                raise TraceError(f"{path}:{i}: no profile for application {app!r} in {profiles}")
            try:  # the types the job allows (lyasched.sim.hetero): empty = any
                allowed = parse_allowed(rec.get("gpu_types") or "")
            except ValueError as e:
                raise TraceError(f"{path}:{i}: {e}") from None
            rows.append((t, i, (rec["name"] or f"job-{i}").strip(), app, g, b, allowed))
    if not rows:
        raise TraceError(f"{path}: no jobs")
    rows.sort()
    if max_jobs is not None:
        rows = rows[:max_jobs]
    jobs = tuple(_job(k, n, t, read_application(os.path.join(profiles, a)), g, b, cluster.total_gpus, adaptive)
                 for k, (t, _, n, a, g, b, _) in enumerate(rows))
    gpu_types = {j.job_id: r[6] for j, r in zip(jobs, rows) if r[6]}
    if len({j.job_id for j in jobs}) != len(jobs):
        raise TraceError(f"{path}: job names must be unique")
    kind = "adaptive" if adaptive else "fixed-batch"
    return Workload(name=os.path.basename(path), jobs=jobs, cluster=cluster,
                    description=f"Pollux-format workload, {kind} jobs on {profiles}", gpu_types=gpu_types)
