"""Which slower type a job may take in a typed slot: the shipped backlog rule against the rule
before it and a stretch bound (docs/experiments.md, "Which slower GPU type a job may take").

    python benchmarks/experiments/type_choice.py pollux design|heldout [--designs before,stretch,...]
    python benchmarks/experiments/type_choice.py table [--designs before,stretch,...] [--workloads "W;W"]

Before, a job that the fast type left waiting could take any slower type it allowed, however much
slower. On `synth:mixed160` with `a100:2x8,t4:2x4` lyapunov then started jobs on T4s at 6-8x their
A100 run while the unaware reference waited less; the T4s were held for hours. Designs, each of
which leaves a job out of a type's queue for the slot (it neither starts nor counts there):

* ``backlog`` (shipped, `lyasched.policy.bytype._queues`; the plain ``lyapunov`` and ``elastic``
  here): when its best run on the type exceeds its best on its fastest type plus that type's
  backlog (the GPU-seconds left of the jobs running there and of the waiting jobs whose fastest type
  it is, at their request, over the type's GPUs: a fluid estimate of the wait for it);
* ``stretch``: when its best run on the type exceeds ``max_stretch`` (the no-sliver bound, 3) times
  its best over all its types (``best_any``), the backlog rule off;
* ``before``: no such rule (the decision before the backlog rule);
* ``reserve``: on top of the backlog rule, a flexible job leaves a type to the jobs that can run
  only there when the delay it would impose on them exceeds its gain there.

Designs on the jobs that can run on one type only ("restricted"; `decide_x`, a copy of
`bytype.decide_by_type` with two switches, and `LyapunovDesign._values`), each on top of the
backlog rule:

* ``steer``: a flexible job leaves its fastest type's queue when its best run on another type it
  allows beats its best there plus the restricted jobs' backlog there (their GPU-seconds at their
  request over the type's GPUs), and joins its next-best types instead;
* ``first``: on each type, the restricted jobs are decided first on their own, then the others on
  the GPUs left (a moving policy keeps one pass); ``steerfirst``: both;
* ``loss``: in a type's pass, each job's knapsack value is its score times L / (1 + L), L its
  relative loss on its next-best type (1 for a restricted job): starts ordered by what a job loses
  elsewhere (Gavel's normalised throughput), which jobs may start unchanged. Lyapunov only.

``pollux``: `benchmarks/heterogeneous.py`'s set (its design set is where the designs were chosen),
lyapunov and elastic with each design against gavel and the unaware references. ``table``: the
generalisation table of docs/types.md (seed groups and synth:mixed160 on two shapes, held out),
each design's aware policies against the unaware ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, replace
from dataclasses import replace as _replace
from typing import Sequence
from typing import ClassVar

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from lyasched.policy import POLICIES  # noqa: E402
from lyasched.policy.bytype import _BEST_ANY, TypeMemo, _queues, decide_by_type, type_order  # noqa: E402
from lyasched.policy.rowcache import RowCache  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.state import (Decision, RunningJob, SlotResult, SlotState, WaitingJob, capabilities,  # noqa: E402
                                   type_slice, unslice)


def stretch_views(state: SlotState, bound: float) -> SlotState:
    jobs = []
    for w in state.waiting:
        best = min((v.best_run for v in w.by_type.values()), default=math.inf) if w.by_type else math.inf
        if w.by_type is None or not math.isfinite(best):
            jobs.append(w)
            continue
        keep = {t: v for t, v in w.by_type.items() if v.best_run <= bound * best}
        jobs.append(replace(w, by_type=keep or dict(w.by_type)))
    return replace(state, waiting=tuple(jobs))


def reserve_views(state: SlotState) -> SlotState:
    """Flexible jobs leave a type to the jobs that can run only there when the delay they would
    impose on them (each restricted job waiting behind g x its run there over the type's GPUs)
    exceeds what the type gains them over their next-best type."""
    node_cap = list(state.free)
    for r in state.running:
        for n, k in r.placement:
            node_cap[n] += k
    cap: dict[str, float] = {}
    for n, t in enumerate(state.node_types):
        cap[t] = cap.get(t, 0.0) + node_cap[n]
    only: dict[str, int] = {}
    for w in state.waiting:
        if w.by_type is not None and len(w.by_type) == 1:
            t = next(iter(w.by_type))
            only[t] = only.get(t, 0) + 1
    jobs = []
    for w in state.waiting:
        if w.by_type is None or len(w.by_type) < 2:
            jobs.append(w)
            continue
        best = {t: v.best_run for t, v in w.by_type.items()}
        g = max(1, w.requested_gpus)
        keep = {}
        for t, v in w.by_type.items():
            other = min(b for u, b in best.items() if u != t)
            imposed = only.get(t, 0) * g * best[t] / max(cap.get(t, 1.0), 1.0)
            if imposed <= max(0.0, other - best[t]):  # no restricted job waiting there: no limit
                keep[t] = v
        if not keep:
            f = min(best, key=best.__getitem__)
            keep = {f: w.by_type[f]}
        jobs.append(replace(w, by_type=keep))
    return replace(state, waiting=tuple(jobs))


# --- Designs on the restricted jobs (jobs that can run on one type only): "steer" and "first" ---
# A copy of `bytype.decide_by_type` with two switches, kept here so the shipped module stays as it is.

def _queues_steer(memo: TypeMemo, sel: np.ndarray, state: SlotState) -> np.ndarray:
    """`bytype._queues`, then a flexible job leaves its fastest type when its best run on another
    type it allows beats its best there plus the backlog of the restricted jobs waiting for it
    (GPU-seconds at their request over the type's GPUs), and joins its next-best types instead."""
    best, fast, gsec = memo.best[sel], memo.fast[sel], memo.gsec[sel]
    width = len(memo.types)
    col = {t: i for i, t in enumerate(memo.types)}
    node_t = np.fromiter(map(col.__getitem__, state.node_types), dtype=np.intp, count=len(state.node_types))
    cap = np.bincount(node_t, weights=np.asarray(state.free, dtype=float), minlength=width)
    busy = np.bincount(fast, weights=gsec, minlength=width).astype(float)
    for r in state.running:
        for n, g in r.placement:
            cap[node_t[n]] += g
        ts = {int(node_t[n]) for n, _ in r.placement}
        if len(ts) == 1 and math.isfinite(r.predicted_end):
            busy[ts.pop()] += max(0.0, r.predicted_end - state.now) * r.gpus
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(cap > 0, busy / np.maximum(cap, 1.0), math.inf)
    steer = True
    rows = np.arange(len(fast))
    limit = best[rows, fast] + wait[fast]
    out = best <= limit[:, None]
    if steer:
        # the jobs that can run on one type only, at their request, over its GPUs: a flexible job
        # waits behind them there, so it leaves its fastest type when another it allows beats that
        only = np.isfinite(best).sum(axis=1) == 1
        mine = np.bincount(fast[only], weights=gsec[only], minlength=width).astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ahead = np.where(cap > 0, mine / np.maximum(cap, 1.0), math.inf)
        other = best.copy()
        other[rows, fast] = math.inf
        alt = other.min(axis=1)
        leave = ~only & np.isfinite(alt) & (alt < best[rows, fast] + ahead[fast]) & (ahead[fast] > 0)
        out[rows[leave], fast[leave]] = False
        out[leave] |= np.isfinite(other[leave]) & (other[leave] <= alt[leave, None])
    return out


def _started(nodes: SlotState, starts: Sequence[Decision], jobs: Sequence[WaitingJob]) -> SlotState:
    """``nodes`` (one type's slice) after ``starts`` of ``jobs``: their GPUs taken, the jobs running
    to their predicted end there."""
    free = list(nodes.free)
    view = {w.job_id: w for w in jobs}
    running = list(nodes.running)
    for d in starts:
        for n, g in d.placement:
            free[n] -= g
        w = view.get(d.job_id)
        end = nodes.now + (w.run_time(d.gpus, len(d.placement) > 1) if w is not None else math.inf)
        running.append(RunningJob(d.job_id, d.gpus, d.placement, nodes.now, end, predicted_end=end))
    return _replace(nodes, free=tuple(free), running=tuple(running))


def decide_x(policy, state: SlotState, decide, steer: bool = False, first: bool = False):
    """`bytype.decide_by_type` (backlog rule on), with ``steer`` (`_queues_steer`) and ``first``:
    on each type, the jobs that can run only there are decided first, on their own; the others
    then on the GPUs left (a moving policy: one pass, as shipped)."""
    waiting = state.waiting
    n = len(waiting)
    memo = vars(policy).get("_type_memo")
    if not isinstance(memo, TypeMemo):
        memo = vars(policy)["_type_memo"] = TypeMemo()
    types = tuple(dict.fromkeys(state.node_types))
    sel = memo.select(waiting, types)
    joins = memo.best[sel] < math.inf
    joins &= _queues_steer(memo, sel, state) if steer else _queues(memo, sel, state)
    rows: dict = vars(policy).setdefault("_type_rows_x", {})
    where = None
    pos = None
    starts: list = []
    preempt: list = []
    info: dict = {"solver": "by-type"}
    wake = math.inf
    done: list[int] = []
    caps = capabilities(policy)
    # jobs that can run on one type only (allowed, or the only one whose memory holds them)
    only = np.isfinite(memo.best[sel]).sum(axis=1) == 1 if first else None
    for t in type_order(state):
        nodes, idx = type_slice(state, t, ())
        col = types.index(t)
        queue = joins[:, col]
        tiers = [(queue, t)]
        if only is not None and not caps.moves:  # (a moving policy hands GPUs back by its moves)
            mine = queue & only
            if mine.any() and (queue & ~mine).any():
                tiers = [(mine, f"{t} only"), (queue & ~mine, t)]
        for tier, (q, key) in enumerate(tiers):
            msel = sel[q]
            jobs: tuple[WaitingJob, ...] = tuple(memo.view[msel, col].tolist())  # their rows there
            if not jobs and not (caps.moves and nodes.running):
                continue
            if sum(nodes.free) == 0 and not caps.preemptive:
                continue  # nothing starts there before a release (an event)
            sub = _replace(nodes, waiting=jobs)
            if policy.cross_type:
                policy._type_best = np.fromiter(map(_BEST_ANY, jobs), dtype=float, count=len(jobs))
            # each type (and tier) its own row cache: one shared by queues of very different sizes
            # would be cleared by the small one (`RowCache` keeps about 4x its last call's jobs)
            # and refilled by the large one, every slot
            own = policy._rows
            policy._rows = rows.setdefault(key, RowCache())
            policy._type_keys = (memo.gen, msel, jobs)  # the row cache finds the jobs by their memo rows
            try:
                res = decide(policy, sub)
            finally:
                policy._type_best = None
                policy._type_keys = None
                policy._rows = own
            if res.starts:
                if where is None:
                    where = np.full(len(memo.keep), -1, dtype=np.intp)
                    where[sel] = np.arange(n)
                for d in res.starts:
                    r = memo.by_job.get(d.job_id)
                    i: int | None = int(where[r]) if r is not None else -1
                    if i is not None and i < 0:  # not its latest row (or not waiting: elastic restarts running jobs)
                        if pos is None:
                            pos = dict(zip(memo.ids[sel].tolist(), range(n)))
                        i = pos.get(d.job_id)
                    if i is not None:
                        joins[i] = False  # the later types' queues drop it
                        done.append(i)
                starts += [unslice(d, idx) for d in res.starts]
                if tier + 1 < len(tiers):  # the next tier sees these starts running
                    nodes = _started(nodes, res.starts, jobs)
            preempt += res.preempt
            w = res.info.get("wake_at") if isinstance(res.info, dict) else None
            wake = min(wake, math.inf if w is None and not jobs else (state.now if w is None else float(w)))
            if "moves" in res.info:
                info.setdefault("moves", {}).update(res.info["moves"])
    if not starts and not preempt:
        info["wake_at"] = wake
    work = memo.work[sel]
    wait = state.now - memo.submit[sel]
    np.maximum(wait, 0.0, out=wait)
    if done:
        keep = np.ones(n, dtype=bool)
        keep[done] = False
        work, wait = work[keep], wait[keep]
    return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=float(work.sum()), z=float(wait.sum()), info=info)


def _typed(policy, state: SlotState, decide):
    if policy.design == "reserve":
        return decide_by_type(policy, reserve_views(state), decide)  # on top of the backlog rule
    if policy.design in ("steer", "first", "steerfirst"):
        return decide_x(policy, state, decide, steer="steer" in policy.design, first="first" in policy.design)
    if policy.design in ("loss", "onenode"):
        return decide_by_type(policy, state, decide)
    if policy.design == "stretch":
        return decide_by_type(policy, stretch_views(state, policy.max_stretch), decide, backlog=False)
    return decide_by_type(policy, state, decide, backlog=False)  # "before": any slower type it allows


@dataclass
class LyapunovDesign(LyapunovPolicy):
    design: str = "stretch"

    def decide(self, state: SlotState):
        if state.node_types:
            return _typed(self, state, LyapunovPolicy.decide)
        return LyapunovPolicy.decide(self, state)

    def _restrict(self, state, one, multi, best, over, req, run_req, total_gpus):
        """``onenode`` (a probe, not a type-choice rule): in a type's pass, adaptive jobs never take
        more than one node, whatever they asked."""
        if self.design == "onenode" and self._type_keys is not None:
            ad = self._rows.waiting_adaptive()
            if ad is not None:
                gk = np.arange(1, one.shape[1] + 1)
                over = over | (ad[:, None] & (gk[None, :] > state.gpus_per_node))
        return LyapunovPolicy._restrict(self, state, one, multi, best, over, req, run_req, total_gpus)

    def _values(self, s_one, s_multi, arr):
        """``loss``: in a type's pass, each job's scores times L / (1 + L), L its relative loss on
        its next-best type (its best run there over its best here, minus 1; a job that can run
        only here: 1): the knapsack and the greedy order then favour the jobs that lose most
        elsewhere (Gavel's normalised throughput), the signs (which jobs may start) unchanged."""
        if self.design != "loss" or self._type_keys is None:
            return s_one, s_multi
        f = loss_factor(vars(self)["_type_memo"], self._type_keys[1], self._type_keys[2])
        return s_one * f[:, None], s_multi * f[:, None]


def loss_factor(memo: TypeMemo, msel: np.ndarray, jobs) -> np.ndarray:
    if not len(jobs):
        return np.ones(0)
    c = next(i for i in range(len(memo.types)) if memo.view[msel[0], i] is jobs[0])
    best = memo.best[msel]
    here = best[:, c]
    other = best.copy()
    other[:, c] = np.inf
    alt = other.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = alt / here - 1.0
        f = np.clip(loss / (1.0 + loss), 1e-3, 1.0)
    return np.where(np.isfinite(here) & np.isfinite(alt), f, 1.0)


@dataclass
class ElasticDesign(ElasticPolicy):
    design: str = "stretch"

    def decide(self, state: SlotState):
        if state.node_types:
            return _typed(self, state, ElasticPolicy.decide)
        return ElasticPolicy.decide(self, state)


@dataclass
class LyapunovStretch(LyapunovDesign):
    design: str = "stretch"
    name: str = "lyapunov-stretch"


@dataclass
class ElasticStretch(ElasticDesign):
    design: str = "stretch"
    name: str = "elastic-stretch"


@dataclass
class LyapunovBefore(LyapunovDesign):
    design: str = "before"
    name: str = "lyapunov-before"


@dataclass
class ElasticBefore(ElasticDesign):
    design: str = "before"
    name: str = "elastic-before"


@dataclass
class LyapunovReserve(LyapunovDesign):
    design: str = "reserve"
    name: str = "lyapunov-reserve"


@dataclass
class ElasticReserve(ElasticDesign):
    design: str = "reserve"
    name: str = "elastic-reserve"


@dataclass
class LyapunovSteer(LyapunovDesign):
    design: str = "steer"
    name: str = "lyapunov-steer"


@dataclass
class ElasticSteer(ElasticDesign):
    design: str = "steer"
    name: str = "elastic-steer"


@dataclass
class LyapunovFirst(LyapunovDesign):
    design: str = "first"
    name: str = "lyapunov-first"


@dataclass
class ElasticFirst(ElasticDesign):
    design: str = "first"
    name: str = "elastic-first"


@dataclass
class LyapunovSteerfirst(LyapunovDesign):
    design: str = "steerfirst"
    name: str = "lyapunov-steerfirst"


@dataclass
class ElasticSteerfirst(ElasticDesign):
    design: str = "steerfirst"
    name: str = "elastic-steerfirst"


@dataclass
class LyapunovLoss(LyapunovDesign):
    design: str = "loss"
    name: str = "lyapunov-loss"


@dataclass
class ElasticLoss(ElasticDesign):
    design: str = "loss"
    name: str = "elastic-loss"


@dataclass
class LyapunovOnenode(LyapunovDesign):
    design: str = "onenode"
    name: str = "lyapunov-onenode"


@dataclass
class ElasticOnenode(ElasticDesign):
    design: str = "onenode"
    name: str = "elastic-onenode"


def _register(designs: list[str]) -> list[str]:
    names = []
    for d in designs:
        for base in ("lyapunov", "elastic"):
            POLICIES[f"{base}-{d}"] = f"type_choice:{base.capitalize()}{d.capitalize()}"
            names.append(f"{base}-{d}")
    return names


DESIGNS = ("before", "stretch", "reserve", "steer", "first", "steerfirst", "loss", "onenode")
TABLE_CLUSTERS = ("a100:2x8,rtx2080ti:3x8,t4:6x4", "a100:2x8,t4:2x4")
TABLE_WORKLOADS = ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty",
                   "synth:mixed160,load=1")


