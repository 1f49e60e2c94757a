"""`lyasched whatif`: replay the site's Slurm accounting history under lyasched and the
baselines, and compare with what actually happened. Thin over `lyasched.whatif`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import click
import numpy as np

from lyasched.cli.errors import BadInput
from lyasched.cli.replay import parse_params
from lyasched.policy import POLICIES


def _say(msg: str) -> None:
    click.echo(f"whatif: {msg}", err=True)


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise BadInput(f"{path} line {line}: not UTF-8 text (byte {data[e.start]:#04x}); not sacct output?") from None


def _write_atomic(path: str, text: str) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".whatif-", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the report is for sharing
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@click.command("whatif")
@click.option("--sacct", "sacct_file", type=click.Path(dir_okay=False), default=None,
              help="Saved output of sacct --parsable2 --allusers --allocations --duplicates --format=... (docs/whatif.md).")
@click.option("--since", default=None, help="Read sacct on this cluster from this time (sacct --starttime: 2026-10-01, now-30days).")
@click.option("--until", default=None, help="With --since: up to this time (sacct --endtime; default now).")
@click.option("--partition", default=None, help="Only jobs of this partition (and, with --since, its nodes).")
@click.option("--policies", "-p", default=None,
              help="Comma-separated policy names, run and shown as given (default: lyapunov, backfill and the best of "
                   "fifo/tiresias/optimus on this history).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Replay cluster nodes (default: scontrol show node with --since, else inferred from the records; "
                   "needed when the records have no NodeList and scontrol is not there).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None, help="Replay cluster GPUs per node (default: as --nodes).")
@click.option("--cluster", "cluster_spec", default=None, metavar="TYPE:NODESxGPUS,...",
              help="Replay on these typed node groups, e.g. a100:2x8,t4:6x4 (default: the site's typed nodes from "
                   "scontrol show node, when its GPUs are typed): each job runs as recorded on the GPU type it had "
                   "(AllocTRES), and only on the type its request named, if any (docs/whatif.md, \"GPU types\").")
@click.option("--slot", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True, help="Slot length in seconds.")
@click.option("--estimate-error", type=click.FloatRange(min=0), default=0.2, show_default=True,
              help="With --rigid or --elastic: sigma of log(recorded/predicted run time) the policies face; 0 = exact "
                   "predictions.")
@click.option("--managed", is_flag=True,
              help="The default view, what the site would get: every job on its recorded GPU count, and every policy "
                   "sees its run time as estimated from the jobs that ended before it arrived (docs/estimates.md); "
                   "backfill is shown planning with these estimates and with the time limits.")
@click.option("--rigid", is_flag=True,
              help="Every job on its recorded GPU count, run times predicted with --estimate-error's error.")
@click.option("--elastic", is_flag=True,
              help="Every job treated as elastic data-parallel training: policies may give it another GPU count "
                   "(1 to max(recorded, GPUs per node)); run times predicted with --estimate-error's error.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the job profiles, estimate errors and random policies.")
@click.option("--param", "params", multiple=True, metavar="[POLICY.]KEY=VALUE", help="Policy parameter, as for lyasched replay (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write report.html (self-contained) and summary.json here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of the tables.")
def whatif(sacct_file, since, until, partition, policies, nodes, gpus_per_node, cluster_spec, slot, estimate_error,
           managed, rigid, elastic, seed, params, out_dir, as_json) -> None:
    """Replay the site's accounting history under each policy and compare with what happened."""
    from lyasched.sim import InvalidDecision
    from lyasched.slurm import SlurmError
    from lyasched.whatif import live
    from lyasched.whatif import policies as defaults
    from lyasched.whatif.cluster import ClusterUnknown, choose_cluster, has_node_names
    from lyasched.whatif.history import build_history
    from lyasched.whatif.metrics import actual_outcome, policy_outcome
    from lyasched.whatif.metrics import summary as metrics_summary
    from lyasched.whatif.replay import HistoryTooBig, replay_history
    from lyasched.whatif.report import build_summary, format_tables
    from lyasched.slurm.sacct import SacctError, parse_sacct

    if (sacct_file is None) == (since is None):
        raise click.UsageError("give either --sacct FILE or --since DATE")
    if until is not None and since is None:
        raise click.BadParameter("--until needs --since", param_hint="--until")
    named = policies is not None
    if managed + rigid + elastic > 1:
        raise click.UsageError("give one of --managed (the default), --rigid, --elastic")
    view = "elastic" if elastic else "rigid" if rigid else "managed"
    managed, rigid = view == "managed", view != "elastic"
    if managed:
        given = click.get_current_context().get_parameter_source("estimate_error")
        if given is not None and given.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise click.BadParameter("applies with --rigid or --elastic only (the default view, --managed, shows each "
                                     "job's run time as estimated from the jobs that ended before it)",
                                     param_hint="--estimate-error")
        estimate_error = 0.0
    default = defaults.managed_policies() if managed else defaults.default_policies()
    names = [p.strip() for p in policies.split(",") if p.strip()] if named else default
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise click.BadParameter(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}", param_hint="--policies")
    if not names or len(set(names)) != len(names):
        raise click.BadParameter("give each policy once", param_hint="--policies")
    pparams = parse_params(params, names)
    if cluster_spec is not None:
        if nodes is not None or gpus_per_node is not None:
            raise click.UsageError("give either --cluster or --nodes/--gpus-per-node")
        from lyasched.sim.hetero import TypedCluster, parse_cluster_spec
        from lyasched.whatif.typed import BASE

        try:
            if not isinstance(parse_cluster_spec(cluster_spec, base=BASE), TypedCluster):
                raise ValueError(f"--cluster {cluster_spec!r}: expected typed node groups TYPE:NODESxGPUS,..., e.g. "
                                 "a100:2x8,t4:6x4 (--nodes and --gpus-per-node give an untyped cluster)")
        except ValueError as e:
            raise BadInput(str(e)) from None
    if out_dir and os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise click.BadParameter(f"{out_dir} exists and is not a directory", param_hint="--out")

    slurm = None
    if sacct_file is not None:
        source = sacct_file
        _say(f"reading {sacct_file}")
        text = _read_file(sacct_file)
    else:
        source = f"sacct --starttime={since}" + (f" --endtime={until}" if until else "") + (f" --partition={partition}" if partition else "")
        slurm = live.make_backend()
        _say(f"running {source}")
        try:
            text = live.read_sacct(slurm, since, until, partition)
        except (SlurmError, live.AccountingOff) as e:
            raise click.ClickException(str(e).strip().splitlines()[0]) from None
    try:
        parsed = parse_sacct(text, source)
    except SacctError as e:
        raise BadInput(str(e)) from None
    hist = build_history(parsed.records, partition)
    c = hist.counts
    _say(f"read {len(parsed.records)} allocation records ({parsed.steps} step lines skipped): {c['gpu']} finished GPU jobs")
    if not hist.jobs:
        raise BadInput(f"{source}: no finished GPU job to replay ({len(parsed.records)} records: {c['cpu_only']} CPU-only, "
                        f"{c['cancelled_before_start']} cancelled before start, {c['still_running']} still running, "
                        f"{c['pending']} pending, {c['other_partition']} in other partitions)")

    scontrol = None
    if slurm is not None:
        scontrol = lambda: live.read_cluster(slurm, partition)  # noqa: E731
    elif not has_node_names(hist.jobs) and shutil.which("scontrol"):  # a saved file without NodeList, on a Slurm host
        scontrol = lambda: live.read_cluster(live.node_backend(), partition)  # noqa: E731
    try:
        if cluster_spec is not None:  # the typed groups given: nothing to infer or ask scontrol
            from lyasched.costmodel.cost import ClusterSpec
            from lyasched.whatif.cluster import SiteCluster

            site = SiteCluster(ClusterSpec(nodes=1, gpus_per_node=1), "options", "given: --cluster")
        else:
            site = choose_cluster(hist.jobs, nodes, gpus_per_node, scontrol, say=_say, source=source)
    except ClusterUnknown as e:
        raise BadInput(str(e)) from None
    typed = None
    if cluster_spec is not None or (site.typed and nodes is None and gpus_per_node is None):
        from dataclasses import replace as _replace

        from lyasched.whatif.typed import typed_site

        try:  # a typo, an unknown type, a job its recorded type's nodes cannot hold (one that mixed types)
            typed = typed_site(hist.jobs, cluster_spec or site.typed)
        except ValueError as e:
            if cluster_spec is not None:
                raise BadInput(str(e)) from None
            _say(f"the site's GPU types {site.typed} cannot be replayed as typed ({e}); replaying them as one type")
        if typed is not None:
            how = "given: --cluster" if cluster_spec is not None else site.how
            site = _replace(site, spec=typed.spec, how=how, typed=typed.cluster.describe())
    if typed is not None:
        _say(f"cluster {typed.cluster.describe()} ({typed.cluster.total_gpus} GPUs): {site.how}; each job runs on "
             "the GPU type it had, as recorded")
    else:
        _say(f"cluster {site.spec.nodes} x {site.spec.gpus_per_node} GPUs: {site.how}"
             + (f"; GPU types {site.typed}" if site.typed else ""))

    est_figures = None
    try:
        if managed:
            from lyasched.estimates.sacct import names_by_line
            from lyasched.whatif import managed as mg

            ests = mg.history_estimates(hist.jobs, names_by_line(parsed.records))
            est_figures = mg.estimate_figures(hist.jobs, ests)
            _say(mg.describe_estimates(est_figures))
            rep = mg.replay_managed(hist.jobs, site.spec, ests, names, pparams, slot=slot, seed=seed,
                                    progress=sys.stderr.isatty(), say=_say, typed=typed)
        else:
            rep = replay_history(hist.jobs, site.spec, names, pparams, slot=slot, estimate_error=estimate_error, seed=seed,
                                 rigid=rigid, progress=sys.stderr.isatty(), say=_say, typed=typed)
    except HistoryTooBig as e:
        raise BadInput(str(e)) from None
    except (InvalidDecision, RuntimeError, TypeError, ValueError) as e:
        raise click.ClickException(str(e).splitlines()[0]) from None

    n = len(hist.jobs)
    outcomes = [actual_outcome(hist.jobs, typed.cluster.total_gpus if typed is not None else site.spec.total_gpus)]
    outcomes += [policy_outcome(r, rep.index, n) for r in rep.results]
    choice = None
    if not named and not managed:  # the default set: show the best candidate only, and say how it was picked
        recorded = np.array([j.gpus for j in hist.jobs], dtype=int)
        users = [j.user for j in hist.jobs]
        choice = defaults.pick_best({o.name: metrics_summary(o, recorded, users) for o in outcomes[1:]
                                     if o.name in defaults.CANDIDATES})
        outcomes = [o for o in outcomes if o.name not in defaults.CANDIDATES or o.name == choice["chosen"]]
        _say(f"best other baseline by average JCT: {choice['chosen']} (of {', '.join(choice['candidates'])})")
    labels = defaults.labels([o.name for o in outcomes[1:]], choice["chosen"] if choice else None, managed=managed)
    summary = build_summary(source, hist, parsed.steps, site, outcomes, slot=slot, estimate_error=estimate_error,
                            seed=seed, params=pparams, view=view, missing=parsed.missing, labels=labels,
                            choice=choice, managed=est_figures)
    for a in summary["assumptions"]:
        _say(f"assumed: {a['text']}")
    if out_dir:
        from lyasched.whatif.html import render

        _say("plotting the report")
        page = render(summary, outcomes)  # everything computed before the first file is written
        os.makedirs(out_dir, exist_ok=True)
        _write_atomic(os.path.join(out_dir, "summary.json"), json.dumps(summary, indent=2, ensure_ascii=False))
        _write_atomic(os.path.join(out_dir, "report.html"), page)
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False))
    else:
        click.echo(format_tables(summary))
        if out_dir:
            click.echo(f"wrote {out_dir}/report.html and {out_dir}/summary.json")
