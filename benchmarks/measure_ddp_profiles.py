#!/usr/bin/env python3
"""Measure DDP per-iteration times on this machine (gloo on CPU, 1-N processes): a third
source of profiles for `benchmarks/cost_accuracy.py`, next to the two shared Pollux apps.

For each model and each world size g it starts g processes (torch.multiprocessing, gloo,
``--threads`` intra-op threads each, default 1), and for each per-rank batch b times ``--iters`` DDP training
steps (after ``--warmup``) and as many steps under ``no_sync()`` (no all-reduce). It writes
``<out>/<model>/placements.csv`` in the shared format ``placement,local_bsz,step_time,sync_time``:
placement is g (one node), step_time the median over iterations of the slowest rank's step,
sync_time = max(0, step_time - the no_sync median); the header line records the model's
gradient bytes (``grad_bytes=``), the host's ``cores=`` and the ``threads_per_rank=``
(``--threads``: what `benchmarks/cost_accuracy.py` declares as the node's sharing,
`CommShape.parallel` = cores / threads per rank), and the other work's load while measuring
(busy CPUs not ours, from /proc/stat; per world size and repeat in ``--raw``). ``--repeats`` runs everything that many
times, g = 1..N interleaved within each repeat, and keeps per row the smallest of the repeats'
medians (``--stat min``, the default: on a machine shared with other work a slower repeat is
other work interfering, as timeit assumes) or their median (``--stat median``). The 2 shared
cores are noisy: run it under ``nice``.

    nice python benchmarks/measure_ddp_profiles.py --out benchmarks/data/profiles \\
        --models mlp,resnet,recsys,transformer --max-procs 4 --repeats 3

``--from-raw RAW --cores N`` measures nothing: it rebuilds ``<out>/<model>/placements.csv`` for
every model of a ``--raw`` file (the same estimator and header, the other work's load from the
file's ``other_load`` column), e.g. when a run was cut short and only its raw rows remain.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_BATCHES = {"mlp": [8, 32, 64, 128], "mlp-large": [8, 16, 32, 64], "resnet": [4, 8, 16, 32], "recsys": [16, 64, 256, 1024],
                   "transformer": [2, 4, 8, 16], "mobilenet": [2, 4, 8, 16], "vgg": [2, 4, 8, 16],
                   "speech": [2, 4, 8, 16], "detector": [2, 4, 8, 16]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_cores() -> int:
    """CPUs this process may run on (the node's compute units for the ranks: sched_getaffinity
    where the OS has it, else os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _busy_s() -> float:
    """CPU-seconds the whole host has been busy (all processes, /proc/stat; 0 where absent)."""
    try:
        f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(x) for x in f]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _worker(rank: int, world: int, port: int, model: str, batches: list[int], iters: int, warmup: int, out: str,
            threads: int = 1) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lyasched.profile.models import example

    torch.set_num_threads(threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    spec = example(model)
    net = spec.model.train()
    if world > 1:
        net = DDP(net)
    spec.model = net
    opt = spec.make_optimizer()

    def step(x, y) -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        spec.loss(net(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    lines = []
    for b in batches:
        x, y = spec.make_batch(b, "cpu")
        full, local = [], []
        for i in range(warmup + iters):
            t = torch.tensor([step(x, y)], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
            if i >= warmup:
                full.append(float(t))
        if world > 1:
            for i in range(warmup + iters):
                with net.no_sync():
                    t = torch.tensor([step(x, y)], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                if i >= warmup:
                    local.append(float(t))
        st = statistics.median(full)
        sync = max(0.0, st - statistics.median(local)) if local else 0.0
        lines.append(f"{world},{b},{st:.6f},{sync:.6f}\n")
    if rank == 0:
        Path(out).write_text("".join(lines))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def measure(model: str, world: int, batches: list[int], iters: int, warmup: int,
            threads: int = 1) -> tuple[list[tuple[int, int, float, float]], float]:
    """Rows (g, b, step, sync) of one world size, and the other work's load while they ran: the
    host's busy CPUs minus this run's own processes' (CPU-seconds per second; 0 on a quiet host)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.csv")
        t0, busy0, ours0 = time.perf_counter(), _busy_s(), _children_cpu_s()
        mp.spawn(_worker, args=(world, _free_port(), model, batches, iters, warmup, out, threads), nprocs=world,
                 join=True)
        wall = time.perf_counter() - t0
        other = max(0.0, (_busy_s() - busy0) - (_children_cpu_s() - ours0)) / wall if wall > 0 else 0.0
        rows = []
        for line in Path(out).read_text().splitlines():
            g, b, t, s = line.split(",")
            rows.append((int(g), int(b), float(t), float(s)))
        return rows, other


def grad_bytes(model: str) -> int:
    """Bytes of the model's gradients (what DDP all-reduces): known, not fitted; the cost model
    splits the all-reduce into latency and bandwidth parts with it (lyasched.costmodel.commshape)."""
    from lyasched.profile.models import example

    return sum(p.numel() * p.element_size() for p in example(model).model.parameters() if p.requires_grad)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "data" / "profiles"))
    ap.add_argument("--models", default="mlp,resnet,recsys,transformer")
    ap.add_argument("--max-procs", type=int, default=4)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (torch.set_num_threads)")
    ap.add_argument("--raw", default=None, help="also write every repeat's row to this CSV "
                    "(model,repeat,placement,local_bsz,step_time,sync_time,other_load): the repeat-to-repeat "
                    "spread and the other work's load (busy CPUs) while that world size ran")
    ap.add_argument("--stat", choices=["min", "median"], default="min", help="estimator across repeats")
    ap.add_argument("--from-raw", default=None, metavar="RAW",
                    help="measure nothing: rebuild placements.csv from a --raw file's rows (needs --cores)")
    ap.add_argument("--cores", type=int, default=None,
                    help="with --from-raw: the measuring host's usable cores (its placements.csv header's cores=)")
    args = ap.parse_args(argv)
    if args.from_raw:
        return from_raw(args)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in DEFAULT_BATCHES]
    if unknown or args.max_procs < 2 or args.iters < 1 or args.repeats < 1 or args.threads < 1:
        print(f"error: unknown model(s) {unknown} or bad counts", file=sys.stderr)
        return 2
    est = min if args.stat == "min" else statistics.median
    raw = open(args.raw, "w") if args.raw else None
    if raw:
        raw.write("model,repeat,placement,local_bsz,step_time,sync_time,other_load\n")
    cores = host_cores()
    for model in models:
        batches = DEFAULT_BATCHES[model]
        runs: dict[tuple[int, int], list[tuple[float, float]]] = {}
        loads: list[float] = []
        for rep in range(args.repeats):
            for g in range(1, args.max_procs + 1):
                t0 = time.time()
                rows, other = measure(model, g, batches, args.iters, args.warmup, args.threads)
                loads.append(other)
                for gg, b, t, s in rows:
                    runs.setdefault((gg, b), []).append((t, s))
                    if raw:
                        raw.write(f"{model},{rep + 1},{gg},{b},{t:.6f},{s:.6f},{other:.2f}\n")
                        raw.flush()
                print(f"{model}: repeat {rep + 1}/{args.repeats}, {g} process(es): {time.time() - t0:.1f} s, "
                      f"other work {other:.2f} CPUs busy", file=sys.stderr, flush=True)
        where = f"on {platform.node() or 'host'} ({os.cpu_count()} CPUs, shared, nice)"
        write_placements(Path(args.out) / model, model, runs, loads, est, args.stat, args.repeats, args.iters,
                         args.threads, cores, where)
    return 0


def write_placements(d: Path, model: str, runs: dict[tuple[int, int], list[tuple[float, float]]],
                     loads: list[float], est, stat: str, repeats: int, iters: int, threads: int, cores: int,
                     where: str) -> None:
    """``d/placements.csv``: per (g, b) the estimator over the repeats' step times, the median sync time."""
    d.mkdir(parents=True, exist_ok=True)
    with (d / "placements.csv").open("w") as fh:
        fh.write(f"# measured by benchmarks/measure_ddp_profiles.py {where}: DDP gloo CPU, {threads} thread/rank, {stat} "
                 f"over {repeats} repeat(s) of the median of {iters} iterations; "
                 f"grad_bytes={grad_bytes(model)} (float32 parameters); cores={cores} "
                 f"threads_per_rank={threads}; other work while measuring: "
                 f"median {statistics.median(loads):.2f}, max {max(loads):.2f} CPUs busy "
                 f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
        fh.write("placement,local_bsz,step_time,sync_time\n")
        for (g, b), vals in sorted(runs.items()):
            best = est(v[0] for v in vals)
            sync = statistics.median(v[1] for v in vals)
            fh.write(f"{g},{b},{best:.6f},{min(sync, best):.6f}\n")
    print(f"wrote {d / 'placements.csv'}", file=sys.stderr)


RAW_COLUMNS = ["model", "repeat", "placement", "local_bsz", "step_time", "sync_time", "other_load"]


def read_raw(path: str) -> dict[str, tuple[dict[tuple[int, int], list[tuple[float, float]]], list[float], int]]:
    """A --raw file's rows per model: (runs per (g, b), other-load values, repeats seen).
    Raises ValueError (one line) on a file that is not one."""
    import csv

    out: dict[str, tuple[dict, list[float], set[int]]] = {}
    with open(path, newline="") as fh:
        rd = csv.reader(fh)
        head = next(rd, None)
        if head != RAW_COLUMNS:
            raise ValueError(f"{path}: not a --raw file (header must be {','.join(RAW_COLUMNS)})")
        for n, row in enumerate(rd, start=2):
            if not row:
                continue
            try:
                model, rep, g, b, t, s, other = row[0], int(row[1]), int(row[2]), int(row[3]), float(row[4]), float(row[5]), float(row[6])
            except (ValueError, IndexError):
                raise ValueError(f"{path}:{n}: bad row {','.join(row)!r}") from None
            if model not in DEFAULT_BATCHES or g < 1 or b < 1 or not t > 0 or s < 0:
                raise ValueError(f"{path}:{n}: bad row {','.join(row)!r}")
            runs, loads, reps = out.setdefault(model, ({}, [], set()))
            runs.setdefault((g, b), []).append((t, s))
            loads.append(other)
            reps.add(rep)
    if not out:
        raise ValueError(f"{path}: no rows")
    return {m: (runs, loads, len(reps)) for m, (runs, loads, reps) in out.items()}


def from_raw(args: argparse.Namespace) -> int:
    """``--from-raw``: placements.csv per model of a raw file, measuring nothing."""
    if args.cores is None or args.cores < 1:
        print("error: --from-raw needs --cores N (the measuring host's usable cores)", file=sys.stderr)
        return 2
    try:
        per_model = read_raw(args.from_raw)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    est = min if args.stat == "min" else statistics.median
    for model, (runs, loads, reps) in sorted(per_model.items()):
        write_placements(Path(args.out) / model, model, runs, loads, est, args.stat, reps, args.iters, args.threads,
                         args.cores, f"(rebuilt from {Path(args.from_raw).name} by --from-raw)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