def table(designs: list[str], workloads: list[str]) -> dict:
    from click.testing import CliRunner

    from lyasched.cli import main as cli

    names = _register(designs)
    pols = ["lyapunov", "elastic", "lyapunov-unaware", "elastic-unaware", *names]
    out: dict = {}
    for c in TABLE_CLUSTERS:
        for w in workloads:
            r = CliRunner().invoke(cli, ["replay", "-w", w, "--cluster", c, "--policies", ",".join(pols), "--json"])
            if r.exit_code != 0:
                raise SystemExit(f"replay {w} {c}: {r.output[-500:]}")
            d = json.loads(r.stdout if hasattr(r, "stdout") else r.output)
            jct = {p: d["policies"][p]["avg_jct_s"] for p in pols}
            out[f"{c} {w}"] = jct
            print(f"{c} {w}: " + ", ".join(f"{p} {v:.0f}" for p, v in jct.items()), file=sys.stderr)
    summary = {}
    for variant in ["", *designs]:
        ratios = []
        for jct in out.values():
            for base in ("lyapunov", "elastic"):
                a = jct[f"{base}-{variant}" if variant else base]
                ratios.append(a / jct[f"{base}-unaware"])
        summary[variant or "shipped"] = {"losses": sum(r > 1.0 for r in ratios), "worst": max(ratios),
                                         "geomean": float(np.exp(np.mean(np.log(ratios))))}
    return {"cases": out, "summary": summary}


