"""`lyastat`: what lyasched decided about your jobs, and why (squeue-style; `--json` for machines).

    lyastat              your jobs (Slurm user = you)
    lyastat --all        everybody's
    lyastat JOBID        one job: profile, predicted time per GPU count, decisions, observed time
    lyastat --queue      the scheduler: Q, Z, free GPUs, last slot and how long it took

Reads the service database read-only (``--db``, else $LYASCHED_DB, else ``service.db`` of the
config) and merges Slurm's live state (the config's Slurm backend: squeue or pyslurm) when Slurm answers.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from lyasched.cli.errors import OneLineCommand
from lyasched.config import ConfigError, load_config
from lyasched.store import jobrecord
from lyasched.store.jobrecord import JobRecord
from lyasched.store import DEFAULT_DB_ENV

COLUMNS = (
    ("JOBID", 8, ">"),
    ("USER", 9, "<"),
    ("NAME", 12, "<"),
    ("STATE", 10, "<"),
    ("GPUS", 4, ">"),
    ("NODES", 14, "<"),
    ("PRED", 8, ">"),
    ("OBS", 8, ">"),
    ("WAIT", 8, ">"),
    ("REASON", 0, "<"),
)


def fmt_seconds(s: float | None) -> str:
    """Short duration: ``0.42s``, ``12.3s``, ``4:05``, ``1:02:03``, ``2-03:04:05``; ``-`` if unknown."""
    if s is None or (isinstance(s, float) and not math.isfinite(s)):
        return "-"
    if s < 10:
        return f"{s:.2f}s"
    if s < 60:
        return f"{s:.1f}s"
    n = int(round(s))
    d, n = divmod(n, 86400)
    h, n = divmod(n, 3600)
    m, sec = divmod(n, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _cell(text: str, width: int, align: str) -> str:
    if width == 0:
        return text
    if len(text) > width:
        text = text[: width - 1] + "+"
    return f"{text:{align}{width}}"


def format_table(rows: list[dict]) -> str:
    lines = [" ".join(_cell(name, w, a) for name, w, a in COLUMNS).rstrip()]
    for r in rows:
        vals = [
            str(r["jobid"]),
            r["user"] or "",
            r["name"] or "",
            r["state"] or "",
            str(r["gpus"]) if r["gpus"] else "-",
            ",".join(r["nodes"]) if r["nodes"] else "-",
            fmt_seconds(r["predicted"]),
            fmt_seconds(r["observed"]),
            fmt_seconds(r["wait"]),
            r["reason"] or "",
        ]
        lines.append(" ".join(_cell(v, w, a) for v, (_, w, a) in zip(vals, COLUMNS)).rstrip())
    return "\n".join(lines)


def _caller() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def resolve_db(db: str | None, config: str | None) -> Path:
    if db:
        return Path(db)
    if os.environ.get(DEFAULT_DB_ENV):
        return Path(os.environ[DEFAULT_DB_ENV])
    return Path(load_config(config).db)


def live_jobs(user: str | None, slurm: Any = None, config: str | None = None,
              why: list[str] | None = None) -> dict[str, Any] | None:
    """Slurm's current view of lyasched jobs by Slurm id, or None when Slurm does not answer (then
    ``why``, if given, gets the reason). ``slurm``: a backend or CLI runner; default the one the
    config's ``[slurm] backend`` names."""
    from lyasched.slurm import SlurmError, as_backend
    from lyasched.slurm.backend import BackendChoiceError, backend_choice, env_prefix, make_backend
    from lyasched.slurm.types import ParseError

    try:
        if slurm is not None:
            backend = as_backend(slurm)
        else:
            try:
                choice = backend_choice(load_config(config).slurm_backend)
            except ConfigError:
                choice = backend_choice()
            backend, _ = make_backend(choice, timeout=10, retries=0, prefix=env_prefix())
        try:
            return {j.job_id: j for j in backend.jobs(user=user)}
        finally:
            if slurm is None:
                backend.close()
    except (SlurmError, ParseError, BackendChoiceError) as e:
        if why is not None:
            why.append(" ".join(str(e).split()) or type(e).__name__)
        return None


