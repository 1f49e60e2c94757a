"""Why sia beats elastic on benchmarks/heterogeneous.py's design set (docs/results.md, "GPU types").

    python benchmarks/experiments/sia_gap.py [--policies elastic,sia,...] [--workloads 1,2,3,4]
        [--set design|heldout] [--json]
    python benchmarks/experiments/sia_gap.py --table --policies elastic,elastic-tm

Per policy and workload, from one replay each (the benchmark's own workloads, types and seed):

* average JCT split into waiting (no GPUs), running (computing) and restart (the move cost each
  segment after a checkpoint pays), in hours; checkpoints per job;
* GPUs per job (GPU-seconds over running seconds, mean over jobs) and each type's share of the
  GPU-seconds and its busy fraction over the makespan;
* JCT by application and by requested size (the trace's replicas: 1, 2-4, 5+), to see who loses.

Variants of sia (here only, to find which of its parts gives the gain; ``--policies``):

* ``sia-r360``: a round every 360 s instead of 60 (less re-planning);
* ``sia-keep``: a running job may keep its configuration or be suspended, never resized or moved
  (no re-planning of running jobs: counts and types fixed at the start);
* ``sia-req``: each job's configurations only at its requested count (or the nearest one the
  artifact's set allows below it): no GPU-count choice;
* ``sia-blind``: each type's configurations scored with the job's rows on its own (fastest) type,
  so the program does not see the types' speeds (no type choice by normalised goodput).

A design for elastic that takes sia's main gain, measured and not adopted (docs/experiments.md,
"Elastic moving running jobs across GPU types"): ``elastic-tm-any`` moves a running checkpointable
job onto one node of another type whose GPUs the slot left free, when its predicted time left
there (rows from when it last waited, scaled) plus its move cost beats its time left where it is;
``elastic-tm`` only onto types where no waiting job still queues. ``--table`` runs docs/types.md's
generalisation table for them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from heterogeneous import ROOT, SETS, _fits, allowed_types  # noqa: E402

from lyasched.cli.nativeout import native_stdout_to_stderr  # noqa: E402
from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.bytype import TypeMemo, _queues  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.state import Decision, SlotResult, SlotState  # noqa: E402
from lyasched.policy.typemoves import least_left, left_alone, left_free, rows_now, take  # noqa: E402
from lyasched.policy.sia import SiaPolicy  # noqa: E402
from lyasched.sim.hetero import TypedCluster, parse_cluster_spec  # noqa: E402
from lyasched.sim.pollux_trace import measured_types, pollux_workload  # noqa: E402
from lyasched.sim.simulator import Simulation  # noqa: E402


@dataclass
class SiaR360(SiaPolicy):
    round_s: float = 360.0
    name: str = "sia-r360"


@dataclass
class SiaKeep(SiaPolicy):
    name: str = "sia-keep"

    def _running_options(self, r, k, node_type, gpn, nodes, now):  # type: ignore[no-untyped-def]
        e, opts = super()._running_options(r, k, node_type, gpn, nodes, now)
        return e, [o for o in opts if o.keep]


@dataclass
class SiaReq(SiaPolicy):
    name: str = "sia-req"
    _want: dict = field(default_factory=dict, init=False, repr=False)

    def decide(self, state):  # type: ignore[no-untyped-def]
        self._want = {w.job_id: w.requested_gpus for w in state.waiting}
        return super().decide(state)

    def _solve(self, entries, options, types, room, whole, gpn):  # type: ignore[no-untyped-def]
        """Each job's options on a type cut to one count: its request's (the largest allowed at
        most its request, else the smallest); a running job its current count."""
        by: dict = defaultdict(list)
        for o in options:
            by[(o.job, o.gtype)].append(o)
        kept = []
        for (j, _t), opts in by.items():
            e = entries[j]
            want = e.running.gpus if e.running is not None else self._want.get(e.job_id, 1)
            counts = [o.gpus for o in opts]
            g = max([c for c in counts if c <= want], default=min(counts))
            kept.extend(o for o in opts if o.gpus == g)
        return super()._solve(entries, kept, types, room, whole, gpn)


@dataclass
class SiaBlind(SiaPolicy):
    name: str = "sia-blind"

    def decide(self, state):  # type: ignore[no-untyped-def]
        from dataclasses import replace
        if state.node_types:
            ws = []
            for w in state.waiting:
                if w.by_type:
                    ws.append(replace(w, by_type={t: replace(v, run_one_node=w.run_one_node, run_multi_node=w.run_multi_node)
                                                  for t, v in w.by_type.items()}))
                else:
                    ws.append(w)
            state = replace(state, waiting=tuple(ws))
        return super().decide(state)

    def _cross_type(self, r, t, left, gpn):  # type: ignore[no-untyped-def]
        seen = super()._cross_type(r, t, left, gpn)
        own = seen and self._seen.get(r.job_id, {}).get(t)
        return {u: own for u in seen} if own else {}


@dataclass
class ElasticTM(ElasticPolicy):
    """elastic, then `_type_moves` on a typed slot: running jobs moved onto another type's GPUs
    that the slot left free, only on types where no waiting job still queues (``any``: on every
    type, the first version)."""

    tm_mode: str = "idle"
    type_moves: bool = False  # elastic's shipped moves across types (typemoves.py) off: these variants replace them
    name: str = "elastic-tm"

    def decide(self, state):  # type: ignore[no-untyped-def]
        res = super().decide(state)
        memo = vars(self).get("_type_memo")
        if not state.node_types or not state.running or not self.types_aware or not isinstance(memo, TypeMemo):
            return res
        types = tuple(dict.fromkeys(state.node_types))
        sel = memo.select(state.waiting, types)
        joins = (memo.best[sel] < math.inf) & _queues(memo, sel, state)
        started = {d.job_id for d in res.starts}
        joins[[w.job_id in started for w in state.waiting]] = False
        queued = set() if self.tm_mode in ("any", "same") else {t for k, t in enumerate(types) if bool(joins[:, k].any())}
        more, gone = _type_moves(self, state, memo, res, queued)
        if not more:
            return res
        info = dict(res.info)
        info.pop("wake_at", None)
        info["type_moves"] = len(more)
        return SlotResult(starts=tuple(res.starts) + tuple(more), preempt=tuple(res.preempt) + tuple(gone),
                          q=res.q, z=res.z, info=info)


@dataclass
class ElasticTMAny(ElasticTM):
    tm_mode: str = "any"
    name: str = "elastic-tm-any"


def _type_moves(policy: Any, state: SlotState, memo: TypeMemo, res: SlotResult,
                queued: set[str]) -> tuple[list[Decision], list[str]]:
    """The first version of elastic's moves across types (`typemoves.type_moves`, whose pieces it
    shares), differing in: any running job moves, whatever its last start or move and its move
    cost; no move onto a type in ``queued``; with ``tm_mode`` "same" at no more GPUs than it holds;
    each on the node of the type with most free GPUs (not the placement rule's fullest)."""
    running = {r.job_id: r for r in state.running}
    free, touched = left_free(state, res, running)
    types = state.node_types
    default = float(getattr(policy, "move_cost", 30.0))
    cands: list[tuple[float, str, str, int]] = []  # (-gain, job, type, count)
    for r in left_alone(state, touched):
        seen = rows_now(memo, types, r)
        if seen is None:
            continue
        u, left, scale, rows = seen
        cost = r.cost(default)
        for t, v in rows.items():
            if t == u or t in queued:
                continue
            room = max((free[n] for n, x in enumerate(types) if x == t), default=0)
            if room <= 0:
                continue
            if getattr(policy, "tm_mode", "") == "same":  # never more GPUs than it holds
                room = min(room, r.gpus)
            est, g = least_left(v.run_one_node, room, scale, cost)
            if est < left:
                cands.append((est - left, r.job_id, t, g))

    def most_free(t: str, g: int) -> tuple[tuple[int, int], ...] | None:
        nodes = [n for n, x in enumerate(types) if x == t and free[n] >= g]
        return ((max(nodes, key=lambda k: (free[k], -k)), g),) if nodes else None

    return take(cands, running, free, most_free)


@dataclass
class ElasticTMSame(ElasticTM):
    """elastic-tm-any, at no more GPUs than the job holds."""

    tm_mode: str = "same"
    name: str = "elastic-tm-same"


VARIANTS = {"elastic-tm": ElasticTM, "elastic-tm-any": ElasticTMAny, "elastic-tm-same": ElasticTMSame, "sia-r360": SiaR360, "sia-keep": SiaKeep, "sia-req": SiaReq, "sia-blind": SiaBlind}


def policy(name: str):  # type: ignore[no-untyped-def]
    """A variant here, one of type_replan.py's (``elastic-rp...``, ``elastic-nomoves``), or a registered policy."""
    sys.path.insert(0, HERE)
    from type_replan import VARIANTS as REPLAN
    if name in REPLAN:
        return REPLAN[name]()
    return VARIANTS[name]() if name in VARIANTS else make_policy(name)


def build(set_name: str, k: int, seed: int = 0) -> tuple[Simulation, TypedCluster]:
    """The benchmark's simulation of workload k (adaptive jobs, its allowed-types rule)."""
    spec, _ = SETS[set_name]
    typed = parse_cluster_spec(spec)
    assert isinstance(typed, TypedCluster)
    path = os.path.join(ROOT, "workloads", f"workload-{k}.csv")
    w = pollux_workload(path, os.path.join(ROOT, "traces"), typed.nodes, max(typed.node_gpus), adaptive=True)
    wf = pollux_workload(path, os.path.join(ROOT, "traces"), typed.nodes, max(typed.node_gpus), adaptive=False)
    measured = measured_types(os.path.join(ROOT, "traces"), {j.profile.model for j in w.jobs}, typed.types)
    probe = Simulation(w.jobs[:1], w.cluster, typed=typed, measured=measured)
    fixed = {j.job_id: j for j in wf.jobs}
    gt = allowed_types(w.jobs, typed, lambda job, want: bool(_fits(probe, job, want))
                       and bool(_fits(probe, fixed[job.job_id], want)))
    return Simulation(w.jobs, w.cluster, typed=typed, gpu_types=gt, measured=measured, seed=seed), typed


def size_class(g: int) -> str:
    return "1" if g <= 1 else "2-4" if g <= 4 else "5+"


def analyse(sim: Simulation, typed: TypedCluster, name: str) -> dict:
    landed: dict[int, list[str]] = defaultdict(list)
    orig = sim._landing

    def hook(i, placement, g, spans):  # type: ignore[no-untyped-def]
        out = orig(i, placement, g, spans)
        landed[i].append(out[0])
        return out
    sim._landing = hook  # type: ignore[method-assign]
    try:
        res = sim.run(policy(name), name=name)
    finally:
        del sim._landing
    h = 3600.0
    recs = res.records
    jct = np.array([r.jct for r in recs]) / h
    over = np.array([sum(s.overhead for s in r.segments) for r in recs]) / h
    run = np.array([r.run_s for r in recs]) / h - over
    wait = jct - run - over
    gpus = np.array([r.gpu_s / r.run_s if r.run_s > 0 else 0.0 for r in recs])
    span = res.makespan
    t0 = res.first_submit
    per_type = {t: 0.0 for t in typed.types}
    for i, r in enumerate(recs):  # records are in sim.jobs' order
        for s, t in zip(r.segments, landed[i]):
            per_type[t] += (s.end - s.start) * s.gpus
    cap = {g.gpu_type: g.nodes * g.gpus_per_node for g in typed.groups}
    by_app: dict[str, list[float]] = defaultdict(list)
    by_size: dict[str, list[float]] = defaultdict(list)
    for r, j in zip(recs, jct):
        by_app[r.job.profile.model].append(float(j))
        by_size[size_class(r.job.requested_gpus)].append(float(j))
    return {
        "avg_jct_h": float(jct.mean()), "wait_h": float(wait.mean()), "run_h": float(run.mean()),
        "restart_h": float(over.mean()), "checkpoints_per_job": float(np.mean([r.preemptions for r in recs])),
        "gpus_per_job": float(gpus.mean()), "makespan_h": span / h,
        "type_gpu_share": {t: v / max(1e-9, sum(per_type.values())) for t, v in per_type.items()},
        "type_busy": {t: per_type[t] / (cap[t] * span) for t in typed.types},
        "busy_frac": res.busy_gpu_s / (typed.total_gpus * span),
        "sum_jct_by_app_h": {a: float(np.sum(v)) for a, v in sorted(by_app.items())},
        "sum_jct_by_size_h": {a: float(np.sum(v)) for a, v in sorted(by_size.items())},
        "jobs_by_app": {a: len(v) for a, v in sorted(by_app.items())},
        "decide_s": round(res.decide_s, 2), "t0": t0,
        "type_violations": res.type_violations,
    }


def table(names: list[str]) -> dict:
    """docs/types.md's generalisation table (type_choice.py's clusters and workloads) for ``names``
    against elastic-unaware: where ``elastic-tm`` must not lose."""
    from click.testing import CliRunner

    from lyasched.cli import main as cli
    from lyasched.policy import POLICIES

    sys.path.insert(0, HERE)
    from type_choice import TABLE_CLUSTERS, TABLE_WORKLOADS

    for n in names:
        if n in VARIANTS:
            POLICIES[n] = f"sia_gap:{VARIANTS[n].__name__}"
    pols = [*names, "elastic-unaware"]
    out: dict = {}
    for c in TABLE_CLUSTERS:
        for w in TABLE_WORKLOADS:
            r = CliRunner().invoke(cli, ["replay", "-w", w, "--cluster", c, "--policies", ",".join(pols), "--json"])
            if r.exit_code != 0:
                raise SystemExit(f"replay {w} {c}: {r.output[-500:]}")
            d = json.loads(r.stdout if hasattr(r, "stdout") else r.output)
            out[f"{c} {w}"] = {p: d["policies"][p]["avg_jct_s"] for p in pols}
            print(f"{c} {w}: " + ", ".join(f"{p} {v:.0f}" for p, v in out[f"{c} {w}"].items()), file=sys.stderr)
    summary = {}
    for n in names:
        ratios = [jct[n] / jct["elastic-unaware"] for jct in out.values()]
        summary[n] = {"losses": sum(x > 1.0 for x in ratios), "worst": max(ratios),
                      "geomean": float(np.exp(np.mean(np.log(ratios))))}
    return {"cases": out, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="elastic,sia")
    ap.add_argument("--workloads", default=None, help="comma-separated workload numbers (default: the set's)")
    ap.add_argument("--set", choices=tuple(SETS), default="design")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--table", action="store_true", help="docs/types.md's generalisation table instead")
    args = ap.parse_args()
    if args.table:
        print(json.dumps(table([p.strip() for p in args.policies.split(",") if p.strip()])))
        return
    wls = [int(x) for x in args.workloads.split(",")] if args.workloads else list(SETS[args.set][1])
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    out: dict = {"set": args.set, "workloads": {}}
    with native_stdout_to_stderr():
        for k in wls:
            row = {}
            for p in names:
                sim, typed = build(args.set, k)
                row[p] = analyse(sim, typed, p)
                if not args.json:
                    a = row[p]
                    print(f"w{k} {p:10s} jct {a['avg_jct_h']:.3f} = wait {a['wait_h']:.3f} + run {a['run_h']:.3f}"
                          f" + restart {a['restart_h']:.3f}  ckpt/job {a['checkpoints_per_job']:.2f}"
                          f"  gpus/job {a['gpus_per_job']:.2f}  busy {a['busy_frac']:.2f}"
                          f"  share {' '.join(f'{t}:{v:.2f}' for t, v in a['type_gpu_share'].items())}", file=sys.stderr)
            out["workloads"][f"workload-{k}"] = row
    rows = list(out["workloads"].values())
    keys = ("avg_jct_h", "wait_h", "run_h", "restart_h", "checkpoints_per_job", "gpus_per_job", "busy_frac")
    out["mean"] = {p: {k: float(np.mean([r[p][k] for r in rows])) for k in keys} for p in names}
    if args.json:
        print(json.dumps(out))
        return
    for p, m in out["mean"].items():
        print(f"{p:10s} " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()))


if __name__ == "__main__":
    main()