def pollux(which: str, designs: list[str]) -> dict:
    import heterogeneous

    names = _register(designs)
    args = argparse.Namespace(workloads=4, max_jobs=None, fixed_batch=False, seed=0, json=True,
                              policies=["lyapunov", "elastic", "gavel", "lyapunov-unaware", "elastic-unaware", *names])
    r = heterogeneous.run_set(which, args)
    mean = r["mean_avg_jct_h"]
    ratios = {p: {"over_gavel": mean[p] / mean["gavel"],
                  "over_unaware": mean[p] / mean[("lyapunov" if p.startswith("lyapunov") else "elastic") + "-unaware"]}
              for p in mean if not p.endswith("unaware") and p != "gavel"}
    return {"mean_avg_jct_h": mean, "ratios": ratios, "type_violations": r["type_violations"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pollux", "table"))
    ap.add_argument("set", nargs="?", choices=("design", "heldout"), default="design")
    ap.add_argument("--designs", default="before,stretch")
    ap.add_argument("--workloads", default=";".join(TABLE_WORKLOADS), help="separated by ;")
    a = ap.parse_args()
    designs = [d for d in a.designs.split(",") if d]
    bad = [d for d in designs if d not in DESIGNS]
    if bad:
        ap.exit(2, f"type_choice.py: unknown design {bad[0]!r} ({', '.join(DESIGNS)})\n")
    res = pollux(a.set, designs) if a.what == "pollux" else table(designs, a.workloads.split(";"))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
