"""All-reduce benchmark: measured time per message size on the ranks torchrun started.

    torchrun --nproc-per-node 2 -m lyasched.job.allreduce_bench --out result.json
    srun ... torchrun --nnodes 2 ... -m lyasched.job.allreduce_bench --out inter.json   (docs/calibration.md)

gloo on CPU, NCCL when CUDA is available. Each size: warm-up, then ``repeats`` timed
all-reduces of a float32 tensor, each fenced by a barrier so every rank starts together;
the slowest rank's median is the size's time (a collective is as slow as its slowest
member). Rank 0 writes JSON: sizes, seconds, world size, backend, hosts and whether the
ranks span nodes (from the gathered hostnames). `lyasched calibrate fit` turns it into a
Link via lyasched.costmodel.fit.fit_link.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
import torch.distributed as dist

DEFAULT_SIZES = tuple(4096 * 4**i for i in range(8))  # 4 KiB .. 64 MiB


def parse_sizes(text: str) -> list[int]:
    """'4K,64K,1M' or plain bytes -> byte counts (multiples of 4: float32 elements)."""
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    out = []
    for tok in text.split(","):
        tok = tok.strip().upper().removesuffix("IB").removesuffix("B")
        if not tok:
            continue
        m = mult.get(tok[-1], 1)
        num = tok[:-1] if tok[-1] in mult else tok
        try:
            n = int(float(num) * m)
        except ValueError:
            raise ValueError(f"bad size {tok!r}: expected bytes like 4096, 4K, 64M") from None
        if n < 4:
            raise ValueError(f"size {tok!r} is below one float32 element")
        out.append(n - n % 4)
    if not out:
        raise ValueError("no sizes given")
    return sorted(set(out))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(sizes: list[int], warmup: int, repeats: int, device: torch.device, progress=None) -> list[float]:
    """Median all-reduce seconds per size (max over ranks). Needs an initialised process group."""
    seconds = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        _sync(device)
        times = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            _sync(device)
            times.append(time.perf_counter() - t0)
        med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        seconds.append(float(med.item()))
        if progress is not None:
            progress(nbytes, seconds[-1])
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="all-reduce bandwidth/latency benchmark (run under torchrun)")
    ap.add_argument("--out", required=True, help="JSON file rank 0 writes")
    ap.add_argument("--sizes", default=None, help="comma list of message sizes (default 4K..64M, x4 steps)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank (CPU)")
    args = ap.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes) if args.sizes else list(DEFAULT_SIZES)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("error: run me under torchrun (RANK/WORLD_SIZE not set)", file=sys.stderr)
        return 2
    if args.repeats < 1 or args.warmup < 0:
        print("error: --repeats must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, args.threads))
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        hosts: list = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())

        def progress(nbytes: int, s: float) -> None:
            if rank == 0:
                print(f"allreduce {nbytes:>10d} B  {s * 1e3:9.3f} ms  {nbytes / s / 1e6:9.1f} MB/s", file=sys.stderr,
                      flush=True)

        seconds = measure(sizes, args.warmup, args.repeats, device, progress)
        if rank == 0:
            doc = {
                "kind": "allreduce_bench",
                "sizes": sizes,
                "seconds": seconds,
                "world_size": world,
                "backend": backend,
                "hosts": sorted(set(hosts)),
                "nodes": len(set(hosts)),
                "spans_nodes": len(set(hosts)) > 1,
                "warmup": args.warmup,
                "repeats": args.repeats,
                "torch": torch.__version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            tmp = args.out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(doc, fh, indent=2)
            os.replace(tmp, args.out)  # nothing half-written
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
