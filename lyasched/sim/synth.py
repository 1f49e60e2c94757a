"""A family of synthetic workloads for robustness sweeps, reproducible from a seed.

`lyasched replay --workload synth:KEY=VALUE,...` (or ``synth:PRESET[,KEY=VALUE...]``) and
`synth_workload(spec, seed)` from Python. Knobs: the job-size mix (share of 1-GPU requests,
largest request), the duration distribution (heavy-tailed, near-constant, bimodal), the
arrival process (Poisson, bursts, diurnal), the model mix (models that scale well or badly
across GPUs and nodes, or a vision/language/speech/recommendation mix) and early endings
(shares of jobs cancelled or failing long before their estimate, which no policy sees).
docs/simulator.md lists every knob, its default and the presets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from lyasched.costmodel.cost import ClusterSpec, CostModel
from lyasched.costmodel.goodput import Adaptive, NoiseScale
from lyasched.costmodel.jobspec import Job
from lyasched.sim.models import MODELS, OTHER_MODELS, profile

PREFIX = "synth:"

# model pools: which networks a workload draws from (uniformly)
MODEL_MIXES: dict[str, tuple[str, ...]] = {
    "cnn": tuple(MODELS),
    # compute-heavy per parameter: keep gaining up to many GPUs, across nodes too
    "good": ("resnet50", "inception_v3", "densenet121", "mobilenet_v2"),
    # parameter-heavy per unit of compute: little or no gain past one node, or past one GPU
    "bad": ("vgg16", "alexnet", "dlrm", "ncf"),
    # vision, language, speech, recommendation
    "mixed": ("resnet50", "vgg16", "mobilenet_v2", "inception_v3", "bert_base", "gpt2_medium",
              "transformer_big", "deepspeech2", "wav2vec2_base", "dlrm", "ncf"),
}
DURATIONS = ("heavy", "const", "bimodal")
# noise-scale curves of adaptive jobs (phi0 = the job's phi at the start, drawn per job):
# rising: phi0 -> 8 phi0 over the run; flat: phi0 throughout; late: phi0 until 60%, then -> 10 phi0;
# mixed: each adaptive job one of the three, uniformly
PHI_SHAPES = ("rising", "flat", "late", "mixed")
ARRIVALS = ("poisson", "bursts", "diurnal")


@dataclass(frozen=True)
class SynthSpec:
    """One synthetic workload; every field is a ``synth:`` knob of the same name."""

    jobs: int = 300
    nodes: int = 8
    gpn: int = 4  # GPUs per node
    load: float = 0.8  # offered load: requested GPU-seconds / (arrival span x GPUs)
    one_gpu: float = 0.6  # share of 1-GPU requests; the rest powers of two up to max_req
    max_req: int = 16  # largest request (GPUs)
    dur: str = "heavy"  # heavy (lognormal, sigma 1.5) | const (sigma 0.15) | bimodal (1/4 long)
    mean_h: float = 1.0  # mean duration at the requested count, hours
    arrival: str = "poisson"  # poisson | bursts | diurnal
    bursts: int = 4  # bursts (arrival=bursts)
    models: str = "cnn"  # cnn | good | bad | mixed
    cancel: float = 0.0  # share of jobs cancelled after U(5%, 60%) of their run
    fail: float = 0.0  # share of jobs failing after U(0%, 15%) of their run
    # goodput (lyasched.costmodel.goodput): share of jobs that let the scheduler choose their batch,
    # the shape of their phi curve, and their largest batch as a multiple of their base batch M0;
    # phi0 = M0 x 2^U(-2, 3): from models a large batch barely helps (phi0 << M0) to ones it does
    adaptive: float = 0.0
    phi: str = "mixed"  # rising | flat | late | mixed
    max_mult: float = 32.0
    # an adaptive job's largest GPU count: max(its request, ad_nodes nodes); 1 = one node, as every job's
    ad_nodes: int = 1


# Shaped like the two failures of issue 8, and named so a sweep can hold them apart.
PRESETS: dict[str, dict[str, Any]] = {
    # a production cluster's history: ~97% 1-GPU jobs of about 8 h, arriving steadily, load 0.6
    "production": dict(jobs=3000, nodes=16, gpn=8, load=0.6, one_gpu=0.97, max_req=8, dur="const",
                       mean_h=8.0, arrival="poisson", models="cnn"),
    # 160 mixed training jobs on 16x4 GPUs, some asking for 24-32 GPUs, moderate load
    "mixed160": dict(jobs=160, nodes=16, gpn=4, load=0.8, one_gpu=0.35, max_req=32, dur="heavy",
                     mean_h=1.5, arrival="poisson", models="mixed"),
    # issue 35: mixed160's shape with 3/4 of the jobs adaptive (batch chosen with the GPUs), phi
    # curves of every shape, load 1 (set load=0.5 / 2 for the other two)
    "adaptive": dict(jobs=160, nodes=16, gpn=4, load=1.0, one_gpu=0.35, max_req=32, dur="heavy",
                     mean_h=1.5, arrival="poisson", models="mixed", adaptive=0.75, phi="mixed"),
}

_CHOICES = {"dur": DURATIONS, "arrival": ARRIVALS, "models": tuple(MODEL_MIXES), "phi": PHI_SHAPES}
_RANGES: dict[str, tuple[float, float]] = {
    "jobs": (1, 200_000), "nodes": (1, 4096), "gpn": (1, 64), "load": (1e-3, 100.0),
    "one_gpu": (0.0, 1.0), "max_req": (1, 65536), "mean_h": (1e-3, 1e4), "bursts": (1, 10_000),
    "cancel": (0.0, 1.0), "fail": (0.0, 1.0), "adaptive": (0.0, 1.0), "max_mult": (1.0, 4096.0), "ad_nodes": (1, 4096),
}


def is_synth(name: str) -> bool:
    return name.startswith(PREFIX)


def parse_spec(text: str) -> SynthSpec:
    """``synth:[PRESET,]KEY=VALUE,...`` -> SynthSpec; ValueError with one line on bad input."""
    body = text[len(PREFIX):] if is_synth(text) else text
    vals: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(SynthSpec)}
    for k, item in enumerate(p.strip() for p in body.split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep:
            if k == 0 and item in PRESETS:
                vals.update(PRESETS[item])
                continue
            raise ValueError(f"synth workload: {item!r} is neither a preset ({', '.join(PRESETS)}) nor KEY=VALUE")
        key = key.strip()
        if key not in types:
            raise ValueError(f"synth workload: unknown knob {key!r}; known: {', '.join(types)}")
        raw = raw.strip()
        if key in _CHOICES:
            if raw not in _CHOICES[key]:
                raise ValueError(f"synth workload: {key}={raw!r}; choose from {', '.join(_CHOICES[key])}")
            vals[key] = raw
            continue
        conv = int if types[key] in (int, "int") else float
        try:
            v = conv(raw)
        except ValueError:
            raise ValueError(f"synth workload: {key}={raw!r} is not a{'n integer' if conv is int else ' number'}") from None
        lo, hi = _RANGES[key]
        if not (math.isfinite(v) and lo <= v <= hi):
            raise ValueError(f"synth workload: {key}={raw} out of range [{lo:g}, {hi:g}]")
        vals[key] = v
    spec = SynthSpec(**vals)
    if spec.cancel + spec.fail > 1.0:
        raise ValueError("synth workload: cancel + fail must be at most 1")
    return spec


def spec_name(spec: SynthSpec) -> str:
    """The canonical ``synth:`` string of a spec: only knobs that differ from the defaults."""
    d = SynthSpec()
    parts = [f"{f.name}={getattr(spec, f.name):g}" if isinstance(getattr(spec, f.name), float) else f"{f.name}={getattr(spec, f.name)}"
             for f in fields(spec) if getattr(spec, f.name) != getattr(d, f.name)]
    return PREFIX + ",".join(parts)


@dataclass(frozen=True)
class Synth:
    """A generated workload: jobs, their cluster, and each job's true share of its estimate."""

    name: str
    jobs: tuple[Job, ...]
    cluster: ClusterSpec
    end_fraction: dict[str, float]  # job id -> share of its run it does before it ends (cancelled/failed)
    description: str