def by_type(rdb: Any, summary: Any, user: str | None, config: str | None, slurm: Any = None) -> list[dict[str, Any]]:
    """The job's predicted run time for each (GPU type, count) on the cluster's typed nodes
    (lyasched.live.learning.type_predictions); [] on untyped nodes or when Slurm or the config
    does not answer (the per-count table above still holds)."""
    import sqlite3

    from lyasched.clusterview import gpu_nodes
    from lyasched.live.learning import type_predictions
    from lyasched.slurm import SlurmError, as_backend
    from lyasched.slurm.backend import BackendChoiceError, backend_choice, env_prefix, make_backend
    from lyasched.slurm.types import ParseError

    try:
        conf = load_config(config)
        if slurm is not None:
            nodes = as_backend(slurm).nodes()
        else:
            backend, _ = make_backend(backend_choice(conf.slurm_backend), timeout=10, retries=0, prefix=env_prefix())
            try:
                nodes = backend.nodes()
            finally:
                backend.close()
        nodes = gpu_nodes(nodes, conf.partition or None)
        if not any(n.gpu_type for n in nodes):
            return []
        from lyasched.clusterview import device_key

        pred = type_predictions(rdb, summary, nodes, conf, user, device_key(conf.device, nodes, table=conf.gpu_types))
    except (ConfigError, SlurmError, ParseError, BackendChoiceError, sqlite3.Error, ValueError):
        return []
    return [{"type": t, "gpus": g, "seconds": s if math.isfinite(s) else None}
            for t, per in pred.items() for g, s in sorted(per.items())]


def job_view(rec: JobRecord, live: dict | None, now: float) -> dict:
    """One job as lyastat shows it: the record, with Slurm's live state where it has one."""
    j = live.get(rec.slurm_id) if live else None
    state = j.state if j is not None else (rec.slurm_state or rec.state or "").upper()
    if j is not None and j.pending and j.held_by_service:
        state = "HELD"
    started = rec.started if rec.started is not None else (j.start_time if j is not None else None)
    submit = rec.submit_time
    if submit is None:
        wait = None
    elif started is not None:
        wait = max(0.0, started - submit)
    elif rec.state in ("waiting", "released"):
        wait = max(0.0, now - submit)
    else:
        wait = None
    return {
        "jobid": rec.slurm_id,
        "uid": rec.uid,
        "user": rec.user,
        "name": rec.name,
        "state": state,
        "lyasched_state": rec.state,
        "gpus": rec.gpus,
        "nodes": list(rec.nodes),
        "predicted": rec.best_predicted,
        "observed": rec.observed,
        "wait": wait,
        "submit_time": submit,
        "started": started,
        "ended": rec.ended,
        "reason": rec.reason,
    }


def _fail(msg: str) -> NoReturn:
    click.echo(f"lyastat: {msg}", err=True)
    sys.exit(1)


def _utf8(value: str | None, what: str) -> None:
    """Non-UTF-8 argv bytes reach us as surrogates, which SQLite cannot bind: refuse them here."""
    try:
        (value or "").encode("utf-8")
    except UnicodeEncodeError:
        _fail(f"{what} {value!r}: not a lyasched job (not valid UTF-8)")


