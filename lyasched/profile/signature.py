"""Model signatures: the cost table's key for "the same model".

A signature is a SHA-256 over the architecture (module class names in `modules()` order),
every parameter's shape and dtype, and optionally the per-sample input shape (a ResNet with
global pooling has the same parameters on 32x32 and 224x224 images but a very different
cost). It is stable across processes and machines: no ids, addresses or hash() involved.
The device is not part of it: the cost table keys on (signature, device type).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Sequence

from torch import nn

SIGNATURE_LEN = 16  # hex digits kept (64 bits): ample for a cost table, short in a Slurm comment


def signature_material(model: nn.Module, input_shape: Sequence[int] | None = None) -> dict:
    """The canonical description the hash is taken over (handy for debugging collisions)."""
    return {
        "v": 1,
        "modules": [f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules()],
        "params": [[list(p.shape), str(p.dtype).removeprefix("torch.")] for p in model.parameters()],
        "input": list(input_shape) if input_shape is not None else None,
    }


def model_signature(model: nn.Module, input_shape: Sequence[int] | None = None) -> str:
    """Stable hex signature of ``model`` (and of the per-sample ``input_shape`` if given)."""
    blob = json.dumps(signature_material(model, input_shape), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:SIGNATURE_LEN]


def device_type(name: str) -> str:
    """Cost-table device key from a device name: ``"cpu"``, or the GPU name slugged
    (``"NVIDIA A100-SXM4-40GB"`` -> ``"nvidia-a100-sxm4-40gb"``)."""
    if name.lower() == "cpu" or name.lower().startswith("cpu:"):
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"