def _durations(rng: np.random.Generator, spec: SynthSpec, n: int) -> np.ndarray:
    mean = spec.mean_h * 3600.0
    if spec.dur == "heavy":
        s = 1.5
        d = rng.lognormal(math.log(mean) - s * s / 2, s, n)
    elif spec.dur == "const":
        s = 0.15
        d = rng.lognormal(math.log(mean) - s * s / 2, s, n)
    else:  # bimodal: 3/4 short, 1/4 long, same mean
        long = rng.random(n) < 0.25
        short_mean, long_mean = mean * 0.25, mean * 3.25
        d = np.where(long, long_mean, short_mean) * rng.lognormal(-0.02, 0.2, n)
    return np.clip(d, 60.0, 90 * 86400.0)


def _requests(rng: np.random.Generator, spec: SynthSpec, n: int, total: int) -> np.ndarray:
    top = min(spec.max_req, total)
    sizes = [g for g in (2, 4, 8, 16, 24, 32, 64, 128, 256) if g <= top] or [1]
    if top not in sizes and top > 1:
        sizes.append(top)
    # larger requests rarer: weight 1/sqrt(g)
    w = np.array([1.0 / math.sqrt(g) for g in sizes])
    multi = rng.choice(sizes, size=n, p=w / w.sum())
    return np.where(rng.random(n) < spec.one_gpu, 1, multi).astype(int)


