"""Measure a model's training-step time and peak memory over a sweep of per-GPU batch sizes.

One training step = zero_grad, forward, loss, backward, optimizer step. For every batch size
b: ``warmup`` untimed steps, then ``repeats`` timed steps (synchronised on GPU), median kept.
The sweep stops at the first out-of-memory (recorded as the cap), at ``max_batch``, or when
the time budget is spent. t(b) = alpha + beta*b and mem(b) = m0 + m1*b are least-squares fits.
docs/profiling.md explains the choices (notably the CPU memory measure).
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

import torch

from lyasched.costmodel.fit import LinearFit, fit_linear
from lyasched.profile.models import ModelSpec
from lyasched.profile.result import ProfileResult
from lyasched.profile.signature import device_type, model_signature
from lyasched.profile.spec import load_spec

Progress = Callable[[str], None]

DEFAULT_MAX_BATCH = {"cpu": 32, "cuda": 1024}
CPU_MEM_METHOD = "cpu-autograd: weights + grads + optimizer state + input batch + unique tensors saved for backward"
CUDA_MEM_METHOD = "torch.cuda.max_memory_allocated over one training step"

_OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
)


class ProfileError(RuntimeError):
    """Profiling could not produce a result (e.g. out of memory already at the smallest batch)."""


def is_oom(exc: BaseException) -> bool:
    """CUDA OOM, or the CPU allocator failing (a RuntimeError saying it cannot allocate)."""
    if _OOM_TYPES and isinstance(exc, _OOM_TYPES):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"``: the first GPU when CUDA is available, else the CPU."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ProfileError("--device cuda asked for, but torch sees no CUDA device")
    if dev.type not in ("cpu", "cuda"):
        raise ProfileError(f"unsupported device {str(device)!r} (cpu or cuda)")
    return dev


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _ram_bytes() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def device_info(dev: torch.device) -> dict[str, Any]:
    """Name, total memory and cost-table key of ``dev`` (NVML when present, else torch)."""
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        name, total = None, None
        try:
            import pynvml  # optional: the `profile` extra

            pynvml.nvmlInit()
            try:
                # NVML numbers all GPUs, torch only the visible ones: match by UUID when possible
                uuid = getattr(props, "uuid", None)
                if uuid is not None:
                    h = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
                elif os.environ.get("CUDA_VISIBLE_DEVICES") is None:
                    h = pynvml.nvmlDeviceGetHandleByIndex(idx)
                else:
                    raise LookupError("cannot map the torch device to an NVML device")
                raw = pynvml.nvmlDeviceGetName(h)
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
                total = float(pynvml.nvmlDeviceGetMemoryInfo(h).total)
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # no pynvml, no NVML library, no matching NVML device (MIG, remapping)
            name, total = props.name, float(props.total_memory)
        return {"device_name": name, "device_memory": total, "device_type": device_type(name)}
    return {"device_name": _cpu_name(), "device_memory": _ram_bytes(), "device_type": "cpu"}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train_step(spec: ModelSpec, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss = spec.loss(spec.model(x), y)
    loss.backward()
    opt.step()


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, Mapping):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def static_bytes(spec: ModelSpec, opt: torch.optim.Optimizer) -> int:
    """Weights + gradients + optimizer state (call after one step, when the state exists)."""
    params = [p for p in spec.model.parameters()]
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = sum(_tensor_bytes(s) for s in opt.state.values())
    buffers = sum(b.numel() * b.element_size() for b in spec.model.buffers())
    return weights + grads + state + buffers


def saved_activation_bytes(spec: ModelSpec, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves for backward in one forward pass
    (parameters and the input batch excluded): the activation memory that grows with the batch."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in spec.model.parameters()}
    param_ptrs |= {x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in param_ptrs and ptr != 0:
            seen[ptr] = max(seen.get(ptr, 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = spec.loss(spec.model(x), y)
    del loss
    return sum(seen.values())


def fit_points(batches: Sequence[int], seconds: Sequence[float], mem_bytes: Sequence[float]) -> tuple[LinearFit, LinearFit]:
    """t(b) = alpha + beta*b and mem(b) = m0 + m1*b by least squares (both clamped at >= 0)."""
    return fit_linear(batches, seconds), fit_linear(batches, mem_bytes)


def default_batches(max_batch: int) -> list[int]:
    out, b = [], 1
    while b <= max_batch:
        out.append(b)
        b *= 2
    return out


def profile_model(
    model: str | ModelSpec,
    *,
    batches: Sequence[int] | None = None,
    max_batch: int | None = None,
    warmup: int = 2,
    repeats: int = 5,
    device: str | torch.device | None = None,
    threads: int | None = None,
    model_args: Mapping[str, Any] | None = None,
    time_budget: float | None = None,
    progress: Progress | None = None,
) -> ProfileResult:
    """Profile ``model`` (an example name, ``package.module:factory`` or a `ModelSpec`).

    ``batches`` defaults to 1, 2, 4, ... up to ``max_batch`` (32 on CPU, 1024 on GPU); an
    explicit ``batches`` list is only capped by an explicit ``max_batch``;
    ``time_budget`` (s) stops the sweep before the next batch size once exceeded.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError("warmup must be >= 0 and repeats >= 1")
    spec = model if isinstance(model, ModelSpec) else load_spec(model, model_args)
    dev = resolve_device(device)
    if max_batch is not None:
        cap = max_batch
    else:  # an explicit list is its own cap
        cap = max(int(b) for b in batches) if batches else DEFAULT_MAX_BATCH[dev.type]
    sweep = sorted({int(b) for b in (batches or default_batches(cap)) if 1 <= int(b) <= cap})
    if not sweep:
        raise ValueError(f"no batch size in 1..{cap} to profile")
    say = progress or (lambda _m: None)

    old_threads = torch.get_num_threads()
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)
    try:
        sig = model_signature(spec.model, spec.sample_shape())
        info = device_info(dev)
        spec.model.to(dev).train()
        opt = spec.make_optimizer()
        params = sum(p.numel() for p in spec.model.parameters() if p.requires_grad)
        first = next((p for p in spec.model.parameters() if p.requires_grad), None)
        bpp = first.element_size() if first is not None else 4

        done_b: list[int] = []
        medians: list[float] = []
        samples: list[list[float]] = []
        mems: list[float] = []
        stopped, oom_batch = "done", None
        t_start = time.perf_counter()
        for b in sweep:
            if time_budget is not None and done_b and time.perf_counter() - t_start > time_budget:
                stopped = "time"
                break
            oom = False
            try:
                times, mem = _measure_batch(spec, opt, dev, b, warmup, repeats)
            except Exception as e:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_oom(e):
                    raise
                oom = True
            if oom:  # outside the except block so the traceback no longer pins the tensors
                opt.zero_grad(set_to_none=True)
                gc.collect()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                stopped, oom_batch = "oom", b
                say(f"batch {b}: out of memory, sweep stops at {done_b[-1] if done_b else 0}")
                break
            med = statistics.median(times)
            done_b.append(b)
            medians.append(med)
            samples.append(times)
            mems.append(float(mem))
            say(f"batch {b}: {med * 1e3:.2f} ms/step, peak {mem / 2**20:.1f} MiB")
        else:
            if sweep[-1] >= cap and batches is None:
                stopped = "cap"
        if not done_b:
            raise ProfileError(f"out of memory already at batch {sweep[0]} on {info['device_name']}")

        tfit, mfit = fit_points(done_b, medians, mems)
        return ProfileResult(
            model=spec.name, signature=sig, device_type=info["device_type"], device_name=info["device_name"],
            params=int(params), bytes_per_param=int(bpp), alpha=tfit.intercept, beta=tfit.slope, r2=tfit.r2,
            m0=mfit.intercept, m1=mfit.slope, mem_r2=mfit.r2, source="measured", batches=done_b,
            step_times=medians, step_samples=samples, mem_points=mems,
            mem_method=CUDA_MEM_METHOD if dev.type == "cuda" else CPU_MEM_METHOD,
            device_memory=info["device_memory"], torch_version=torch.__version__, cuda_version=torch.version.cuda,
            threads=torch.get_num_threads() if dev.type == "cpu" else None, warmup=warmup, repeats=repeats,
            max_batch=done_b[-1], stopped=stopped, oom_batch=oom_batch, model_args=dict(spec.args),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            note="" if len(done_b) > 1 else "single batch size: beta could not be fitted",
        )
    finally:
        if threads is not None and dev.type == "cpu":
            torch.set_num_threads(old_threads)


