"""GPU types and the roofline that predicts a step on a type nobody measured.

A profile is measured on one GPU type. A cluster that mixes types needs the job's step time on
the others before any run there. The roofline gives it: a kernel of arithmetic intensity ``I``
(FLOPs per byte of memory traffic) runs on type X in time proportional to

    max(1 / peak_X, 1 / (I * bandwidth_X))

so the ratio of two types' times depends on the peaks, the bandwidths and ``I`` only. A profile's
two terms have different intensities: its per-sample time (``beta``: forward and backward,
dominated by matrix products) has the job's training intensity, and its fixed per-step time
(``alpha``: optimizer step, kernel launches) is memory-bound. Runs on the type refine both
(`lyasched.costmodel.learn`); the roofline is only the first guess.

The table below holds vendors' dense fp16/bf16 tensor peaks and memory bandwidths. An admin adds
or overrides types in ``[cluster.gpu_types]`` (`parse_types`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from lyasched.costmodel.cost import Profile

GIB = 1024**3


@dataclass(frozen=True)
class GpuType:
    """One GPU model as the roofline sees it."""

    name: str
    tflops: float  # dense fp16/bf16 tensor peak, TFLOP/s
    bandwidth: float  # memory bandwidth, GB/s
    memory_gib: float  # memory per GPU, GiB

    @property
    def memory(self) -> float:
        return self.memory_gib * GIB

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) above which a kernel is compute-bound on this type."""
        return self.tflops * 1e12 / (self.bandwidth * 1e9)

    def time_per_flop(self, intensity: float) -> float:
        """Seconds per FLOP at ``intensity`` FLOP/byte (the roofline)."""
        return max(1.0 / (self.tflops * 1e12), 1.0 / (intensity * self.bandwidth * 1e9))


# name: (tflops, GB/s, GiB). Vendors' datasheets; dense (no sparsity) tensor peaks.
_DATASHEET: dict[str, tuple[float, float, float]] = {
    "t4": (65.0, 320.0, 16.0),
    "rtx2080ti": (53.8, 616.0, 11.0),  # fp16 tensor with fp32 accumulate (training)
    "v100": (125.0, 900.0, 32.0),
    "a10": (125.0, 600.0, 24.0),
    "l4": (121.0, 300.0, 24.0),
    "a40": (149.7, 696.0, 48.0),
    "a100": (312.0, 1555.0, 40.0),
    "a100-80gb": (312.0, 2039.0, 80.0),
    "l40s": (362.0, 864.0, 48.0),
    "h100": (989.0, 3350.0, 80.0),
    "h200": (989.0, 4800.0, 141.0),
}
KNOWN_TYPES: dict[str, GpuType] = {k: GpuType(k, *v) for k, v in _DATASHEET.items()}

# Training intensity when a job's own is unknown: a mid-size convnet or transformer at a moderate
# batch. The ridges run from ~87 (RTX 2080 Ti) through ~200 (T4, A100) to ~300 (H100), so at 100
# the bandwidth bound matters on most types and the peak on the older ones.
DEFAULT_INTENSITY = 100.0
FIXED_INTENSITY = 1.0  # the per-step fixed part: optimizer updates stream the parameters


def speed_ratio(src: GpuType, dst: GpuType, intensity: float = DEFAULT_INTENSITY) -> float:
    """Time on ``dst`` over time on ``src`` for work of ``intensity`` FLOP/byte (>1: dst is slower)."""
    if not intensity > 0:
        raise ValueError(f"intensity must be > 0, got {intensity!r}")
    return dst.time_per_flop(intensity) / src.time_per_flop(intensity)


def profile_on(profile: Profile, src: GpuType, dst: GpuType, intensity: float = DEFAULT_INTENSITY) -> Profile:
    """``profile`` (measured on ``src``) as the roofline predicts it on ``dst``: the per-sample
    time at the job's training intensity, the fixed time memory-bound; memory use is the job's,
    whatever the type (whether it fits is `fits`'s question). Source becomes "estimated"."""
    if src.name == dst.name:
        return profile
    return replace(profile, alpha=profile.alpha * speed_ratio(src, dst, FIXED_INTENSITY),
                   beta=profile.beta * speed_ratio(src, dst, intensity), source="estimated")


def on_type(profile: Profile, src: str, dst: str, types: Mapping[str, GpuType] | None = None) -> Profile:
    """``profile`` (of type ``src``) as the roofline predicts it on type ``dst`` (`profile_on`), the
    types looked up by name in ``types`` (default `KNOWN_TYPES`). Unchanged when they are the same
    or either is empty or unknown: a type nobody can predict keeps the source's profile (replay and
    the service refuse unknown types where they are named, so here that is only a fallback)."""
    tab = KNOWN_TYPES if types is None else types
    s = tab.get(src.strip().lower()) if src else None
    d = tab.get(dst.strip().lower()) if dst else None
    if s is None or d is None:
        return profile
    return profile_on(profile, s, d)


def fits(profile: Profile, gpu: GpuType, local_batch: float) -> bool:
    """Whether one step at ``local_batch`` per GPU fits in ``gpu``'s memory (unknown use fits)."""
    need = profile.memory(local_batch)
    return need <= 0 or need <= gpu.memory


def largest_batch(profile: Profile, gpu: GpuType) -> float:
    """The largest per-GPU batch that fits ``gpu`` (inf when memory per sample is unknown; 0 when
    not even the weights fit)."""
    if profile.mem_per_sample <= 0:
        return math.inf if profile.mem_base <= gpu.memory else 0.0
    return max(0.0, (gpu.memory - profile.mem_base) / profile.mem_per_sample)


def parse_types(table: Mapping[str, Any], base: Mapping[str, GpuType] | None = None) -> dict[str, GpuType]:
    """The known types with ``table``'s added or overridden (``[cluster.gpu_types]``):
    ``name = {tflops = 312, bandwidth = 1555, memory_gib = 40}``; a new type needs all three, an
    override any of them. ValueError with one line on anything else."""
    out = dict(KNOWN_TYPES if base is None else base)
    fields = ("tflops", "bandwidth", "memory_gib")
    for name, spec in table.items():
        key = str(name).strip().lower()
        if not key or not isinstance(spec, Mapping):
            raise ValueError(f"gpu_types.{name}: expected a table of {', '.join(fields)}")
        unknown = set(spec) - set(fields)
        if unknown:
            raise ValueError(f"gpu_types.{name}: unknown key {sorted(unknown)[0]} (known: {', '.join(fields)})")
        old = out.get(key)
        if old is None and set(spec) != set(fields):
            missing = sorted(set(fields) - set(spec))
            raise ValueError(f"gpu_types.{name}: a new type needs {', '.join(fields)} (missing {missing[0]})")
        vals = {}
        for f in fields:
            v = spec.get(f, getattr(old, f, None))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"gpu_types.{name}.{f}: expected a positive number, got {v!r}")
            vals[f] = float(v)
        out[key] = GpuType(key, **vals)
    return out


def lookup(name: str, types: Mapping[str, GpuType] | None = None) -> GpuType:
    """The type called ``name`` (case-insensitive); ValueError naming the known ones otherwise."""
    types = KNOWN_TYPES if types is None else types
    key = name.strip().lower()
    if key not in types:
        raise ValueError(f"unknown GPU type {name!r} (known: {', '.join(sorted(types))}; add it in [cluster.gpu_types])")
    return types[key]