def _arrivals(rng: np.random.Generator, spec: SynthSpec, n: int, span: float) -> np.ndarray:
    if spec.arrival == "poisson":
        gaps = rng.exponential(span / n, n)
        t = np.cumsum(gaps) - gaps[0]
    elif spec.arrival == "bursts":
        k = max(1, min(spec.bursts, n))
        window = min(1800.0, span / (2 * k))
        starts = np.linspace(0.0, max(0.0, span - window), k) if k > 1 else np.zeros(1)
        t = np.sort(starts[np.sort(rng.integers(k, size=n))] + rng.uniform(0.0, window, n))
    else:  # diurnal: Poisson with rate (1 + 0.8 sin(2 pi t / day)), by thinning
        day = 86400.0
        out: list[np.ndarray] = []
        got = 0
        while got < n:
            c = rng.uniform(0.0, span, 2 * n)
            keep = c[rng.random(2 * n) < (1.0 + 0.8 * np.sin(2 * math.pi * c / day)) / 1.8]
            out.append(keep)
            got += keep.size
        t = np.sort(np.concatenate(out)[:n])
    return t - t[0]


def _adaptive(jobs: list[Job], spec: SynthSpec, seed: int) -> list[Job]:
    """Opt a share of the jobs in to batch choice, from an RNG stream of its own (so the jobs, their
    arrivals and the other knobs' draws are those of the same spec without adaptive jobs). A job
    keeps its global batch as M0 and its iterations as base steps."""
    rng = np.random.default_rng([int(seed), 0xADA])
    n = len(jobs)
    opt = rng.random(n) < spec.adaptive
    scale = 2.0 ** rng.uniform(-2.0, 3.0, n)
    shapes = rng.integers(3, size=n)
    out = []
    for i, j in enumerate(jobs):
        if not opt[i]:
            out.append(j)
            continue
        phi0 = float(j.global_batch * scale[i])
        shape = spec.phi if spec.phi != "mixed" else PHI_SHAPES[int(shapes[i])]
        pts = {"rising": ((0.0, phi0), (1.0, 8 * phi0)), "flat": ((0.0, phi0),),
               "late": ((0.0, phi0), (0.6, phi0), (1.0, 10 * phi0))}[shape]
        top = max(j.global_batch, int(round(j.global_batch * spec.max_mult)))
        cap = max(j.max_gpus, spec.ad_nodes * spec.gpn) if spec.ad_nodes > 1 else j.max_gpus
        out.append(replace(j, adaptive=Adaptive(top, NoiseScale(pts)), max_gpus=cap))
    return out


