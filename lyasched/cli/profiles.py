"""`lyasched profiles [list|show SIG|MODEL]`: what the cost table knows, and how each profile
changed and why (profiled, run-time corrections, learned from reported runs). No torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from lyasched.store import open_db
from lyasched.profile.signature import device_type
from lyasched.store.costtable import CostEntry, events, list_entries, runs

_db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
                          help="Database (default: $LYASCHED_DB or ~/.local/share/lyasched/lyasched.db).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")


def _mib(v: float) -> str:
    return f"{v / 2**20:.1f}"


def _row(e: CostEntry) -> list[str]:
    return [
        e.signature, e.device_type, e.model, e.provenance, f"{e.alpha * 1e3:.3f}", f"{e.beta * 1e3:.4f}",
        "-" if e.r2 is None else f"{e.r2:.3f}", _mib(e.m0), f"{e.m1 / 2**20:.3f}", f"{e.params:,}",
        f"{e.correction:.3f}", str(e.observations), e.updated,
    ]


HEADERS = ["signature", "device", "model", "provenance", "alpha_ms", "beta_ms", "r2", "m0_MiB", "m1_MiB",
           "params", "corr", "obs", "updated"]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _opts(ctx: click.Context, db_path: Path | None, as_json: bool) -> tuple[Path | None, bool]:
    parent = ctx.find_object(dict) or {}
    return db_path or parent.get("db"), as_json or parent.get("json", False)


def _list(db_path: Path | None, as_json: bool) -> None:
    entries = list_entries(open_db(db_path))
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in entries], indent=2))
    elif not entries:
        click.echo("no profiles stored (python -m lyasched.profile MODEL --db PATH adds one)")
    else:
        click.echo(_table([_row(e) for e in entries]))


@click.group(invoke_without_command=True)
@_db_option
@_json_option
@click.pass_context
def profiles(ctx: click.Context, db_path: Path | None, as_json: bool) -> None:
    """List (default) or show the cost table's profiles."""
    ctx.obj = {"db": db_path, "json": as_json}
    if ctx.invoked_subcommand is None:
        _list(db_path, as_json)


@profiles.command("list")
@_db_option
@_json_option
@click.pass_context
def list_cmd(ctx: click.Context, db_path: Path | None, as_json: bool) -> None:
    """Every profile, most recently updated first."""
    _list(*_opts(ctx, db_path, as_json))


@profiles.command("show")
@click.argument("sig", metavar="SIG|MODEL")
@click.option("--device", help="Device type (needed when SIG has entries for several devices).")
@_db_option
@_json_option
@click.pass_context
def show(ctx: click.Context, sig: str, device: str | None, db_path: Path | None, as_json: bool) -> None:
    """One profile and its history: SIG is a signature, a unique prefix of one, or a model name."""
    db_path, as_json = _opts(ctx, db_path, as_json)
    db = open_db(db_path)
    every = list_entries(db)
    matches = [e for e in every if e.signature.startswith(sig)] or [e for e in every if e.model == sig]
    if device:
        matches = [e for e in matches if e.device_type == device_type(device)]
    if not matches:
        click.echo(f"error: no profile matches {sig!r}" + (f" on {device}" if device else ""), err=True)
        sys.exit(1)
    if len(matches) > 1:
        keys = ", ".join(f"{e.signature}/{e.device_type}" for e in matches)
        click.echo(f"error: {sig!r} is ambiguous ({keys}); give more of the signature or --device", err=True)
        sys.exit(1)
    e = matches[0]
    history, seen = events(db, e.signature, e.device_type), runs(db, e.signature, e.device_type)
    if as_json:
        click.echo(json.dumps({**e.to_dict(), "provenance": e.provenance, "learned": e.learned,
                               "history": history, "runs": seen}, indent=2))
        return
    p = e.profile()
    lines = [
        f"signature     {e.signature}", f"device        {e.device_type} ({e.device_name})",
        f"model         {e.model}", f"source        {e.source}", f"provenance    {e.provenance}",
        f"t(b)          {e.alpha * 1e3:.4f} ms + {e.beta * 1e3:.5f} ms * b" + ("" if e.r2 is None else f"   (R^2 {e.r2:.4f})"),
        f"mem(b)        {_mib(e.m0)} MiB + {e.m1 / 2**20:.4f} MiB * b",
        f"params        {e.params:,} ({e.grad_bytes / 2**20:.2f} MiB of gradients, {e.bytes_per_param} B each)",
        f"correction    {e.correction:.4f} after {e.observations} observation(s)"
        + ("" if e.last_ratio is None else f", last ratio {e.last_ratio:.3f}"),
        f"in use        {p.alpha * 1e3:.4f} ms + {p.beta * 1e3:.5f} ms * b; all-reduce x{p.comm_scale_intra:.3g} "
        f"(one node), x{p.comm_scale_inter:.3g} (several nodes) of the cluster's ring model",
        f"versions      torch {e.torch_version or '-'}, CUDA {e.cuda_version or '-'}",
        f"created       {e.created}   updated {e.updated}",
    ]
    points = e.step_points.get("batches") or []
    if points:
        secs = e.step_points.get("seconds") or []
        mems = e.mem_points.get("bytes") or []
        lines.append("points        batch  step_ms   mem_MiB")
        for i, b in enumerate(points):
            s = f"{secs[i] * 1e3:8.3f}" if i < len(secs) else "       -"
            m = f"{mems[i] / 2**20:9.1f}" if i < len(mems) else "        -"
            lines.append(f"              {b:5d} {s} {m}")
    if seen:
        lines.append("runs          job        placement  local_bsz  step_ms   (reported by the job, lyasched.job.steptimes)")
        for r in seen:
            lines.append(f"              {str(r['job_id'] or '-'):10s} {r['placement']:10s} {r['local_bsz']:9g}  "
                         f"{r['step_time'] * 1e3:8.3f}")
    if history:
        lines.append("history       (how this profile changed and why, oldest first)")
        for h in history:
            lines.append(f"  {h['time']}  {h['event']}: {h['detail']}")
    click.echo("\n".join(lines))
