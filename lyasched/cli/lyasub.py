"""`lyasub`: submit a distributed training job to the lyasched scheduler (thin over lyasched.submitter).

Exit codes: 0 submitted, 1 Slurm or profiling failed (nothing left behind), 2 bad input
(nothing submitted), 130 interrupted.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from lyasched.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, OneLineCommand
from lyasched.slurm import SlurmError
from lyasched.slurm.submit import SbatchOptions

EXIT_FAILED = 1


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"lyasub: error: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def _model_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    import ast

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="'--model-arg'")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SLURM_TIME_RE = re.compile(r"((\d+-)?\d+(:\d+){0,2}|UNLIMITED|INFINITE)\Z", re.IGNORECASE)


def _check_options(config: Path | None, uid: str | None, **opts: str | None) -> None:
    """Bad input before anything runs (or is cached): sbatch values without control characters (a
    newline in a job name would split every squeue line), a --time Slurm can parse, a valid --uid,
    an explicit --config that loads."""
    from lyasched.summary import is_valid_uid

    if uid is not None and not is_valid_uid(uid):
        raise click.BadParameter(f"{uid!r} must be 8-64 characters of A-Z a-z 0-9 -", param_hint="'--uid'")
    for name, value in opts.items():
        if value is not None and _CONTROL_RE.search(value):
            raise click.BadParameter(f"{value!r} contains control characters", param_hint=f"'--{name}'")
    t = opts.get("time")
    if t is not None and not _SLURM_TIME_RE.match(t):
        raise click.BadParameter(f"{t!r} is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED)",
                                 param_hint="'--time'")
    if config is not None:
        from lyasched.config import ConfigError, load_config

        try:
            load_config(config)
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="'--config'") from None


def _shape(_ctx: Any, _param: Any, value: str | None) -> tuple[int, int] | None:
    """``--cluster-shape 4x8`` -> (4, 8)."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d{1,5})\s*[xX]\s*(\d{1,4})\s*", value)
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise click.BadParameter(f"{value!r}: expected NODESxGPUS, e.g. 4x8", param_hint="'--cluster-shape'")
    return int(m[1]), int(m[2])


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2g}s" if seconds < 10 else f"{seconds:.0f}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@click.command(
    cls=OneLineCommand,
    prog="lyasub",
    context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False},
)
@click.option("--partition", "-p", help="Slurm partition.")
@click.option("--account", "-A", help="Slurm account.")
@click.option("--qos", help="Slurm QOS.")
@click.option("--time", "-t", "time_limit", help="Wall-clock limit (Slurm format, e.g. 2:00:00).")
@click.option("--mem", help="Memory per node (Slurm format, e.g. 32G).")
@click.option("--cpus-per-gpu", type=click.IntRange(min=1), help="CPUs per allocated GPU.")
@click.option("--job-name", "-J", help="Job name (default: the training script's name).")
@click.option("--output", "-o", help="Standard output file (Slurm filename pattern).")
@click.option("--error", "-e", help="Standard error file (Slurm filename pattern).")
@click.option("--constraint", "-C", help="Node features required (passed to sbatch; kept by every release and move).")
@click.option("--gpu-type", "gpu_type", metavar="TYPE[,TYPE...]",
              help="GPU types the job may run on (Slurm's Gres=gpu:TYPE:N), e.g. a100 or a100,h100: the job runs on one of them "
                   "only, never mixed (default: any type).")
@click.option("--model", "-m", required=True,
              help="Model to cost: a built-in example, all small ones (mlp, mlp-large, resnet: a 78k-parameter CIFAR "
                   "ResNet-8, resnet20, vgg, vgg11, mobilenet, recsys, transformer, speech, detector), or your own "
                   "package.module:factory, imported from the installed packages or the current directory.")
@click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE", help="Model factory argument (repeatable), e.g. width=32.")
@click.option("--global-batch", "-b", type=int, required=True, help="Global batch B, split evenly over the GPUs.")
@click.option("--iterations", "-n", type=int, help="Training iterations (steps).")
@click.option("--epochs", type=float, help="Epochs (with --dataset-size): iterations = ceil(E * S / B).")
@click.option("--dataset-size", type=int, help="Samples per epoch (with --epochs).")
@click.option("--min-gpus", type=int, default=1, show_default=True, help="Fewest GPUs the job may run on.")
@click.option("--max-gpus", type=int, help="Most GPUs the job may run on (default: min(B, GPUs in the cluster)).")
@click.option("--no-profile", is_flag=True, help="Use a FLOP-count estimate instead of a cached or measured profile.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="Cost table (default $LYASCHED_DB or ~/.local/share/lyasched/lyasched.db).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="lyasched config for [cluster] (default $LYASCHED_CONFIG or /etc/lyasched/config.toml).")
@click.option("--uid", help="lyasched job uid; resubmitting with the same uid returns the existing job.")
@click.option("--checkpointable", is_flag=True, help="The script saves on SIGUSR1 and resumes (lyasched.job.checkpoint): the scheduler may shrink, grow or suspend it (docs/elastic.md).")
@click.option("--adaptive-batch", is_flag=True, help="The scheduler chooses the global batch (from --global-batch, the batch the learning rate is tuned for, up to --max-batch) with the GPUs; the script measures its gradient noise scale and scales its learning rate (lyasched.job.goodput; docs/lyasub.md).")
@click.option("--max-batch", type=int, help="With --adaptive-batch: the largest global batch the job accepts.")
@click.option("--lr-rule", type=click.Choice(["linear", "sqrt", "adascale"]), help="With --adaptive-batch: how the script scales its learning rate with the batch (default adascale).")
@click.option("--dry-run", is_flag=True, help="Print the batch script and the sbatch command; submit nothing.")
@click.option("--cluster-shape", callback=_shape, metavar="NODESxGPUS",
              help="With --dry-run: cost the job on this cluster (e.g. 4x8: 4 nodes of 8 GPUs) instead of asking Slurm.")
