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
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # torch-free at import: the cost table and CLIs normalise device names too
    from torch import nn

SIGNATURE_LEN = 16  # hex digits kept (64 bits): ample for a cost table, short in a Slurm comment


def signature_material(model: "nn.Module", input_shape: Sequence[int] | None = None) -> dict:
    """The canonical description the hash is taken over (handy for debugging collisions)."""
    return {
        "v": 1,
        "modules": [f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules()],
        "params": [[list(p.shape), str(p.dtype).removeprefix("torch.")] for p in model.parameters()],
        "input": list(input_shape) if input_shape is not None else None,
    }


def model_signature(model: "nn.Module", input_shape: Sequence[int] | None = None) -> str:
    """Stable hex signature of ``model`` (and of the per-sample ``input_shape`` if given)."""
    blob = json.dumps(signature_material(model, input_shape), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:SIGNATURE_LEN]


# GPU families the cost table keys on (also Slurm's usual gres type names); first match wins
GPU_FAMILIES: tuple[tuple[str, str], ...] = (
    ("h200", r"\bh200\b"), ("h100", r"\bh100\b"), ("a100", r"\ba100\b"), ("a10", r"\ba10\b"),
    ("l40s", r"\bl40s\b"), ("l4", r"\bl4\b"), ("v100", r"\bv100\b"), ("t4", r"\bt4\b"),
    ("rtx3090", r"rtx\s*3090"), ("rtx4090", r"rtx\s*4090"),
)


def device_type(name: str) -> str:
    """Cost-table device key from a device name: ``"cpu"``; a known GPU family
    (``"NVIDIA A100-SXM4-40GB"`` -> ``"a100"``, ``"h100"`` -> ``"h100"``); else the name slugged
    (``"Quadro RTX 8000"`` -> ``"quadro-rtx-8000"``)."""
    low = name.strip().lower()
    if low == "cpu" or low.startswith("cpu:") or low.startswith("cpu "):
        return "cpu"
    for key, pattern in GPU_FAMILIES:
        if re.search(pattern, low):
            return key
    return re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "unknown"
