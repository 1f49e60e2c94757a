#!/usr/bin/env python3
"""Data-parallel (DDP) training of a lyasched example model on synthetic data.

Run alone (one process), or under torchrun / `srun torchrun` (reads RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT): gloo on CPU, nccl on GPU. Each step's synthetic global
batch is a function of (seed, step, sample index) only; rank r of g trains on samples
[r*B/g, (r+1)*B/g) of it and DDP averages the gradients, so a run on any GPU count, stopped and
resumed on another, follows the same trajectory and ends with the same loss (to float tolerance;
models with batch normalisation excepted: their statistics are per rank). Rank 0 prints a
per-iteration time summary (and one JSON line with --json) at the end; the final loss is the
mean over the global batch.

    torchrun --nproc-per-node 2 jobscripts/train_example.py --model resnet --batch-per-gpu 16 --iterations 50

Defaults come from the environment when the flags are absent: LYASCHED_MODEL,
LYASCHED_BATCH_PER_GPU, LYASCHED_ITERATIONS (what the Slurm launcher template sets).

Movable (lyasub --checkpointable): with $LYASCHED_CHECKPOINT_DIR set (launch.sbatch sets it) the
script resumes from the newest checkpoint there and, on SIGUSR1, saves one after the current
step and exits 0 (lyasched.job.checkpoint); `--checkpoint-dir` sets the directory by hand.

Adaptive batch (lyasub --adaptive-batch; `--adaptive-batch` or $LYASCHED_ADAPTIVE=1;
lyasched.job.goodput): --iterations counts base steps (steps at the base batch M0,
$LYASCHED_BASE_BATCH); the run starts at the global batch the scheduler chose
($LYASCHED_GLOBAL_BATCH), measures the gradient noise scale from the per-replica and all-reduced
gradients (one replica: from gradient accumulation), re-tunes the batch every --retune-every steps
for the GPUs it has (accumulating past $LYASCHED_MAX_LOCAL_BATCH), scales the learning rate by
the declared rule and reports phi and the batch in the step report. The checkpoint holds the
base-step progress and the batch schedule so far: a move to another GPU count resumes exactly.
`--schedule-out FILE` writes the run's batch schedule (one line per step: step, global batch,
learning-rate factor, base-step gain); `--batch-schedule FILE` replays one (no measuring, no
re-tuning), so an uninterrupted reference run follows the same schedule as a moved one and must
end with the same loss.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import warnings
import time

# torch warns on import when the NVML bindings are installed under their old name; not actionable here
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from lyasched.job import goodput
from lyasched.job.checkpoint import Checkpointer
from lyasched.profile.spec import SpecError, load_spec, parse_args
from lyasched.job.steptimes import StepTimes


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v else default


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--model", default=os.environ.get("LYASCHED_MODEL") or "resnet",
                   help="example name or package.module:factory (env LYASCHED_MODEL; default resnet)")
    p.add_argument("--batch-per-gpu", type=int, default=_env_int("LYASCHED_BATCH_PER_GPU", 32),
                   help="per-GPU (per-rank) batch size (env LYASCHED_BATCH_PER_GPU; default 32)")
    p.add_argument("--global-batch", type=int, default=_env_int("LYASCHED_GLOBAL_BATCH", 0),
                   help="global batch, split over the ranks (env LYASCHED_GLOBAL_BATCH; default: batch-per-gpu x ranks)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the initial weights and of the synthetic data")
    p.add_argument("--iterations", type=int, default=_env_int("LYASCHED_ITERATIONS", 100),
                   help="training iterations (env LYASCHED_ITERATIONS; default 100)")
    p.add_argument("--warmup", type=int, default=2, help="iterations left out of the time summary")
    p.add_argument("--arg", dest="model_args", action="append", default=[], metavar="KEY=VALUE",
                   help="model factory argument (repeatable)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, help="CPU intra-op threads per rank")
    p.add_argument("--json", action="store_true", help="rank 0 also prints the summary as one JSON line")
    p.add_argument("--checkpoint-dir", default=None,
                   help="resume from / save on SIGUSR1 to this directory (default $LYASCHED_CHECKPOINT_DIR; none: off)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="also save every N iterations (0: only on signal)")
    p.add_argument("--adaptive-batch", action="store_true", default=os.environ.get("LYASCHED_ADAPTIVE") == "1",
                   help="the scheduler and the job choose the batch (env LYASCHED_ADAPTIVE=1; see the module doc)")
    p.add_argument("--base-batch", type=int, default=_env_int(goodput.ENV_BASE, 0),
                   help="adaptive: M0, the batch the learning rate is tuned for (env LYASCHED_BASE_BATCH; default the global batch)")
    p.add_argument("--max-batch", type=int, default=_env_int(goodput.ENV_MAX, 0),
                   help="adaptive: the largest global batch (env LYASCHED_MAX_BATCH; default 8 x M0)")
    p.add_argument("--lr-rule", choices=goodput.RULES, default=os.environ.get(goodput.ENV_RULE) or "adascale",
                   help="adaptive: learning-rate rule (env LYASCHED_LR_RULE; default adascale)")
    p.add_argument("--max-local-batch", type=int, default=_env_int(goodput.ENV_MAX_LOCAL, 0),
                   help="adaptive: accumulate gradients past this per-GPU batch (env LYASCHED_MAX_LOCAL_BATCH; 0: never)")
    p.add_argument("--retune-every", type=int, default=20, help="adaptive: steps between the job's own batch choices")
    p.add_argument("--prior-step-times", action="store_true",
                   help="adaptive: choose batches from the prior step-time line only, not the measured times "
                        "(choices that depend on phi alone: reproducible, e.g. for a test)")
    p.add_argument("--noise-decay", type=float, default=0.9, help="adaptive: EMA decay of the noise-scale estimates")
    p.add_argument("--batch-schedule", default=None, help="adaptive: replay this logged batch schedule exactly")
    p.add_argument("--schedule-out", default=None, help="adaptive: write the run's batch schedule here at the end")
    p.add_argument("--stop-at-step", type=int, default=-1,
                   help="tests: act as if the move signal came during this step (checkpoint after it, exit 0)")
    p.add_argument("--crash-at-batch-change", type=int, default=0,
                   help="tests: at the N-th change of the adaptive batch, rank 0 kills its process group (SIGKILL, "
                        "as a node failure would: no handler, no checkpoint) in the middle of the first step at the "
                        "new batch")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep after each step, outside the timed part (tests: a run long enough to be moved)")
    return p


def main(argv: list[str] | None = None) -> int:
    steps = StepTimes()  # first thing: reports step times to $LYASCHED_STEPS_FILE (no-op without it)
    args = build_parser().parse_args(argv)
    if args.batch_per_gpu < 1 or args.iterations < 1 or args.warmup < 0:
        print("error: --batch-per-gpu and --iterations must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)  # the model's initial weights: same in every run (a resumed run must match)
    try:
        spec = load_spec(args.model, parse_args(args.model_args))
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is visible", file=sys.stderr)
        return 2
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    distributed = world > 1
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(minutes=5))

    if args.global_batch:
        if args.global_batch % world:
            print(f"error: global batch {args.global_batch} is not divisible by {world} ranks", file=sys.stderr)
            return 2
        args.batch_per_gpu = args.global_batch // world
    global_batch = args.batch_per_gpu * world
    model = spec.model.to(device).train()
    if distributed:
        model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    spec.model = model
    opt = spec.make_optimizer()
    ck = Checkpointer(args.checkpoint_dir, every=args.checkpoint_every)
    if args.adaptive_batch:
        return train_adaptive(args, spec, model, opt, ck, steps, device, use_cuda, world, rank, distributed)
    first = ck.resume(model, opt, map_location=device)
    if first and rank == 0:
        print(f"resumed from checkpoint at iteration {first} of {args.iterations}", flush=True)

    times: list[float] = []
    loss_val = float("nan")
    for it in range(first, args.iterations):
        x, y = batch_slice(spec, args.seed, it, global_batch, rank, args.batch_per_gpu, device)
        steps.begin()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()
        if use_cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        steps.end()
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        loss_val = float(loss.detach())
        if it + 1 == args.iterations:
            loss_val = global_mean(loss.detach(), distributed)
        if ck.should_stop(it, model, opt):
            loss_val = global_mean(loss.detach(), distributed)
            if rank == 0:
                print(f"checkpointed after iteration {it + 1} of {args.iterations} (loss {loss_val:.6f}); exiting for a move",
                      flush=True)
            steps.close()
            if distributed:
                dist.destroy_process_group()
            return ck.exit_code

    timed = times[args.warmup:] or times or [0.0]
    # the slowest rank sets the pace: report the max over ranks of each rank's median
    med = torch.tensor([statistics.median(timed)], dtype=torch.float64)
    if distributed:
        if use_cuda:
            med = med.to(device)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
    summary = None
    if rank == 0:
        summary = {
            "model": args.model, "world_size": world, "backend": dist.get_backend() if distributed else None,
            "device": str(device) if not use_cuda else torch.cuda.get_device_name(device),
            "batch_per_gpu": args.batch_per_gpu, "global_batch": args.batch_per_gpu * world,
            "iterations": args.iterations, "timed_iterations": len(timed),
            "median_s": float(med.item()), "mean_s": statistics.fmean(timed), "min_s": min(timed),
            "max_s": max(timed), "total_s": sum(times),
            "samples_per_s": args.batch_per_gpu * world / float(med.item()), "final_loss": loss_val,
        }
        print(
            f"{args.model}: {world} rank(s) x batch {args.batch_per_gpu}, {len(times)} iterations in "
            f"{summary['total_s']:.2f} s; per iteration median {summary['median_s'] * 1e3:.2f} ms "
            f"(mean {summary['mean_s'] * 1e3:.2f}, min {summary['min_s'] * 1e3:.2f}, max {summary['max_s'] * 1e3:.2f}); "
            f"{summary['samples_per_s']:.1f} samples/s; final loss {loss_val:.4f}",
            flush=True,
        )
    return finish(summary, args.json, steps, distributed)


def train_adaptive(args, spec, model, opt, ck: Checkpointer, steps: StepTimes, device, use_cuda: bool, world: int,
                   rank: int, distributed: bool) -> int:
    """The adaptive-batch loop (see the module doc): steps until --iterations base steps are done
    (or the replayed schedule ends), each at the agent's batch, shaped as micro-batches x
    accumulation x ranks; the learning rate of every parameter group is its initial one times
    the rule's factor."""
    chosen = args.global_batch or args.batch_per_gpu * world
    m0 = args.base_batch or chosen
    try:
        agent = goodput.BatchAgent(
            m0=m0, max_batch=args.max_batch or 8 * m0, world=world, rule=args.lr_rule, batch=chosen,
            max_local=args.max_local_batch, prior_alpha=float(os.environ.get(goodput.ENV_ALPHA) or 0.0),
            prior_beta=float(os.environ.get(goodput.ENV_BETA) or 1.0),
            prior_knee=float(os.environ.get(goodput.ENV_KNEE) or 0.0), retune_every=args.retune_every,
            measure=not args.prior_step_times)
        replay = goodput.read_schedule(open(args.batch_schedule).read()) if args.batch_schedule else None
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    noise = goodput.GradientNoise(model, decay=args.noise_decay)
    base_lrs = [g["lr"] for g in opt.param_groups]
    first = ck.resume(model, opt, map_location=device)
    if first:
        saved = torch.load(ck.latest(), map_location="cpu", weights_only=False)
        agent.load_state_dict(saved["adaptive"], keep_batch=True)  # progress and schedule; this start's batch
        noise.noise.load_state_dict(saved["noise"])
        if rank == 0:
            print(f"resumed from checkpoint at step {first} ({agent.progress:.3f} of {args.iterations} base steps), "
                  f"batch {agent.batch} on {world} rank(s)", flush=True)
    phi = noise.noise.phi
    loss_val = float("nan")
    reported = None
    last_batch, changes = agent.batch, 0

    def report() -> None:
        p = agent.plan()
        steps.adaptive({"batch": p.batch, "local": p.micro, "accum": p.accum, "m0": agent.m0, "phi": phi,
                        "eff": goodput.efficiency(phi, agent.m0, p.batch) if phi is not None else None,
                        "base": agent.progress, "lr": agent.lr_factor(phi), "rule": agent.rule})

    while True:
        it = agent.steps
        if replay is not None:
            if it not in replay:
                break
            agent.batch, lr_factor, gain = replay[it]
        elif agent.progress >= args.iterations - 1e-9:
            break
        plan = goodput.plan_for(agent.batch, world, agent.max_local)
        if reported != (plan, it // max(1, agent.retune_every)):
            report()
            reported = (plan, it // max(1, agent.retune_every))
        if plan.batch != last_batch:
            last_batch, changes = plan.batch, changes + 1
        x, y = batch_slice(spec, args.seed, it, plan.batch, rank, plan.micro * plan.accum, device)
        steps.begin()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(plan.accum):
            lo = i * plan.micro
            with noise.micro_step(i, plan.accum):
                loss = spec.loss(model(x[lo:lo + plan.micro]), y[lo:lo + plan.micro]) / plan.accum
                if args.crash_at_batch_change and changes == args.crash_at_batch_change and rank == 0:
                    print(f"crashing in step {it} (base steps {agent.progress:.3f}), the first at batch {plan.batch}",
                          flush=True)
                    os.killpg(os.getpgid(0), 9)  # SIGKILL: no handler, no checkpoint (torchrun then stops the others)
                loss.backward()
            total += float(loss.detach())
        phi = noise.finish(plan.micro, plan.accum)
        if replay is None:  # the rule at this step's estimate (AdaScale's gain is this step's, as its progress)
            lr_factor = goodput.lr_factor(agent.rule, phi, agent.m0, plan.batch)
        for g, lr0 in zip(opt.param_groups, base_lrs):
            g["lr"] = lr0 * lr_factor
        opt.step()
        if use_cuda:
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        steps.end()
        if replay is not None:
            agent.step_replayed(plan.batch, lr_factor, gain)
        else:
            agent.batch = plan.batch
            agent.step_done(plan, seconds, phi, lr=lr_factor)
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        loss_val = total
        if it == args.stop_at_step:
            ck.requested = True
        stop = ck.should_stop(it)
        if stop or (ck.every and (it + 1) % ck.every == 0):
            ck.save(it, model, opt, extra={"adaptive": agent.state_dict(), "noise": noise.noise.state_dict()}, stop=stop)
            if distributed:
                dist.barrier()
        if stop:
            if rank == 0:
                print(f"checkpointed after step {it + 1} ({agent.progress:.3f} base steps); exiting for a move", flush=True)
            steps.close()
            if distributed:
                dist.destroy_process_group()
            return ck.exit_code
    loss_val = global_mean(torch.tensor(loss_val, dtype=torch.float64), distributed)
    summary = None
    if rank == 0:
        if args.schedule_out:
            with open(args.schedule_out, "w") as f:
                f.write(goodput.format_schedule(agent.schedule))
        batches = [b for _, b, _, _ in agent.schedule]
        summary = {"model": args.model, "world_size": world, "adaptive": True, "steps": agent.steps,
                   "base_steps": agent.progress, "base_batch": agent.m0, "final_batch": agent.batch,
                   "batches": sorted(set(batches)), "phi": phi, "lr_rule": agent.rule, "final_loss": loss_val}
        print(f"{args.model}: {world} rank(s), {agent.steps} steps = {agent.progress:.3f} base steps at batches "
              f"{summary['batches']} (phi {phi if phi is None else round(phi, 2)}); final loss {loss_val:.6f}", flush=True)
    return finish(summary, args.json, steps, distributed)


def finish(summary: dict | None, as_json: bool, steps: StepTimes, distributed: bool) -> int:
    """The end of a run: rank 0's JSON line (``summary``; None on other ranks), the step-time
    report flushed, every rank at the barrier before the process group goes."""
    if summary is not None and as_json:
        print(json.dumps(summary), flush=True)
    steps.close()
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def batch_slice(spec, seed: int, step: int, global_batch: int, rank: int, local: int, device) -> tuple:
    """This rank's share of step ``step``'s global batch: the batch is drawn on the CPU from a
    generator seeded by (seed, step) alone, so sample i of a step is the same whatever the rank
    count (the training RNG is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed((seed * 1_000_003 + step) % (2**63))
        x, y = spec.make_batch(global_batch, "cpu")
    lo = rank * local
    return x[lo:lo + local].to(device), y[lo:lo + local].to(device)


def global_mean(loss, distributed: bool) -> float:
    """The loss over the global batch (the mean of the ranks' equal-sized shares)."""
    if not distributed:
        return float(loss)
    t = loss.detach().reshape(1).to(torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def _exit(rc: int) -> None:
    """Leave without the interpreter's finalization once a distributed run is done (its process
    group already destroyed, step times closed, checkpoints written): gloo's worker threads can
    still hold work objects then, and tearing them down while the interpreter shuts down has
    aborted a rank at exit (SIGABRT, "terminate called without an active exception"), failing a
    finished job. A single-process run exits normally."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    _exit(main())