def _measure_batch(
    spec: ModelSpec, opt: torch.optim.Optimizer, dev: torch.device, b: int, warmup: int, repeats: int
) -> tuple[list[float], float]:
    x, y = spec.make_batch(b, dev)
    for _ in range(warmup):
        train_step(spec, opt, x, y)
    _sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        train_step(spec, opt, x, y)
        _sync(dev)
        times.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        mem = float(torch.cuda.max_memory_allocated(dev))
    else:
        if not opt.state:  # no warm-up: make the optimizer state exist before counting it
            train_step(spec, opt, x, y)
        batch_bytes = x.untyped_storage().nbytes() + y.untyped_storage().nbytes()
        mem = float(static_bytes(spec, opt) + batch_bytes + saved_activation_bytes(spec, x, y))
    return times, mem


def env_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The CLI's --threads default: ``LYASCHED_PROFILE_THREADS`` if set; else, inside a Slurm job,
    the CPUs of its allocation on this node (``SLURM_CPUS_PER_TASK``, else ``SLURM_CPUS_ON_NODE``);
    else None (torch's default).

    Why: lyasub's profiling job asks for one GPU and the job's ``--cpus-per-gpu``, so its
    allocation is the CPU budget one rank of the real job gets. torch's default is every core
    of the machine, whatever Slurm allotted: where Slurm does not confine tasks (task/none, as
    on the test cluster), the profile then ran on threads that fight other jobs for cores, and
    measured steps 7.5-8.7x slower than the jobs' own (docs/calibration.md)."""
    env = os.environ if environ is None else environ
    for name in ("LYASCHED_PROFILE_THREADS",) + (("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")
                                                  if env.get("SLURM_JOB_ID") else ()):
        v = (env.get(name) or "").strip()
        if v.isdigit() and int(v) >= 1:
            return int(v)
        if v and name == "LYASCHED_PROFILE_THREADS":
            raise ProfileError(f"$LYASCHED_PROFILE_THREADS={v!r} is not a positive integer")
    return None