@click.command(cls=OneLineCommand, prog="lyastat", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("jobid", required=False)
@click.option("--all", "-a", "all_users", is_flag=True, help="Jobs of every user.")
@click.option("--user", "-u", default=None, help="Jobs of this user (default: you).")
@click.option("--queue", "-q", is_flag=True, help="The scheduler's state: Q, Z, free GPUs, last slot.")
@click.option("--tenants", "-t", is_flag=True, help="Each tenant's share, GPU-time entitled and received.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--db", default=None, help="Service database (default: $LYASCHED_DB, else service.db of the config).")
@click.option("--config", default=None, help="Service config to take the database path from.")
@click.option("--no-slurm", is_flag=True, help="Records only: do not ask squeue for live states.")
def main(jobid, all_users, user, queue, tenants, as_json, db, config, no_slurm) -> None:
    """Show lyasched jobs: predicted vs observed run time, GPUs given, why waiting."""
    from lyasched.store import records

    _utf8(jobid, "job")
    _utf8(user, "user")
    try:
        path = resolve_db(db, config)
    except ConfigError as e:
        _fail(str(e))
    try:
        rdb = records.open_readonly(path)
        if "jobs" not in rdb.table_names():
            raise records.RecordsUnavailable(f"{path}: not a lyasched service database (no jobs table)")
    except records.RecordsUnavailable as e:
        _fail(str(e))
    now = time.time()

    if queue:
        show_queue(rdb, as_json)
        return
    if tenants:
        show_tenants(rdb, as_json)
        return
    if jobid:
        show_job(rdb, jobid, now, as_json, no_slurm, config)
        return
    who = None if all_users else (user or _caller())
    recs = jobrecord.jobs(rdb, user=who)
    why: list[str] = []
    live = None if no_slurm else live_jobs(who, config=config, why=why)
    if live is None and not no_slurm:  # not an empty queue: say so (--no-slurm shows the records alone)
        _fail(f"cannot read the queue from Slurm ({why[0][:300] if why else 'no answer'}); "
              "--no-slurm shows the service's records alone")
    views = [job_view(r, live, now) for r in recs]
    if as_json:
        click.echo(json.dumps({"user": who, "jobs": views}, indent=2))
    else:
        click.echo(format_table(views))


def show_tenants(rdb, as_json: bool) -> None:
    """The tenant ledger the service's last slot handed its policy (lyasched.live.tenants)."""
    from lyasched.live.tenants import META_KEY
    from lyasched.store import records

    raw = records.get_meta(rdb, META_KEY) if "meta" in rdb.table_names() else None
    book = json.loads(raw) if raw else None
    if as_json:
        click.echo(json.dumps({"tenants": book}, indent=2))
        return
    if not book or not book.get("tenants"):
        click.echo("tenants: none yet (the service tracks them once two users' jobs have been seen)")
        return
    click.echo(f"tenants at {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(book['time']))} "
               f"(GPU-hours; a share of 1 unless configured):")
    click.echo(f"  {'TENANT':<16} {'SHARE':>6} {'ENTITLED':>10} {'RECEIVED':>10} {'RATIO':>6}")
    for name, t in sorted(book["tenants"].items()):
        ratio = f"{t['received_gpu_s'] / t['entitled_gpu_s']:.2f}" if t["entitled_gpu_s"] > 0 else "-"
        click.echo(f"  {name:<16} {t['share']:>6g} {t['entitled_gpu_s'] / 3600:>10.2f} "
                   f"{t['received_gpu_s'] / 3600:>10.2f} {ratio:>6}")


def show_queue(rdb, as_json: bool) -> None:
    from lyasched.store import records

    slot = jobrecord.last_slot(rdb)
    counts = {
        st: n for st, n in rdb.execute("select state, count(*) from jobs group by state").fetchall()
    }
    out: dict[str, Any] = {
        "slots": records.slot_count(rdb),
        "last_slot": None,
        "jobs": counts,
    }
    if slot:
        out["last_slot"] = {
            "id": slot.id,
            "time": slot.time,
            "time_iso": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(slot.time)),
            "duration": slot.duration,
            "q": slot.q,
            "z": slot.z,
            "free_gpus": slot.free_gpus,
            "free": dict(slot.free),
            "waiting": slot.waiting,
            "running": slot.running,
            "started": list(slot.started),
            "policy": slot.policy,
            "error": slot.error,
        }
    out["startup"] = [t.to_dict() for t in _startup_terms(rdb)]
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not slot:
        click.echo("no slot recorded yet (is `lyasched serve` running?)")
        return
    s = out["last_slot"]
    age = time.time() - s["time"]
    free = " ".join(f"{k}={v}" for k, v in s["free"].items())
    click.echo(f"policy      {s['policy']}")
    click.echo(f"last slot   #{s['id']} at {s['time_iso']} ({fmt_seconds(age)} ago), took {s['duration'] * 1000:.0f} ms")
    click.echo(f"Q           {s['q']:.1f} s   (estimated compute time of waiting jobs)")
    click.echo(f"Z           {s['z']:.1f} s   (accumulated waiting time of waiting jobs)")
    click.echo(f"free GPUs   {s['free_gpus']}   ({free})")
    recorded = ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) + " recorded" if counts else "no job recorded"
    click.echo(f"jobs        {s['waiting']} waiting, {s['running']} running at the last slot; {recorded}")
    click.echo(f"start-up    {_startup_line(rdb)}")
    if s["error"]:
        click.echo(f"error       {s['error']}")


