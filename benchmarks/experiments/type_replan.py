"""Elastic re-planning its running jobs across GPU types in both directions (docs/experiments.md,
"Elastic re-planning running jobs across GPU types, both ways").

    python benchmarks/experiments/type_replan.py pollux design|heldout [--policies elastic,elastic-rp] [--json]
    python benchmarks/experiments/type_replan.py table [--policies elastic,elastic-rp] [--json]

After elastic's typed slot (`ElasticPolicy.decide`, unchanged), the running checkpointable jobs that
the slot left alone and that have run `min_move_interval` since their last start or move are
re-planned across the types, each step a change of the summed predicted completion time of the
jobs it touches, made when that sum falls (largest fall first; each job at most once a slot):

* **up**: elastic's shipped moves onto another type's free GPUs (`lyasched.policy.typemoves.type_moves`,
  docs/types.md), made first; up alone is shipped ``elastic``;
* **back**: a job on type t steps to one node of another type u with free GPUs so that a job left
  waiting takes t's GPUs it frees (on the job's node): made when the waiting job's run on t, plus
  the mover's loss (its time left on u plus its move cost, minus its time left on t), is below the
  waiting job's alternative, the least of its fastest type's run after that type's backlog wait
  (`bytype._queues`' fluid estimate) and its run now on a type with room (``back_alt="now"``: the
  latter only, so a give-back is an exchange of who gains more from type t; ``"stuck"``: the former,
  only for a waiting job that no type it allows has room for now);
* **swap**: two running jobs on different types exchange nodes, each at its best count on the
  other's node (its free GPUs plus those the other frees), when their summed time left (plus two
  move costs) falls.

A running job's rows on another type are those it had when it last waited (`TypeMemo`), scaled by
how its time left on its own type has changed since, as sia does (`typemoves.rows_now`). Variants: ``elastic-rp`` (up,
back, swap), ``elastic-rp-back`` (back and swap, no up), ``elastic-rp-noswap`` (up and back),
``elastic-rp-now`` (up, back "now"), ``elastic-rp-nowswap`` (up, back
"now", swap), ``elastic-rp-stuck`` (up, back "stuck"). Every new placement is the placement rule's one-node placement on the type's nodes
(`placement.one_node_placement`; a give-back's waiting job preferring the mover's node).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from lyasched.cli.nativeout import native_stdout_to_stderr  # noqa: E402
from lyasched.policy.bytype import TypeMemo  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.movable import MovableJob  # noqa: E402
from lyasched.policy.placement import one_node_placement  # noqa: E402
from lyasched.policy.state import Decision, SlotResult, SlotState, WaitingJob  # noqa: E402
from lyasched.policy.typemoves import left_alone, left_free, rows_now, type_moves  # noqa: E402


@dataclass
class _Mover:
    job: MovableJob
    gtype: str
    node: int  # its one node (-1: it spans nodes: it may move, but frees no one node for another job)
    left: float  # time left where it runs
    cost: float  # its move cost
    rows: dict[str, np.ndarray]  # one-node rows on the other types it allows, scaled to now (with own type's)


@dataclass
class ElasticReplan(ElasticPolicy):
    """elastic, then its running jobs re-planned across types both ways (module docstring)."""

    up: bool = True
    back: bool = True
    swap: bool = True
    type_moves: bool = False  # the shipped moves across types (typemoves.py) off: this step replaces them
    back_alt: str = "fluid"  # a give-back's alternative for the waiting job: "fluid" (module docstring) or "now"
    name: str = "elastic-rp"

    def decide(self, state: SlotState) -> SlotResult:
        res = super().decide(state)
        memo = vars(self).get("_type_memo")
        if not state.node_types or not state.running or not self.types_aware or not isinstance(memo, TypeMemo):
            return res
        more, gone, work = replan(self, state, memo, res)
        if not more:
            return res
        info = dict(res.info)
        info.pop("wake_at", None)
        info["type_replans"] = len(more)
        return SlotResult(starts=tuple(res.starts) + tuple(more), preempt=tuple(res.preempt) + tuple(gone),
                          q=res.q - work, z=res.z, info=info)


def _best(row: np.ndarray, room: int) -> tuple[int, float]:
    """The count (1..room) of least time on a one-node row, and that time (inf: none)."""
    if room <= 0 or len(row) == 0:
        return 0, math.inf
    r = np.asarray(row[:room], dtype=float)
    g = int(np.argmin(r))
    return g + 1, float(r[g])


def _movers(policy: ElasticReplan, state: SlotState, memo: TypeMemo, touched: set[str]) -> list[_Mover]:
    out = []
    for r in left_alone(state, touched):
        if state.now < r.start_time + policy.min_move_interval:
            continue
        seen = rows_now(memo, state.node_types, r)
        if seen is None:
            continue
        u, left, s, by_type = seen
        rows = {t: np.asarray(v.run_one_node, dtype=float) * s for t, v in by_type.items() if t != u}
        rows[u] = np.asarray(r.remaining_one_node, dtype=float)
        spans = len(r.placement) > 1
        out.append(_Mover(r, u, -1 if spans else r.placement[0][0], left, r.cost(float(policy.move_cost)), rows))
    return out


def replan(policy: ElasticReplan, state: SlotState, memo: TypeMemo, res: SlotResult) -> tuple[list[Decision], list[str], float]:
    types = state.node_types
    running = {r.job_id: r for r in state.running}
    free, touched = left_free(state, res, running)
    movers = _movers(policy, state, memo, touched)
    more: list[Decision] = []
    gone: list[str] = []
    work = 0.0  # the waiting jobs' work started by give-backs (they leave Q)

    def room(t: str) -> tuple[int, int]:
        nodes = [n for n, x in enumerate(types) if x == t]
        if not nodes:
            return -1, 0
        n = max(nodes, key=lambda k: (free[k], -k))
        return n, free[n]

    def place(t: str, g: int, prefer: tuple[int, ...] = ()) -> int:
        """The node of the placement rule's one-node placement of g GPUs on type t (-1: none)."""
        pl = one_node_placement([f if types[k] == t else 0 for k, f in enumerate(free)], g, prefer)
        return -1 if pl is None else pl[0][0]

    def release(m: _Mover) -> None:
        for n, k in m.job.placement:
            free[n] += k

    if policy.up:  # onto free GPUs of another type: the shipped moves (typemoves.py)
        more, gone = type_moves(policy, state, memo, res)
        for d in more:
            for n, k in running[d.job_id].placement:
                free[n] += k
            for n, g in d.placement:
                free[n] -= g
    done = set(gone)

    if policy.back:  # a running job steps to another type so that a waiting job takes its GPUs
        started = {d.job_id for d in res.starts}
        left_w = [w for w in state.waiting if w.job_id not in started and w.by_type]
        wait = _fluid_wait(state, memo, left_w)
        cands2 = []
        for w in left_w:
            views = w.by_type or {}
            fast = min(views, key=lambda t: views[t].best_run)
            alt = wait.get(fast, math.inf) + views[fast].best_run if policy.back_alt != "now" else math.inf
            now_alt = min(_best(np.asarray(v.run_one_node), room(t)[1])[1] for t, v in views.items())
            if policy.back_alt == "stuck" and math.isfinite(now_alt):
                continue  # only jobs that no type they allow has room for now
            alt = min(alt, now_alt)
            if not math.isfinite(alt):
                continue
            for m in movers:
                if m.node < 0 or m.job.job_id in done or m.gtype not in views:
                    continue
                gw, run_w = _best(np.asarray(views[m.gtype].run_one_node), free[m.node] + m.job.gpus)
                if not gw or run_w >= alt:
                    continue
                for u, row in m.rows.items():
                    if u == m.gtype:
                        continue
                    _n, rm = room(u)
                    g, est = _best(row, rm)
                    if not g:
                        continue
                    delta = (est + m.cost - m.left) + run_w - alt
                    if delta < 0:
                        cands2.append((delta, w.job_id, m.job.job_id, u, g, gw, m, w))
        used: set[str] = set()
        for delta, wid, jid, u, g, gw, m, w in sorted(cands2, key=lambda c: (c[0], c[1], c[2])):
            if wid in used or jid in done:
                continue
            n = place(u, g)
            if n < 0 or free[m.node] + m.job.gpus < gw:
                continue
            free[n] -= g
            release(m)
            nw = place(m.gtype, gw, (m.node,))
            free[nw] -= gw
            done.add(jid)
            used.add(wid)
            gone.append(jid)
            more.append(Decision(jid, g, ((n, g),), reason=f"re-plan: back to {g} GPUs of type {u}"))
            more.append(Decision(wid, gw, ((nw, gw),), reason=f"re-plan: {gw} GPUs given back on type {m.gtype}"))
            work += w.work

    if policy.swap:  # two running jobs on different types exchange nodes
        cands3 = []
        one = [m for m in movers if m.node >= 0 and m.job.job_id not in done]
        for i, a in enumerate(one):
            for b in one[i + 1:]:
                if a.gtype == b.gtype or b.gtype not in a.rows or a.gtype not in b.rows:
                    continue
                ga, ea = _best(a.rows[b.gtype], free[b.node] + b.job.gpus)
                gb, eb = _best(b.rows[a.gtype], free[a.node] + a.job.gpus)
                if not ga or not gb:
                    continue
                delta = (ea + a.cost - a.left) + (eb + b.cost - b.left)
                if delta < 0:
                    cands3.append((delta, a.job.job_id, b.job.job_id, ga, gb, a, b))
        for _d, ia, ib, ga, gb, a, b in sorted(cands3, key=lambda c: (c[0], c[1], c[2])):
            if ia in done or ib in done or free[b.node] + b.job.gpus < ga or free[a.node] + a.job.gpus < gb:
                continue
            release(a)
            release(b)
            free[b.node] -= ga
            free[a.node] -= gb
            done |= {ia, ib}
            gone += [ia, ib]
            more.append(Decision(ia, ga, ((b.node, ga),), reason=f"re-plan: swapped onto type {b.gtype}"))
            more.append(Decision(ib, gb, ((a.node, gb),), reason=f"re-plan: swapped onto type {a.gtype}"))
    return more, gone, work


