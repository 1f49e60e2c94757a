"""`lyasched replay`: simulate a workload under several policies and compare them."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

import click

from lyasched.cli.nativeout import native_stdout_to_stderr
from lyasched.policy import DEFAULT_POLICIES, POLICIES, make_policy
from lyasched.policy.params import ParamError
from lyasched.policy.params import parse_params as _parse


def parse_params(items: tuple[str, ...], policies: list[str]) -> dict[str, dict[str, Any]]:
    """``KEY=VALUE`` or ``POLICY.KEY=VALUE`` (lyasched.policy.params); a bad one is a usage error."""
    try:
        return _parse(items, policies)
    except ParamError as e:
        raise click.BadParameter(str(e), param_hint="--param") from None


def parse_liars(text: str) -> dict[str, float]:
    """``user3=0.01,user5=0.5`` -> {user: claim multiplier}; a usage error on anything else."""
    out: dict[str, float] = {}
    for item in text.split(","):
        user, sep, x = item.strip().partition("=")
        try:
            v = float(x)
        except ValueError:
            v = math.nan
        if not sep or not user.strip() or not (v > 0 and math.isfinite(v)):
            raise click.BadParameter(f"expected USER=X with X > 0, got {item.strip()!r}", param_hint="--liars")
        out[user.strip()] = v
    return out


def _fmt_table(workload: str, summary: dict, info: str) -> str:
    cols = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_wait_s", "max_wait_s", "makespan_s", "avg_slowdown", "gpu_util",
            "gpu_s_vs_best", "idle_fit_frac", "fewer_gpus", "more_gpus", "wall_s")
    heads = ("policy", "avg JCT s", "p50 JCT s", "p99 JCT s", "avg wait s", "max wait s", "makespan s", "slowdown", "util",
             "GPU-s/best", "idle fit", "fewer", "more", "sim s")
    rows = []
    for name, s in summary["policies"].items():
        if s.get("failed"):
            rows.append([name, f"FAILED: {s['unfinished']} of {summary['jobs']} jobs never finish"] + [""] * (len(cols) - 1))
            continue
        row = [name]
        for c in cols:
            v = s[c]
            row.append(f"{v:.2f}" if c in ("avg_slowdown", "gpu_util", "wall_s", "gpu_s_vs_best", "idle_fit_frac", "fewer_gpus", "more_gpus") else f"{v:.0f}")
        rows.append(row)
    rows.append(["lower bound", f"{summary['lower_bound']['avg_jct_s']:.0f}"] + [""] * (len(cols) - 1))
    widths = [max(len(h), *(len(r[i]) for r in rows if not r[1].startswith("FAILED"))) for i, h in enumerate(heads)]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([f"{workload}: {info}", line(heads), *(line(r) for r in rows)])


EXIT_UNFINISHED = 3  # a policy left jobs that never finish; the others' results were printed


def _in_order(names: list[str], results: list) -> list[tuple[str, Any]]:
    """(policy, its result or None when it failed) in the order the policies were named."""
    got = {r.policy: r for r in results}
    return [(n, got.get(n)) for n in names]


def _with_tenants(figures: dict, tenants: tuple[dict, dict]) -> dict:
    """A policy's figures with its per-tenant ones (tenant = the job's user; docs/model.md, section 5)."""
    return {**figures, "tenants": tenants[0], "fairness": tenants[1]}


@click.command("replay")
@click.option("--workload", "-w", required=True, help="Built-in group (seed-small-scattered, seed-small-bursty, seed-large-scattered, seed-large-bursty), a synthetic workload synth:[PRESET,]KEY=VALUE,... (docs/simulator.md) or a CSV trace path.")
@click.option("--policies", "-p", default=None, help="Comma-separated policy names (default: all registered but the srpt-oracle reference).")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Cluster nodes (default: the workload's cluster, or sized by --load).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None, help="GPUs per node (default: 4/8 for built-ins, 8 for traces).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload, the estimate errors and random policies.")
@click.option("--load", type=click.FloatRange(min=0, min_open=True), default=None, help="Size the cluster for this offered load when --nodes is not given (traces: default 0.8).")
@click.option("--slot", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True, help="Slot length in seconds: policies decide at slot boundaries.")
@click.option("--estimate-error", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Sigma of log(true/predicted run time); 0 = exact predictions.")
@click.option("--restart-overhead", type=click.FloatRange(min=0), default=30.0, show_default=True, help="Seconds a preempted job loses when it restarts.")
@click.option("--checkpointable", type=click.Choice(["all", "declared", "none"]), default="all", show_default=True, help="Jobs preemptive and elastic policies may move: all (traces declare nothing), those declared checkpointable, or none.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None, help="Only the first N jobs (by submit time).")
@click.option("--start", type=click.FloatRange(min=0), default=None, help="Window start, seconds after the first submission.")
@click.option("--end", type=click.FloatRange(min=0), default=None, help="Window end, seconds after the first submission.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write per-job CSVs, summary.json and PNG plots here.")
@click.option("--param", "params", multiple=True, metavar="[POLICY.]KEY=VALUE", help="Policy parameter, e.g. V=1e4 or lyapunov.V=1e4 (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of the table.")
@click.option("--profiles", type=click.Path(file_okay=False), default=None, help="Pollux-format workload (name,time,application,num_replicas,batch_size): the directory of the applications' measured profiles (placements.csv, scalability.csv, validation-<batch>.csv).")
@click.option("--cluster", "cluster_shape", default=None, metavar="NODESxGPUS|TYPE:NODESxGPUS,...", help="The cluster, e.g. 16x4 (with --profiles, default 16x4), or typed node groups, e.g. a100:2x8,rtx2080ti:3x8,t4:6x4 (the Pollux profiles are T4's, the model library's V100's; docs/simulator.md, \"GPU types\").")
@click.option("--liars", default=None, metavar="USER=X[,USER=X]", help="Multiply these users' claimed (predicted) run times by X, e.g. user3=0.01; their true run times are unchanged.")
@click.option("--no-trust", is_flag=True, help="Show claims as they are: no per-user observed/predicted trust factor (docs/estimates.md).")
@click.option("--fixed-batch", is_flag=True, help="With --profiles: every job trains at its row's batch (Tiresias+TunedJobs), not adaptive.")
def replay(workload, policies, nodes, gpus_per_node, seed, load, slot, estimate_error, restart_overhead, checkpointable,
           max_jobs, start, end, out_dir, params, as_json, profiles=None, cluster_shape=None, fixed_batch=False,
           liars=None, no_trust=False) -> None:
    """Replay WORKLOAD under each policy in a simulated cluster and compare JCT, waits and utilisation."""
    from lyasched.sim import InvalidDecision, Simulation, Unfinished
    from lyasched.sim.fairness import tenant_summary
    from lyasched.sim.metrics import lower_bound, summarize, write_jobs_csv
    from lyasched.sim.workloads import TraceError, load_workload

    names = [p.strip() for p in policies.split(",") if p.strip()] if policies else list(DEFAULT_POLICIES)
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise click.BadParameter(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}", param_hint="--policies")
    if not names:
        raise click.BadParameter("no policy given", param_hint="--policies")
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is named twice", param_hint="--policies")
    if start is not None and end is not None and end <= start:
        raise click.BadParameter("--end must be after --start", param_hint="--end")
    pparams = parse_params(params, names)
    typed, measured = None, None
    liar_map = parse_liars(liars) if liars else None
    if out_dir and os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise click.BadParameter(f"{out_dir} exists and is not a directory", param_hint="--out")

    if fixed_batch and not profiles:
        raise click.BadParameter("needs --profiles", param_hint="--fixed-batch")
    try:
        if profiles:
            from lyasched.sim.hetero import TypedCluster, parse_cluster_spec
            from lyasched.sim.pollux_trace import measured_types, pollux_workload

            try:
                shape = parse_cluster_spec(cluster_shape) if cluster_shape else (nodes or 16, gpus_per_node or 4)
            except ValueError as e:
                raise click.UsageError(str(e)) from None
            if isinstance(shape, TypedCluster):
                typed = shape
                shape = (typed.nodes, max(typed.node_gpus))
                w = pollux_workload(workload, profiles, *shape, adaptive=not fixed_batch, max_jobs=max_jobs)
                measured = measured_types(profiles, {j.profile.model for j in w.jobs}, typed.types)
            else:
                w = pollux_workload(workload, profiles, *shape, adaptive=not fixed_batch, max_jobs=max_jobs)
        else:
            if cluster_shape:  # the model library's profiles are V100 figures (lyasched.sim.models)
                from lyasched.sim.hetero import TypedCluster, parse_cluster_spec

                try:
                    shape = parse_cluster_spec(cluster_shape, base="v100")
                except ValueError as e:
                    raise click.UsageError(str(e)) from None
                if isinstance(shape, TypedCluster):
                    typed = shape
                    nodes, gpus_per_node = typed.nodes, max(typed.node_gpus)
                else:
                    nodes, gpus_per_node = shape
            w = load_workload(workload, seed=seed, nodes=nodes, gpus_per_node=gpus_per_node, load=load,
                              max_jobs=max_jobs, start=start, end=end)
        sim = Simulation(w.jobs, w.cluster, slot_len=slot, estimate_error=estimate_error, seed=seed,
                         restart_overhead=restart_overhead, end_fraction=w.end_fraction, checkpointable=checkpointable,
                         liars=liar_map, trust=not no_trust, typed=typed, gpu_types=w.gpu_types if typed else None,
                         measured=measured, constraints=w.constraints)
        if w.gpu_types and typed is None:
            raise ValueError(f"{w.name}: jobs limit GPU types (gpu_types column): give a typed --cluster, e.g. a100:2x8,t4:6x4")
        built = [(n, make_policy(n, seed=seed, **pparams[n])) for n in names]
        if liar_map and (absent := sorted(set(liar_map) - {j.user for j in w.jobs})):
            raise click.BadParameter(f"no job of user {', '.join(absent)} in the workload", param_hint="--liars")
    except (TraceError, ValueError, TypeError) as e:
        raise click.ClickException(str(e).splitlines()[0]) from None

    results = []
    failed: dict[str, dict] = {}
    for n, pol in built:
        try:  # progress on stderr: a bar on a terminal, a line a minute otherwise
            with native_stdout_to_stderr():  # a solver's printf never lands in the --json document
                results.append(sim.run(pol, progress=True, name=n))
        except Unfinished as e:  # reported with the others' results; exit 3 at the end
            click.echo(f"Error: {str(e).splitlines()[0]}", err=True)
            failed[n] = {"failed": True, "unfinished": e.left, "error": str(e).splitlines()[0]}
        except (InvalidDecision, RuntimeError) as e:
            raise click.ClickException(str(e).splitlines()[0]) from None

    c = w.cluster
    summary = {
        "workload": w.name,
        "jobs": len(w.jobs),
        "cluster": {"nodes": c.nodes, "gpus_per_node": c.gpus_per_node, "total_gpus": c.total_gpus,
                    "intra_bw": c.intra.bandwidth, "inter_bw": c.inter.bandwidth},
        "seed": seed,
        "slot_s": slot,
        "estimate_error": estimate_error,
        "liars": liar_map or {},
        "trust": not no_trust,
        "params": {n: p for n, p in pparams.items() if p},
        "policies": {n: failed[n] if n in failed else _with_tenants(summarize(r), tenant_summary(r))
                     for n, r in _in_order(names, results)},
        "lower_bound": lower_bound(sim.best_true_runs()),
    }
    if typed is not None:
        summary["cluster"].update(gpu_types=typed.describe(), total_gpus=typed.total_gpus)
        for n, r in _in_order(names, results):
            summary["policies"][n]["type_violations"] = r.type_violations
    if out_dir:
        from lyasched.sim.plots import write_all

        os.makedirs(out_dir, exist_ok=True)
        for r in results:
            with open(os.path.join(out_dir, f"jobs_{r.policy}.csv"), "w", newline="") as f:
                write_jobs_csv(r, f)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        if results:
            write_all(results, out_dir)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        shape_text = typed.describe() if typed is not None else f"{c.nodes}x{c.gpus_per_node}"
        info = (f"{len(w.jobs)} jobs on {shape_text} GPUs, seed {seed}, slot {slot:g}s, "
                f"estimate error {estimate_error:g}")
        click.echo(_fmt_table(w.name, summary, info))
        if out_dir:
            click.echo(f"wrote {out_dir}/: jobs_<policy>.csv, summary.json, jct_cdf.png, queues.png, utilization.png")
    if failed:
        sys.exit(EXIT_UNFINISHED)