# ---------------------------------------------------------------- start-up term (lyasched.costmodel.startup)


def _startup_terms(rdb) -> list:
    from lyasched.costmodel import startup

    return startup.terms(rdb)


def _startup_dict(rdb) -> dict | None:
    from lyasched.costmodel import startup

    t = startup.term(rdb)
    return t.to_dict() if t else None


def _startup_line(rdb) -> str:
    """The start-up term every prediction includes (launch, imports, rendezvous)."""
    from lyasched.costmodel import startup

    t = startup.term(rdb)
    if t is None:
        return "0 s in predictions: none learned yet (jobs that report steps teach it)"
    return (f"{fmt_seconds(t.seconds)} included in predictions ({t.launcher} on {t.cluster}, median of "
            f"{t.samples} job(s))")


def adaptive_view(rdb, uid: str, summary: Any) -> dict[str, Any]:
    """An adaptive-batch job's batch as the service last read it from the job's report
    (lyasched.store.adaptive): batch, phi, statistical efficiency, base steps done."""
    from lyasched.store import adaptive as adaptive_store

    row = adaptive_store.get(rdb, uid) or {}
    return {"base_batch": summary.global_batch, "max_batch": summary.max_batch, "lr_rule": summary.lr_rule,
            "batch": row.get("batch"), "local_batch": row.get("local"), "accumulation": row.get("accum"),
            "phi": row.get("phi"), "efficiency": row.get("eff"), "base_steps": row.get("base"),
            "iterations": summary.iterations, "chosen": row.get("chosen"), "reported": row.get("reported")}


def adaptive_line(a: dict[str, Any]) -> str:
    head = f"adaptive {a['base_batch']}..{a['max_batch']} ({a['lr_rule']} learning rate)"
    if a["batch"] is None:
        chosen = f", started at {a['chosen']}" if a["chosen"] else ""
        return head + f"{chosen}; no report from the job yet"
    phi = f"{a['phi']:.4g}" if a["phi"] is not None else "not estimated yet"
    eff = f"{a['efficiency']:.3f}" if a["efficiency"] is not None else "-"
    acc = f" = {a['local_batch']} x {a['accumulation']} accumulated per GPU" if (a["accumulation"] or 1) > 1 else ""
    return (head + f": now {a['batch']}{acc}, phi {phi}, statistical efficiency {eff}, "
            f"{a['base_steps'] or 0:.1f} of {a['iterations']} base steps")