def _fluid_wait(state: SlotState, memo: TypeMemo, waiting: list[WaitingJob]) -> dict[str, float]:
    """Per type, the backlog's fluid wait (`bytype._queues`): GPU-seconds left of the jobs running
    there and of the waiting jobs whose fastest type it is, over its GPUs."""
    types = state.node_types
    cap: dict[str, float] = {}
    busy: dict[str, float] = {}
    for n, t in enumerate(types):
        cap[t] = cap.get(t, 0.0) + state.free[n]
        busy.setdefault(t, 0.0)
    for r in state.running:
        for n, g in r.placement:
            cap[types[n]] += g
        ts = {types[n] for n, _ in r.placement}
        if len(ts) == 1 and math.isfinite(r.predicted_end):
            busy[ts.pop()] += max(0.0, r.predicted_end - state.now) * r.gpus
    for w in waiting:
        views = w.by_type or {}
        if not views:
            continue
        f = min(views, key=lambda t: views[t].best_run)
        g = max(1, w.requested_gpus)
        run = min(views[f].run_time(g, False), views[f].run_time(g, True))
        if not math.isfinite(run):
            run = views[f].best_run
        if math.isfinite(run) and f in busy:
            busy[f] += run * g
    return {t: busy[t] / cap[t] if cap[t] > 0 else math.inf for t in cap}