@click.option("--parsable", is_flag=True, help="Print only the job id (like sbatch --parsable).")
@click.option("--json", "as_json", is_flag=True, help="Print job id, cost summary and predicted run times as JSON.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- SCRIPT [ARGS]...")
def main(partition, account, qos, time_limit, mem, cpus_per_gpu, job_name, output, error, constraint, gpu_type, model,
         model_args, global_batch, iterations, epochs, dataset_size, min_gpus, max_gpus, no_profile, db, config,
         uid, checkpointable, adaptive_batch, max_batch, lr_rule, dry_run, cluster_shape, parsable, as_json, command) -> int:
    """Submit SCRIPT (a torch.distributed training script) to the lyasched scheduler.

    The job is submitted held, with its cost summary in the Slurm comment; lyasched serve
    chooses its GPU count and releases it. SCRIPT runs under torchrun with one worker per GPU;
    LYASCHED_BATCH_PER_GPU tells it its per-GPU batch. See docs/lyasub.md.
    """
    import warnings

    # torch.cuda's import-time notice about the pynvml package is noise to a user submitting a job
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)
    from lyasched.submitter import RequestError, SubmitError, SubmitRequest, cancel, submit

    if parsable and as_json:
        raise click.UsageError("--parsable and --json are mutually exclusive")
    _check_options(config, uid, partition=partition, account=account, qos=qos, time=time_limit, mem=mem,
                   **{"job-name": job_name, "output": output, "error": error, "constraint": constraint,
                      "gpu-type": gpu_type})
    request = SubmitRequest(
        command=list(command), model=model, global_batch=global_batch, iterations=iterations, epochs=epochs,
        dataset_size=dataset_size, min_gpus=min_gpus, max_gpus=max_gpus, profile=not no_profile,
        model_args=_model_args(model_args), db=db, config=config, uid=uid, dry_run=dry_run, checkpointable=checkpointable,
        adaptive_batch=adaptive_batch, max_batch=max_batch, lr_rule=lr_rule, cluster_shape=cluster_shape,
        gpu_types=tuple(t.strip() for t in gpu_type.split(",")) if gpu_type is not None else (),
        options=SbatchOptions(partition=partition, account=account, qos=qos, time=time_limit, mem=mem,
                              cpus_per_gpu=cpus_per_gpu, job_name=job_name, output=output, error=error,
                              constraint=constraint),
    )
    try:
        result = submit(request, say=lambda m: click.echo(f"lyasub: {m}", err=True))
    except RequestError as e:
        _fail(str(e), EXIT_USAGE)
    except (SubmitError, SlurmError) as e:
        _fail(str(e), EXIT_FAILED)
    except KeyboardInterrupt:
        click.echo("lyasub: interrupted; nothing submitted", err=True)
        return EXIT_INTERRUPTED

    try:
        if dry_run:
            if as_json:
                click.echo(json.dumps({**result.to_json(), "script": result.script, "sbatch": result.sbatch_argv}))
            else:
                click.echo(result.script, nl=False)
                click.echo("lyasub: dry run; would run: " + shlex.join(result.sbatch_argv), err=True)
            return 0
        if parsable:
            click.echo(result.job_id)
        elif as_json:
            click.echo(json.dumps(result.to_json()))
        else:
            s = result.summary
            pred = result.predictions
            lo, hi = min(pred), max(pred)
            what = "Found existing" if result.reused else "Submitted"
            runs = " .. ".join(f"~{_duration(pred[g])} on {g} GPU{'s' if g > 1 else ''}" for g in sorted({lo, hi}))
            click.echo(
                f"{what} lyasched job {result.job_id} ({model}, B={s.global_batch}"
                + (f" adaptive up to {s.max_batch} ({s.lr_rule} learning rate)" if s.adaptive else "")
                + f", {s.iterations} iterations, "
                f"{s.min_gpus}-{s.max_gpus} GPUs, cost from {result.profile_source}: {runs}); "
                "held until the lyasched scheduler starts it"
            )
    except BaseException:
        # the user never saw the job id: do not leave an orphan
        if result.job_id and not result.reused:
            cancel(result.job_id)
        raise
    return 0
if __name__ == "__main__":
    main(prog_name="lyasub")
