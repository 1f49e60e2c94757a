#!/usr/bin/env python3
"""Profile -> calibrate -> predict vs measure: the cost model on real DistributedDataParallel runs.

For each example model: profile t(b) on 1 process (CPU, lyasched.profile.profile_model),
calibrate the gloo link with the all-reduce benchmark (lyasched.job.allreduce_bench, as
`lyasched calibrate run` does) on the same numbers of processes, then predict the
per-iteration time of DDP training (gloo, CPU) on 1, 2 and 4 processes at a fixed global
batch and compare with the measured time.

Prediction (docs/calibration.md): g processes with ``threads`` threads each share ``cores``
cores, so each gets 1/share of a core, share = max(1, g * threads / cores), and

    t_pred(g) = share * t(B/g) + ring_allreduce(params * bytes_per_param, g, link_g)

where link_g was measured by g processes on the same cores (their sharing of the CPU during
the copies and reductions is part of the measured link). No overlap term: these models fit
in one DDP bucket, whose all-reduce starts after backward.

    python benchmarks/profile_accuracy.py [--json] [--models mlp,resnet] [--procs 1,2,4]

``--cluster`` instead runs the learning test on the real Slurm test cluster (as root, cluster
up, inside its flock; benchmarks/learn_on_cluster.py): jobs of one model on 1, 2 and 4 GPUs
report their step times, the service learns the profile, and a held-out 3-GPU job is predicted
by the first profile and by the learned one; both errors are printed.

    python benchmarks/profile_accuracy.py --cluster [--models mlp] [--cluster-rounds 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_MODELS = "mlp,mlp-large,resnet,vgg,mobilenet"


class RunQueue:
    """Samples the kernel's count of runnable tasks (/proc/stat procs_running) in a thread.

    On a shared machine other processes take CPU too; the completely fair scheduler gives
    every runnable task an equal slice, so a task's wall time is its CPU time times
    max(1, runnable / cores). The sampler itself is one of the runnable tasks when it
    reads, so it subtracts 1.
    """

    def __init__(self, period: float = 0.01) -> None:
        import threading

        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def read() -> int | None:
        try:
            with open("/proc/stat") as fh:
                for line in fh:
                    if line.startswith("procs_running"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            v = self.read()
            if v is not None:
                self.samples.append(max(0, v - 1))
            self._stop.wait(self.period)

    def __enter__(self) -> "RunQueue":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------- worker (runs under torchrun)


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lyasched.profile.models import example
    from lyasched.profile.profiler import train_step

    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    out: dict[str, dict] = {}
    try:
        for name in args.models.split(","):
            torch.manual_seed(0)
            spec = example(name)
            if world > 1:
                spec.model = DDP(spec.model)  # ModelSpec is a plain dataclass: wrap in place
            opt = spec.make_optimizer()
            local = args.global_batch // world
            x, y = spec.make_batch(local, "cpu")
            for _ in range(args.warmup):
                train_step(spec, opt, x, y)
            times = []
            with RunQueue() as rq:  # every rank samples; the same kernel counter, averaged below
                for _ in range(args.iters):
                    if world > 1:
                        dist.barrier()
                    t0 = time.perf_counter()
                    train_step(spec, opt, x, y)
                    times.append(time.perf_counter() - t0)
            stats = torch.tensor([statistics.median(times), min(times)], dtype=torch.float64)
            runq = rq.mean() or 0.0
            if world > 1:  # the slowest rank's figure: DDP waits for it
                t_rq = torch.tensor([runq / world], dtype=torch.float64)
                dist.all_reduce(stats, op=dist.ReduceOp.MAX)
                dist.all_reduce(t_rq, op=dist.ReduceOp.SUM)
                runq = float(t_rq.item())
            med = float(stats[0].item())
            out[name] = {"median": med, "min": float(stats[1].item()), "local_batch": local, "runnable": runq}
            if rank == 0:
                print(f"  measured {name:10s} g={world} local batch {local:3d}: {med * 1e3:8.2f} ms/iter",
                      file=sys.stderr, flush=True)
        if rank == 0:
            Path(args.worker_out).write_text(json.dumps({"world_size": world, "models": out}))
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------- driver


def _torchrun(nproc: int, argv: list[str], timeout: float) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *argv]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
    for line in proc.stderr.splitlines():  # keep the progress lines, drop torchrun's banner
        if line.startswith(("  measured", "allreduce")):
            print(line, file=sys.stderr, flush=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"torchrun with {nproc} processes failed (exit {proc.returncode}):\n{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"example models (default {DEFAULT_MODELS})")
    ap.add_argument("--procs", default="1,2,4", help="process counts g to measure")
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--cores", type=int, default=None, help="cores the processes share (default: this machine's)")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of profile, link and DDP runs")
    ap.add_argument("--stat", choices=["min", "median"], default="min",
                    help="estimator over repetitions and rounds for every timing (default min: least disturbed)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--nice", type=int, default=0,
                    help="scheduling priority change for this run and its processes (negative needs root): on a "
                         "machine shared with other work, e.g. -10 makes our processes win the CPU so that the "
                         "measurement approaches an idle machine")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cluster", action="store_true",
                    help="learning test on the real Slurm test cluster (first vs learned profile, held-out GPU count)")
    ap.add_argument("--iterations", type=int, default=300, help="with --cluster: training iterations per job")
    ap.add_argument("--held-out", type=int, default=3, help="with --cluster: the GPU count never learned from")
    ap.add_argument("--cluster-rounds", type=int, default=1, help="with --cluster: jobs per GPU count (1, 2, 4)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.cluster:
        return cluster_main(args)

    try:
        procs = sorted({int(p) for p in args.procs.split(",")})
    except ValueError:
        print(f"error: --procs must be a comma list of integers, got {args.procs!r}", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.iters < 1 or args.warmup < 0 or args.threads < 1:
        print("error: --rounds, --iters and --threads must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    bad = [g for g in procs if g < 1 or args.global_batch % g]
    if bad:
        print(f"error: every g must be >= 1 and divide the global batch {args.global_batch}: {bad}", file=sys.stderr)
        return 2
    from lyasched.profile.models import EXAMPLES

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in EXAMPLES]
    if unknown or not models:
        print(f"error: unknown model(s) {unknown} (known: {', '.join(EXAMPLES)})", file=sys.stderr)
        return 2
    cores = args.cores or available_cores()
    if args.nice:
        try:
            os.nice(args.nice)  # inherited by the torchrun processes
        except OSError as e:
            print(f"error: cannot change priority by {args.nice}: {e.strerror}", file=sys.stderr)
            return 2

    import numpy as np
    import torch

    from lyasched.costmodel.calibration import fit_bench_result, load_bench_result
    from lyasched.costmodel.fit import fit_linear, fit_link
    from lyasched.costmodel.cost import Profile, ring_allreduce_time
    from lyasched.profile import profile_model

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    local_batches = sorted({args.global_batch // g for g in procs} | {max(1, args.global_batch // (2 * max(procs)))})
    # Every round profiles, calibrates and measures once; rounds interleave so that a burst of
    # other work on a shared machine hits one round, and the estimator across rounds drops it.
    prof_runs: dict[str, list] = {m: [] for m in models}
    prof_load: dict[str, list[float]] = {m: [] for m in models}
    link_runs: dict[int, list[dict]] = {}
    link_load: dict[int, list[float]] = {}
    meas_runs: dict[tuple[str, int], list[dict]] = {(m, g): [] for m in models for g in procs}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, args.rounds + 1):
            say(f"round {rnd}/{args.rounds}")
            # 1. profile each model on one process
            for m in models:
                with RunQueue() as rq:
                    r = profile_model(m, batches=local_batches, device="cpu", threads=args.threads, warmup=2,
                                      repeats=5)
                prof_runs[m].append(r)
                prof_load[m].append((rq.mean() or 1.0) / cores)
                say(f"  profiled {m:10s} params={r.params:>9d}  t(b) = {r.alpha * 1e3:.2f} ms + "
                    f"{r.beta * 1e3:.3f} ms/sample (R^2 {r.r2:.3f}; load {prof_load[m][-1]:.2f})")
            # 2. calibrate the gloo link with the all-reduce benchmark, once per process count g > 1:
            #    the link as g processes sharing these cores see it (the CPU sharing of the copies
            #    and reductions is part of the measured link, as a cluster's link is measured on it)
            max_grad = max(r[-1].params * r[-1].bytes_per_param for r in prof_runs.values())
            sizes = [4096 * 4**i for i in range(10) if 4096 * 4**i <= max(4 * max_grad, 16 << 20)]
            for g in (g for g in procs if g > 1):
                bench = Path(tmp) / f"allreduce{g}-{rnd}.json"
                with RunQueue() as rq:
                    _torchrun(g, ["-m", "lyasched.job.allreduce_bench", "--out", str(bench), "--repeats", "10",
                                  "--threads", str(args.threads), "--sizes", ",".join(map(str, sizes))], timeout=300)
                doc = load_bench_result(bench)
                fit = fit_bench_result(doc)
                link_runs.setdefault(g, []).append(doc)
                link_load.setdefault(g, []).append((rq.mean() or g) / cores)
                say(f"  gloo link ({g} processes): {fit.link.bandwidth / 1e9:.3f} GB/s, latency "
                    f"{fit.link.latency * 1e6:.1f} us (R^2 {fit.r2:.3f}; load {link_load[g][-1]:.2f})")
            # 3. measure DDP on each g
            for g in procs:
                out = Path(tmp) / f"ddp{g}-{rnd}.json"
                _torchrun(g, [str(Path(__file__).resolve()), "--worker", "--worker-out", str(out),
                              "--models", ",".join(models), "--global-batch", str(args.global_batch),
                              "--threads", str(args.threads), "--iters", str(args.iters),
                              "--warmup", str(args.warmup)], timeout=300)
                for m, v in json.loads(out.read_text())["models"].items():
                    meas_runs[(m, g)].append(v)

    # The estimator: "min" keeps, for every measured point, the fastest observation over
    # repetitions and rounds (as timeit does: slower ones are other work interfering);
    # "median" the median. The same estimator is used on the profile, the link and the
    # DDP measurement, so predicted and measured stay comparable.
    est = min if args.stat == "min" else statistics.median
    links: dict[int, tuple] = {}
    for g, docs in link_runs.items():
        sizes0 = docs[0]["sizes"]
        links[g] = fit_link(sizes0, [est(d["seconds"][i] for d in docs) for i in range(len(sizes0))], g)

    # 4. predict and compare
    rows = []
    for m in models:
        r0 = prof_runs[m][0]
        # per batch size: the estimator over every timed step of every round, then t(b) = alpha + beta*b
        common = [b for b in r0.batches if all(b in r.batches for r in prof_runs[m])]
        tb = [est(t for r in prof_runs[m] for t in r.step_samples[r.batches.index(b)]) for b in common]
        tf = fit_linear(common, tb)
        p = Profile(m, alpha=tf.intercept, beta=tf.slope, params=r0.params, bytes_per_param=r0.bytes_per_param)
        for g in procs:
            local = args.global_batch / g
            meas = est(v[args.stat] for v in meas_runs[(m, g)])
            # only our own processes share the cores (what the benchmark can control)
            share = max(1.0, g * args.threads / cores)
            compute = p.step_time(local)
            comm = ring_allreduce_time(p.grad_bytes, g, links[g][0]) if g > 1 else 0.0
            pred = share * compute + comm
            rows.append({"model": m, "g": g, "local_batch": local, "measured_s": meas,
                         "measured_rounds_s": [v[args.stat] for v in meas_runs[(m, g)]],
                         "profile_alpha": p.alpha, "profile_beta": p.beta,
                         "cpu_share": share, "compute_s": compute, "comm_s": comm, "predicted_s": pred,
                         "abs_rel_err": abs(pred / meas - 1.0),
                         # diagnostic only: runnable tasks per core while this row was measured
                         # (> g*threads/cores means other work competed for the CPU)
                         "runnable_per_core": statistics.fmean(v["runnable"] for v in meas_runs[(m, g)]) / cores,
                         "runnable_per_core_profiling": statistics.fmean(prof_load[m])})

    def acc(key: str, sel) -> dict:
        e = np.array([r[key] for r in rows if sel(r)])
        if not e.size:
            return {"median_abs_rel_err": None, "p90_abs_rel_err": None, "rows": 0}
        return {"median_abs_rel_err": float(np.median(e)), "p90_abs_rel_err": float(np.percentile(e, 90)),
                "rows": int(e.size)}

    overall = acc("abs_rel_err", lambda r: True)
    overall_multi = acc("abs_rel_err", lambda r: r["g"] > 1)

    elapsed = time.perf_counter() - t_start
    if args.json:
        print(json.dumps({"rows": rows, "overall": overall, "overall_multi_process": overall_multi,
                          "links": {str(g): {"bandwidth": lk.bandwidth, "latency": lk.latency, "r2": r2,
                                             "runnable_per_core": statistics.fmean(link_load[g])}
                                    for g, (lk, r2) in links.items()},
                          "rounds": args.rounds, "stat": args.stat,
                          "nice": args.nice,
                          "cores": cores, "threads": args.threads, "global_batch": args.global_batch,
                          "torch": torch.__version__, "elapsed_s": elapsed}, indent=2))
        return 0
    print(f"\nDDP (gloo, CPU), {args.rounds} round(s), estimator {args.stat}, global batch {args.global_batch}, "
          f"{args.threads} thread(s)/process, {cores} cores"
          + "; gloo links: " + ", ".join(f"g={g}: {lk.bandwidth / 1e9:.3f} GB/s + {lk.latency * 1e6:.0f} us"
                                         for g, (lk, _) in links.items()))
    print(f"{'model':10s} {'g':>2s} {'local':>5s} {'share':>5s} {'compute':>9s} {'comm':>8s} {'predicted':>10s} "
          f"{'measured':>9s} {'err':>6s} {'load':>5s}")
    for r in rows:
        print(f"{r['model']:10s} {r['g']:2d} {r['local_batch']:5.0f} {r['cpu_share']:5.1f} {r['compute_s'] * 1e3:7.2f}ms "
              f"{r['comm_s'] * 1e3:6.2f}ms {r['predicted_s'] * 1e3:8.2f}ms {r['measured_s'] * 1e3:7.2f}ms "
              f"{r['abs_rel_err']:6.1%} {r['runnable_per_core']:5.2f}")
    print("(share = max(1, g*threads/cores) multiplies compute; comm uses the link measured with g processes; "
          "load = runnable tasks per core while measuring, all processes of the machine: above share, other work competed for the CPU)")
    for label, a in (("all rows", overall), ("g > 1   ", overall_multi)):
        if a["rows"]:
            print(f"{label}  rows={a['rows']:3d}  median={a['median_abs_rel_err']:6.1%}  p90={a['p90_abs_rel_err']:6.1%}")
    print(f"(target median <= 10%, p90 <= 20%); elapsed {elapsed:.0f} s")
    return 0


def cluster_main(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from learn_on_cluster import run

    model = args.models.split(",")[0] if args.models != DEFAULT_MODELS else "mlp"
    gb = args.global_batch if args.global_batch != 32 else 48  # divisible by 1, 2, 3 and 4
    if gb % 12 or args.iterations < 10 or args.held_out not in (3, 5, 6, 7, 8):
        print("error: --global-batch must be divisible by 1, 2, 3, 4 (12k); --iterations >= 10; "
              "--held-out one of 3, 5-8", file=sys.stderr)
        return 2
    if gb % args.held_out:
        print(f"error: --global-batch {gb} not divisible by --held-out {args.held_out}", file=sys.stderr)
        return 2
    try:
        out = run(model, gb, args.iterations, max(1, args.cluster_rounds), args.held_out,
                  lambda m: print(m, file=sys.stderr, flush=True))
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    h, f, lp = out["held_out"], out["first_profile"], out["learned_profile"]
    print(f"\n{out['model']}, global batch {out['global_batch']}, {out['iterations']} iterations; learned from "
          + ", ".join(f"{r['gpus']} GPU(s) (job {r['job']}: {r['step_time_s'] * 1e3:.2f} ms/step)" for r in out["learned_from"]))
    print("  (on the runs it learned from, step predicted by the first / the learned profile: "
          + ", ".join(f"{r['gpus']} GPU(s) {r['first_step_pred_s'] * 1e3:.2f} / {r['learned_step_pred_s'] * 1e3:.2f} ms "
                      f"vs {r['step_time_s'] * 1e3:.2f}" for r in out["learned_from"] if r["step_time_s"]) + ")")
    print(f"held out: {h['gpus']} GPUs (job {h['job']}, placement {h['placement']}): measured {h['step_time_s'] * 1e3:.2f} ms/step, "
          f"ran {h['observed_run_s']:.1f} s")
    print(f"{'':18s} {'step pred':>10s} {'step err':>9s} {'run pred':>9s} {'run err':>8s}")
    print(f"{'first profile':18s} {f['step_pred_s'] * 1e3:8.2f}ms {f['step_abs_rel_err']:9.1%} {f['run_pred_s']:8.1f}s "
          f"{f['run_abs_rel_err']:8.1%}   ({'profiled' if f['source'] == 'm' else 'estimated'}; no start-up term)")
    run_err = "-" if lp["run_abs_rel_err"] is None else f"{lp['run_abs_rel_err']:.1%}"
    run_pred = "-" if lp["run_pred_s"] is None else f"{lp['run_pred_s']:.1f}s"
    print(f"{'learned profile':18s} {lp['step_pred_s'] * 1e3:8.2f}ms {lp['step_abs_rel_err']:9.1%} {run_pred:>9s} "
          f"{run_err:>8s}   ({lp['provenance']}; the service's prediction, start-up term included)")
    if out["startup"]:
        s = out["startup"]
        print(f"start-up term: {s['seconds']:.1f} s ({s['launcher']} on {s['cluster']}, {s['samples']} job(s))")
    print("history:\n  " + "\n  ".join(out["history"]))
    print(f"elapsed {out['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