@dataclass
class ElasticReplanBack(ElasticReplan):
    up: bool = False
    name: str = "elastic-rp-back"


@dataclass
class ElasticReplanNoSwap(ElasticReplan):
    swap: bool = False
    name: str = "elastic-rp-noswap"


@dataclass
class ElasticReplanNow(ElasticReplan):
    back_alt: str = "now"
    swap: bool = False
    name: str = "elastic-rp-now"


@dataclass
class ElasticReplanNowSwap(ElasticReplan):
    back_alt: str = "now"
    name: str = "elastic-rp-nowswap"


@dataclass
class ElasticNoMoves(ElasticPolicy):
    """elastic without its moves across types (typemoves.py): elastic before them."""

    type_moves: bool = False
    name: str = "elastic-nomoves"


@dataclass
class ElasticReplanStuck(ElasticReplan):
    back_alt: str = "stuck"
    swap: bool = False
    name: str = "elastic-rp-stuck"


VARIANTS: dict[str, Any] = {c.name: c for c in (ElasticNoMoves, ElasticReplan, ElasticReplanBack, ElasticReplanNoSwap, ElasticReplanNow,
                                                  ElasticReplanNowSwap, ElasticReplanStuck)}


def _policy(name: str):  # type: ignore[no-untyped-def]
    from lyasched.policy import make_policy
    return VARIANTS[name]() if name in VARIANTS else make_policy(name)


