"""FLOP-count fallback: an ESTIMATED profile when measuring is impossible or too costly.

FLOPs of one training step (forward + backward, counted by torch's FlopCounterMode) at batch
1 and at batch b give a per-sample and a fixed FLOP count; a per-device table of sustained
throughput turns them into beta and alpha. Alpha also gets a kernel-launch overhead per
leaf module and the optimizer's memory traffic. Expect a factor of ~2 either way: the result
says ``source="estimated"`` and the cost table's online refinement corrects it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode

from lyasched.profile.models import ModelSpec
from lyasched.profile.profiler import (
    ProfileError, device_info, resolve_device, saved_activation_bytes, static_bytes, train_step,
)
from lyasched.profile.result import ProfileResult
from lyasched.profile.signature import device_type, model_signature
from lyasched.profile.spec import load_spec

ESTIMATE_NOTE = "ESTIMATE from FLOP counts and a throughput table, not a measurement"


@dataclass(frozen=True)
class Throughput:
    """Dense peak TFLOP/s (vendor datasheets, no sparsity), memory bandwidth, launch overhead."""

    name: str
    fp32_tflops: float
    tf32_tflops: float
    mem_gbps: float
    efficiency: float = 0.4  # sustained fraction of peak for training small/medium CNNs
    launch_s: float = 10e-6  # per kernel


# keys are the cost table's device types (lyasched.profile.signature.device_type)
THROUGHPUT: dict[str, Throughput] = {
    "t4": Throughput("NVIDIA T4", 8.1, 8.1, 320),
    "v100": Throughput("NVIDIA V100 SXM2", 15.7, 15.7, 900),
    "a10": Throughput("NVIDIA A10", 31.2, 62.5, 600),
    "a100": Throughput("NVIDIA A100 SXM4", 19.5, 156.0, 1555),
    "l4": Throughput("NVIDIA L4", 30.3, 60.0, 300),
    "l40s": Throughput("NVIDIA L40S", 91.6, 183.0, 864),
    "rtx3090": Throughput("NVIDIA GeForce RTX 3090", 35.6, 35.6, 936),
    "rtx4090": Throughput("NVIDIA GeForce RTX 4090", 82.6, 82.6, 1008),
    "h100": Throughput("NVIDIA H100 SXM5", 67.0, 494.7, 3350),
    "h200": Throughput("NVIDIA H200 SXM", 67.0, 494.7, 4800),
    # CPU: per intra-op thread (scaled by torch.get_num_threads()); peak, efficiency and per-op
    # overhead chosen so that the CPU estimate of `resnet` matched its measurement on
    # the development machine (2 threads); GPU launch overhead ~10 us per kernel.
    "cpu": Throughput("CPU (per thread)", 0.1, 0.1, 10, efficiency=0.5, launch_s=30e-6),
}


def lookup_throughput(device: str, threads: int | None = None) -> Throughput:
    """The table entry for a device type or name (``"a100"``, ``"NVIDIA H100 80GB HBM3"``, ``"cpu"``)."""
    key = device_type(device)
    if key not in THROUGHPUT:
        raise ProfileError(f"no throughput entry for device {device!r} (known: {', '.join(THROUGHPUT)})")
    tp = THROUGHPUT[key]
    if key == "cpu":
        n = threads or torch.get_num_threads()
        tp = Throughput(f"CPU x{n} threads", tp.fp32_tflops * n, tp.tf32_tflops * n, tp.mem_gbps * n,
                        tp.efficiency, tp.launch_s)
    return tp


def step_flops(spec: ModelSpec, batch: int) -> int:
    """FLOPs of one training step (forward + backward) at ``batch``, run on the CPU."""
    opt = spec.make_optimizer()
    x, y = spec.make_batch(batch, "cpu")
    with FlopCounterMode(display=False) as counter:
        train_step(spec, opt, x, y)
    return int(counter.get_total_flops())


def estimate_profile(
    model: str | ModelSpec,
    *,
    batch: int = 8,
    target: str | None = None,
    precision: str = "fp32",
    model_args: Mapping[str, Any] | None = None,
) -> ProfileResult:
    """Estimate alpha, beta, m0, m1 for ``target`` (a device type in `THROUGHPUT`; default:
    this machine's device) from FLOP counts at batch 1 and ``batch``. The model runs on the CPU."""
    if batch < 2:
        raise ValueError("estimate needs batch >= 2 (it extrapolates from batch 1 to batch b)")
    if precision not in ("fp32", "tf32"):
        raise ValueError("precision is fp32 or tf32")
    spec = model if isinstance(model, ModelSpec) else load_spec(model, model_args)
    spec.model.to("cpu").train()
    if target is None:
        info = device_info(resolve_device("auto"))
        target = info["device_name"] if info["device_type"] != "cpu" else "cpu"
    key = device_type(target)
    tp = lookup_throughput(target)
    sig = model_signature(spec.model, spec.sample_shape())

    f1, fb = step_flops(spec, 1), step_flops(spec, batch)
    per_sample = max(0.0, (fb - f1) / (batch - 1))
    fixed = max(0.0, f1 - per_sample)
    peak = (tp.tf32_tflops if precision == "tf32" else tp.fp32_tflops) * 1e12
    rate = peak * tp.efficiency
    params = sum(p.numel() for p in spec.model.parameters() if p.requires_grad)
    first = next((p for p in spec.model.parameters() if p.requires_grad), None)
    bpp = first.element_size() if first is not None else 4
    leaves = sum(1 for m in spec.model.modules() if not list(m.children()))
    kernels = 3 * leaves + 4  # forward + 2 backward per layer, plus loss and a fused optimizer step
    optim_bytes = 5 * params * bpp  # SGD+momentum: read w, g, m; write w, m
    alpha = fixed / rate + kernels * tp.launch_s + optim_bytes / (tp.mem_gbps * 1e9)
    beta = per_sample / rate

    # memory: weights + grads + optimizer state, and autograd's saved activations at 1 and b
    opt = spec.make_optimizer()
    x1, y1 = spec.make_batch(1, "cpu")
    train_step(spec, opt, x1, y1)
    base = static_bytes(spec, opt)
    xb, yb = spec.make_batch(batch, "cpu")
    a1 = saved_activation_bytes(spec, x1, y1) + x1.untyped_storage().nbytes() + y1.untyped_storage().nbytes()
    ab = saved_activation_bytes(spec, xb, yb) + xb.untyped_storage().nbytes() + yb.untyped_storage().nbytes()
    m1 = max(0.0, (ab - a1) / (batch - 1))
    m0 = base + max(0.0, a1 - m1)

    return ProfileResult(
        model=spec.name, signature=sig, device_type=key, device_name=tp.name, params=int(params),
        bytes_per_param=int(bpp), alpha=alpha, beta=beta, r2=float("nan"), m0=float(m0), m1=float(m1),
        mem_r2=float("nan"), source="estimated", batches=[1, batch], step_times=[alpha + beta, alpha + beta * batch],
        mem_points=[m0 + m1, m0 + m1 * batch], mem_method="estimate: static bytes + autograd-saved tensors (CPU run)",
        torch_version=torch.__version__, cuda_version=torch.version.cuda, max_batch=batch, stopped="estimate",
        model_args=dict(spec.args), created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        note=ESTIMATE_NOTE,
        estimate={
            "flops_batch1": f1, f"flops_batch{batch}": fb, "flops_per_sample": per_sample, "flops_fixed": fixed,
            "precision": precision, "peak_tflops": peak / 1e12, "efficiency": tp.efficiency,
            "kernels": kernels, "launch_s": tp.launch_s, "mem_gbps": tp.mem_gbps,
        },
    )

