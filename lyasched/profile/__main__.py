"""`python -m lyasched.profile MODEL`: profile a model, print the JSON result, optionally store it."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# torch warns on import when the NVML bindings are installed under their old name; not actionable here
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

import click

from lyasched.profile.models import EXAMPLES


def _batches(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers, e.g. 1,2,4,8") from None
    if not out or min(out) < 1:
        raise click.BadParameter("batch sizes must be >= 1")
    return out


def _fail(msg: str, code: int) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model")
@click.option("--batches", help="Comma-separated per-GPU batch sizes (default 1,2,4,... up to --max-batch).")
@click.option("--max-batch", type=click.IntRange(min=1), help="Largest batch to try (default 32 on CPU, 1024 on GPU).")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed steps per batch size.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps per batch size (median kept).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), help="CPU intra-op threads (default: $LYASCHED_PROFILE_THREADS; inside a Slurm job, its CPUs on "
              "this node; else torch's default).")
@click.option("--time-budget", type=float, help="Seconds after which no further batch size is started.")
@click.option("--arg", "model_args", multiple=True, metavar="KEY=VALUE", help="Model factory argument (repeatable), e.g. width=32.")
@click.option("--estimate", is_flag=True, help="Estimate from FLOP counts instead of measuring (source=estimated).")
@click.option("--estimate-batch", type=click.IntRange(min=2), default=8, show_default=True, help="Batch b of the FLOP count.")
@click.option("--target", help="Device type the estimate is for (e.g. a100, h100, cpu; default: this machine).")
@click.option("--precision", type=click.Choice(["fp32", "tf32"]), default="fp32", show_default=True, help="Estimate: throughput column.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON here instead of stdout.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="Also store the result in this cost table (SQLite).")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (the default; kept for symmetry with other commands).")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
def main(model, batches, max_batch, warmup, repeats, device, threads, time_budget, model_args, estimate,
         estimate_batch, target, precision, out, db, as_json, quiet) -> None:
    """Profile MODEL: a built-in example (%s) or package.module:factory.

    Times full training steps at a sweep of per-GPU batch sizes and fits
    t(b) = alpha + beta*b and mem(b) = m0 + m1*b. See docs/profiling.md.
    """
    from lyasched.profile.profiler import ProfileError, env_threads, profile_model
    from lyasched.profile.spec import SpecError, load_spec, parse_args

    say = (lambda m: None) if quiet else (lambda m: click.echo(f"[profile] {m}", err=True))
    try:
        bl = _batches(batches)
        spec = load_spec(model, parse_args(model_args))
    except (SpecError, click.BadParameter) as e:
        _fail(str(e.message if isinstance(e, click.BadParameter) else e), 2)
    try:
        if estimate:
            from lyasched.profile.flops import estimate_profile

            if threads:
                import torch

                torch.set_num_threads(threads)
            say(f"estimating {spec.name} from FLOP counts at batch 1 and {estimate_batch}")
            result = estimate_profile(spec, batch=estimate_batch, target=target, precision=precision)
        else:
            result = profile_model(
                spec, batches=bl, max_batch=max_batch, warmup=warmup, repeats=repeats, device=device,
                threads=threads or env_threads(), time_budget=time_budget, progress=say,
            )
    except (ProfileError, ValueError) as e:
        _fail(str(e), 1)
    say(
        f"{result.model} on {result.device_name}: alpha={result.alpha * 1e3:.3f} ms beta={result.beta * 1e3:.4f} ms/sample "
        f"R2={result.r2:.3f} m0={result.m0 / 2**20:.1f} MiB m1={result.m1 / 2**20:.3f} MiB/sample "
        f"signature={result.signature} ({result.source})"
    )
    text = result.to_json()
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        say(f"wrote {out}")
    else:
        click.echo(text)
    if db:
        from lyasched.store import open_db
        from lyasched.store.costtable import put

        entry = put(open_db(db), result)
        say(f"stored {entry.signature}/{entry.device_type} in {db} (source={entry.source})")


main.help = (main.help or "") % ", ".join(EXAMPLES)

if __name__ == "__main__":
    main(prog_name="python -m lyasched.profile")