def pollux(set_name: str, names: list[str]) -> dict:
    """benchmarks/heterogeneous.py's set: average JCT (h) per workload and the mean."""
    from heterogeneous import SETS
    from sia_gap import build
    out: dict = {"set": set_name, "workloads": {}}
    for k in SETS[set_name][1]:
        row = {}
        for p in names:
            sim, _typed = build(set_name, k)
            r = sim.run(_policy(p), name=p)
            row[p] = {"avg_jct_h": float(np.mean([x.jct for x in r.records])) / 3600,
                      "type_violations": r.type_violations,
                      "checkpoints": int(sum(x.preemptions for x in r.records))}
            print(f"{set_name} w{k} {p}: {row[p]}", file=sys.stderr)
        out["workloads"][f"workload-{k}"] = row
    rows = list(out["workloads"].values())
    out["mean_avg_jct_h"] = {p: float(np.mean([r[p]["avg_jct_h"] for r in rows])) for p in names}
    out["type_violations"] = int(sum(r[p]["type_violations"] for r in rows for p in names))
    return out


def table(names: list[str]) -> dict:
    """docs/types.md's generalisation table (type_choice.py's clusters and workloads), each policy
    against the first (elastic)."""
    from click.testing import CliRunner

    from lyasched.cli import main as cli
    from lyasched.policy import POLICIES
    from type_choice import TABLE_CLUSTERS, TABLE_WORKLOADS

    for n in names:
        if n in VARIANTS:
            POLICIES[n] = f"type_replan:{VARIANTS[n].__name__}"
    out: dict = {}
    for c in TABLE_CLUSTERS:
        for w in TABLE_WORKLOADS:
            r = CliRunner().invoke(cli, ["replay", "-w", w, "--cluster", c, "--policies", ",".join(names), "--json"])
            if r.exit_code != 0:
                raise SystemExit(f"replay {w} {c}: {r.output[-500:]}")
            d = json.loads(r.stdout if hasattr(r, "stdout") else r.output)
            out[f"{c} {w}"] = {p: d["policies"][p]["avg_jct_s"] for p in names}
            print(f"{c} {w}: " + ", ".join(f"{p} {v:.0f}" for p, v in out[f"{c} {w}"].items()), file=sys.stderr)
    base = names[0]
    summary = {}
    for n in names[1:]:
        ratios = [jct[n] / jct[base] for jct in out.values()]
        summary[n] = {"worse": sum(x > 1.0 for x in ratios), "worse_2pct": sum(x > 1.02 for x in ratios),
                      "worst": max(ratios), "geomean": float(np.exp(np.mean(np.log(ratios))))}
    return {"cases": out, "against": base, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pollux", "table"))
    ap.add_argument("set", nargs="?", default="design", choices=("design", "heldout"))
    ap.add_argument("--policies", default="elastic,elastic-rp")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = [p.strip() for p in a.policies.split(",") if p.strip()]
    t0, c0 = time.perf_counter(), time.process_time()
    with native_stdout_to_stderr():
        res = pollux(a.set, names) if a.what == "pollux" else table(names)
    res["wall_s"], res["cpu_s"] = round(time.perf_counter() - t0, 1), round(time.process_time() - c0, 1)
    if a.json:
        print(json.dumps(res))
    else:
        print(json.dumps({k: v for k, v in res.items() if k not in ("cases", "workloads")}, indent=1))


if __name__ == "__main__":
    main()