def show_job(rdb, jobid: str, now: float, as_json: bool, no_slurm: bool, config: str | None = None) -> None:
    rec = jobrecord.job_by_slurm_id(rdb, jobid) or jobrecord.job(rdb, jobid)
    if rec is None:
        _fail(f"job {jobid}: not a lyasched job in {rdb.conn.execute('pragma database_list').fetchone()[2]}")
    live = None if no_slurm else live_jobs(None, config=config)
    view = job_view(rec, live, now)
    summary = rec.cost_summary()
    profile: dict[str, Any] = summary.as_dict() if summary is not None else {}

    def _time(x: float | None) -> float | None:
        return x if x is not None and math.isfinite(x) else None

    one, multi = rec.pred_one, rec.pred_multi
    per_gpus = [
        {"gpus": g, "one_node": _time(one[g - 1]) if g - 1 < len(one) else None,
         "multi_node": _time(multi[g - 1]) if g - 1 < len(multi) else None}
        for g in range(1, max(len(one), len(multi)) + 1)
    ]
    dec: list[dict[str, Any]] = [
        {"time": d.time, "action": d.action, "gpus": d.gpus, "nodes": list(d.nodes),
         "placement": [[n, g] for n, g in d.placement.parts], "score": d.score, "predicted": d.predicted,
         "reason": d.reason}
        for d in jobrecord.decisions(rdb, rec.uid)
    ]
    mv: list[dict[str, Any]] = [{"time": m.created, "kind": m.kind, "from_gpus": m.from_gpus, "to_gpus": m.to_gpus,
           "to_placement": [[n, g] for n, g in m.to_placement.parts], "state": m.state, "step": m.step,
           "reason": m.reason, "checkpoint_step": m.ckpt_step, "cost_s": m.cost_s,
           "resolution": m.resolution} for m in jobrecord.moves(rdb, rec.uid)]  # docs/elastic.md
    batch = adaptive_view(rdb, rec.uid, summary) if summary is not None and summary.adaptive else None
    typed = by_type(rdb, summary, rec.user, config) if summary is not None and not summary.plain and not no_slurm else []
    if as_json:
        click.echo(json.dumps({**view, "profile": profile, "predicted_by_gpus": per_gpus, "predicted_by_type": typed,
                               "decisions": dec, "moves": mv,
                               "work": rec.work, "time_limit": rec.time_limit,
                               "startup": _startup_dict(rdb), "adaptive": batch}, indent=2))
        return
    click.echo(format_table([view]))
    click.echo("")
    click.echo(f"uid         {rec.uid}")
    if profile.get("plain"):  # a managed partition's job (docs/managed.md): no profile
        click.echo(f"profile     none: a plain job of a managed partition, {profile['min_gpus']} GPUs as submitted; "
                   "run time estimated from its user's similar jobs, capped at its time limit")
    elif profile:
        click.echo(f"profile     {profile['sig']}: alpha={profile['alpha']:g}s beta={profile['beta']:g}s/sample "
                   f"params={profile['params']} B={profile['global_batch']} iterations={profile['iterations']} "
                   f"GPUs {profile['min_gpus']}..{profile['max_gpus']} ({'measured' if profile['source'] == 'm' else 'estimated'})")
    click.echo(f"predicted   {fmt_seconds(view['predicted'])}   observed {fmt_seconds(view['observed'])}")
    if batch is not None:
        click.echo("batch       " + adaptive_line(batch))
    click.echo(f"start-up    {_startup_line(rdb)}")
    if per_gpus:
        allowed = [p for p in per_gpus if p["one_node"] is not None or p["multi_node"] is not None]
        click.echo("GPUS  ONE-NODE  MULTI-NODE")
        for p in allowed:
            click.echo(f"{p['gpus']:>4}  {fmt_seconds(p['one_node']):>8}  {fmt_seconds(p['multi_node']):>10}")
    if typed:
        click.echo("GPU TYPE    GPUS  PREDICTED  (each type: its learned profile, else the roofline's prediction)")
        for p in typed:
            click.echo(f"{p['type']:<10}  {p['gpus']:>4}  {fmt_seconds(p['seconds']):>9}")
    if dec:
        click.echo("decisions:")
        for d in dec:
            when = time.strftime("%H:%M:%S", time.localtime(d["time"])) if d["time"] else "?"
            where = ",".join(d["nodes"]) or "-"
            click.echo(f"  {when} {d['action']:<6} {d['gpus'] or '-'} GPUs on {where}: {d['reason']}")
    else:
        click.echo(f"decisions:  none yet ({rec.reason})")
    if mv:
        click.echo("moves (checkpoint, requeue, relaunch; cost: signal to running again):")
        for m in mv:
            when = time.strftime("%H:%M:%S", time.localtime(m["time"])) if m["time"] else "?"
            to = f"{m['to_gpus']} GPUs" if m["to_gpus"] else "suspended"
            ck = f", checkpoint at step {m['checkpoint_step']}" if m["checkpoint_step"] is not None else ""
            click.echo(f"  {when} {m['kind']:<7} {m['from_gpus']} -> {to}: {m['reason']} [{m['state']}{ck}, "
                       f"cost {fmt_seconds(m['cost_s'])}]" + (f" {m['resolution']}" if m["state"] != "done" else ""))
