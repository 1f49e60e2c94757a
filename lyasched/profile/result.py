"""`ProfileResult`: what one profiling run (measured or estimated) found, as data.

Kept free of torch so that the cost table, `lyasub` and `lyastat` can read profile JSON
without importing it. The JSON form carries ``schema_version`` (bumped on incompatible change).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lyasched.costmodel.cost import Profile

SCHEMA_VERSION = 1


@dataclass
class ProfileResult:
    model: str  # name the user gave (example name or package.module:factory)
    signature: str  # lyasched.profile.signature.model_signature (cost-table key)
    device_type: str  # cost-table key: "cpu" or the slugged GPU name
    device_name: str  # human-readable device ("NVIDIA H100 80GB HBM3", CPU model name)
    params: int  # trainable parameters
    bytes_per_param: int  # gradient element size
    alpha: float  # fitted fixed time per training step (s)
    beta: float  # fitted time per sample (s/sample)
    r2: float  # R^2 of the time fit
    m0: float  # fitted peak memory at batch 0 (bytes)
    m1: float  # fitted peak memory per sample (bytes)
    source: str = "measured"  # "measured" or "estimated"
    batches: list[int] = field(default_factory=list)  # per-GPU batch sizes measured
    step_times: list[float] = field(default_factory=list)  # median step time per batch (s)
    step_samples: list[list[float]] = field(default_factory=list)  # every timed repeat per batch (s)
    mem_points: list[float] = field(default_factory=list)  # peak memory per batch (bytes)
    mem_r2: float = 1.0
    mem_method: str = ""  # how mem_points were obtained (see docs/profiling.md)
    device_memory: float | None = None  # total device memory (bytes)
    torch_version: str = ""
    cuda_version: str | None = None
    threads: int | None = None  # CPU intra-op threads used
    warmup: int = 0
    repeats: int = 0
    max_batch: int = 0  # largest batch that ran
    stopped: str = ""  # why the sweep ended: "done", "cap", "oom", "time"
    oom_batch: int | None = None  # first batch that ran out of memory
    model_args: dict[str, Any] = field(default_factory=dict)
    created: str = ""  # ISO-8601 UTC
    note: str = ""  # e.g. "ESTIMATE from FLOP counts, not a measurement"
    estimate: dict[str, Any] | None = None  # FLOP-estimate inputs (flops, throughput, efficiency)
    schema_version: int = SCHEMA_VERSION

    @property
    def grad_bytes(self) -> int:
        return self.params * self.bytes_per_param

    def to_profile(self) -> Profile:
        """The cost model's view: t(b) flat then linear in the batch where the measured sweep shows
        a knee (`lyasched.costmodel.batchshape`; else alpha + beta*b, the result's own line), and
        mem(b) = m0 + m1*b. alpha/beta of the result stay the line: what summaries carry."""
        from lyasched.costmodel.batchshape import MIN_LEVELS, fit_batch_shape

        alpha, beta, knee = self.alpha, self.beta, 0.0
        if self.source == "measured" and len(self.batches) == len(self.step_times) and len(set(self.batches)) >= MIN_LEVELS:
            bf = fit_batch_shape(self.batches, self.step_times)
            if bf.knee > 0:
                alpha, beta, knee = bf.alpha, bf.beta, bf.knee
        return Profile(
            model=self.model, alpha=alpha, beta=beta, params=self.params,
            bytes_per_param=self.bytes_per_param, mem_base=self.m0, mem_per_sample=self.m1,
            source=self.source, knee=knee,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["grad_bytes"] = self.grad_bytes
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProfileResult":
        version = d.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise ValueError(f"profile schema_version {version} is not supported (expected {SCHEMA_VERSION})")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> "ProfileResult":
        return cls.from_dict(json.loads(text))