def synth_workload(spec: SynthSpec | str, seed: int = 0, *, nodes: int | None = None,
                   gpus_per_node: int | None = None, load: float | None = None) -> Synth:
    """Generate ``spec`` (a SynthSpec or a ``synth:`` string) from ``seed``; same seed, same jobs.

    ``nodes``, ``gpus_per_node`` and ``load`` override the spec's cluster and load (the arrival
    span is stretched or squeezed so the requested GPU-seconds make that load on that cluster).
    """
    if isinstance(spec, str):
        spec = parse_spec(spec)
    over: dict[str, Any] = {k: v for k, v in (("nodes", nodes), ("gpn", gpus_per_node), ("load", load)) if v is not None}
    spec = replace(spec, **over)
    if load is not None and not (load > 0 and math.isfinite(load)):
        raise ValueError("load must be > 0")
    cluster = ClusterSpec(nodes=spec.nodes, gpus_per_node=spec.gpn)
    cost = CostModel(cluster)
    gpn, total = spec.gpn, cluster.total_gpus
    rng = np.random.default_rng([int(seed), 0x5E7])
    n = spec.jobs
    pool = MODEL_MIXES[spec.models]
    picks = rng.integers(len(pool), size=n)
    req = _requests(rng, spec, n, total)
    dur = _durations(rng, spec, n)
    pad = rng.uniform(1.5, 4.0, n)
    users = rng.integers(8, size=n)
    u_end = rng.random(n)
    u_at = rng.random(n)
    jobs: list[Job] = []
    for i in range(n):
        name = pool[int(picks[i])]
        spec_m = MODELS.get(name) or OTHER_MODELS[name]
        prof = profile(name, "imagenet" if name in MODELS else "native")
        g = int(req[i])
        batch = g * spec_m.local_batch
        it = cost.iter_time(prof, batch, g, g > gpn)
        iterations = max(1, int(round(float(dur[i]) / it)))
        est = iterations * it
        jobs.append(Job(
            job_id=f"s{i:05d}", profile=prof, global_batch=batch, iterations=iterations,
            min_gpus=1, max_gpus=max(g, gpn), requested_gpus=g,
            time_limit=math.ceil(est * float(pad[i]) / 60.0) * 60.0, user=f"user{int(users[i])}",
        ))
    demand = sum(j.requested_gpus * j.run_time(cost, j.requested_gpus, j.requested_gpus > gpn) for j in jobs)
    span = demand / (spec.load * total)
    times = _arrivals(rng, spec, n, span)
    jobs = [replace(j, submit_time=float(round(t, 3))) for j, t in zip(jobs, times)]
    if spec.adaptive > 0:
        jobs = _adaptive(jobs, spec, seed)
    ends: dict[str, float] = {}
    for i, j in enumerate(jobs):
        if u_end[i] < spec.fail:
            ends[j.job_id] = 0.15 * float(u_at[i]) + 1e-3
        elif u_end[i] < spec.fail + spec.cancel:
            ends[j.job_id] = 0.05 + 0.55 * float(u_at[i])
    if spec.adaptive > 0:
        extra = f", {spec.adaptive:.0%} adaptive ({spec.phi} phi, max batch {spec.max_mult:g} x M0" + (
            f", up to {spec.ad_nodes} nodes)" if spec.ad_nodes > 1 else ")")
    else:
        extra = ""
    desc = (f"{n} jobs, {spec.one_gpu:.0%} 1-GPU, up to {spec.max_req}, {spec.dur} durations (mean {spec.mean_h:g} h), "
            f"{spec.arrival} arrivals, {spec.models} models, {spec.cancel:.0%} cancelled, {spec.fail:.0%} failed, load {spec.load:g}{extra}")
    return Synth(name=spec_name(spec), jobs=tuple(jobs), cluster=cluster, end_fraction=ends, description=desc)
