"""Profiling: measure (or estimate) a model's per-step time and memory on one device.

`profile_model` measures, `estimate_profile` falls back to FLOP counts; both return a
`ProfileResult` (`.to_profile()` gives the cost model's `Profile`). Exports load lazily so
that `import lyasched.profile.result` stays free of torch. See docs/profiling.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "profile_model": "lyasched.profile.profiler",
    "ProfileError": "lyasched.profile.profiler",
    "estimate_profile": "lyasched.profile.flops",
    "ProfileResult": "lyasched.profile.result",
    "SCHEMA_VERSION": "lyasched.profile.result",
    "ModelSpec": "lyasched.profile.models",
    "EXAMPLES": "lyasched.profile.models",
    "example": "lyasched.profile.models",
    "load_spec": "lyasched.profile.spec",
    "SpecError": "lyasched.profile.spec",
    "model_signature": "lyasched.profile.signature",
    "device_type": "lyasched.profile.signature",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'lyasched.profile' has no attribute {name!r}")
