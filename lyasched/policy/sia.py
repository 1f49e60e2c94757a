"""Sia (Jayaram Subramanya et al., SOSP 2023) as a baseline: each round, an integer program picks
one (GPU type, count) configuration or none for every job, minimising the sum of the jobs'
normalised goodputs raised to p = -0.5 plus a penalty for each job left without GPUs.

Written after the paper and its public artifact's simulator (siasosp23/artifacts, the MIP policy);
docs/baselines.md says where this version differs. The formulation, per round:

* **Configurations** of a type with n nodes of m GPUs: 1, 2, 4, ... up to m GPUs on one node,
  then 2m, 3m, ... nm on whole nodes (the artifact's set); one type per job, never mixed. A job
  whose rows allow none of them (a rigid count) gets its own allowed counts on one node.
* **Goodput** on a configuration is proportional to 1 / remaining time there (the job's rows: an
  adaptive job's are at its best batch per count on each type, `lyasched.costmodel.goodput`), and
  is normalised by the job's lowest goodput over all its configurations on all the types it
  allows (its slowest one scores 1).
* **Restart penalty**: a running job's configurations other than its current one are scaled by
  Pollux's factor ``(T - S*d) / (T + d)`` (T its age, S its restarts, d its restart delay; 1 while
  T < d), as the artifact does (`PolluxPolicy._running`); a job still relaunching keeps its
  allocation.
* **Objective** (p < 0): minimise ``sum x_jc * G_jc^p + lambda_n * (jobs - sum x_jc)`` over binary
  x_jc, at most one configuration per job, each type's GPUs (and whole nodes for multi-node
  configurations) within what lyasched may use there. ``lambda_n`` > 1 makes any allocation beat
  none (G >= 1, so G^p <= 1).

The program is solved by HiGHS (`scipy.optimize.milp`) with a time limit; when it returns no
solution the current allocation is kept. Counts are then placed type by type with Pollux's rule
(`allocation.place`: kept layouts stay, whole nodes for multi-node jobs, best fit for the rest).

A running job's rows on types other than its own are not in `MovableJob`: the policy remembers
each job's rows per type from when it last waited and scales them by how its time left on its
own type has changed since (`_cross_type`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Mapping

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from lyasched.policy.movable import MovableJob, scaled
from lyasched.policy.allocation import AllocJob, place
from lyasched.policy.pollux import PolluxPolicy
from lyasched.policy.state import Capabilities, Decision, Placement, RunningJob, SlotResult, SlotState, WaitingJob

CLIP = 3000.0  # the artifact's cap on a configuration's G^p (a restart factor near 0)


@dataclass
class _Option:
    job: int  # index into the round's job list
    gtype: str
    gpus: int
    cost: float  # G^p, restart penalty included
    keep: bool = False  # a running job's current configuration


@dataclass
class _Entry:
    job_id: str
    submit: float
    running: RunningJob | None = None
    gtype: str = ""  # the type it runs on (running jobs)
    fixed: bool = False


@dataclass
class SiaPolicy(PolluxPolicy):
    """Sia's round-based integer program over (type, count) configurations."""

    seed: int = 0
    move_cost: float = 30.0  # restart delay d of a job that carries none (s)
    p: float = -0.5  # fairness exponent (p < 0: the artifact's default regime)
    lambda_n: float = 1.1  # cost of a job left without GPUs (> 1)
    round_s: float = 60.0  # scheduling interval (the artifact's 60 s)
    time_limit_s: float = 2.0  # HiGHS time limit per round; no solution: keep the allocation
    name: str = "sia"
    _seen: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict, init=False, repr=False)

    capabilities: ClassVar[Capabilities] = Capabilities(preemptive=True, moves=True)
    types_aware: ClassVar[bool] = True  # the simulator shows a running job's rows on its own type

    def decide(self, state: SlotState) -> SlotResult:
        left = self._queues(state, set())
        if int(state.now // self.round_s) == int((state.now - state.slot_len) // self.round_s):
            return SlotResult(starts=(), q=left[0], z=left[1], info={"sia": "between rounds"})
        node_type = state.node_types or ("",) * len(state.free)
        types = list(dict.fromkeys(node_type))
        cap = list(state.free)
        for r in state.running:
            for n, k in r.placement:
                cap[n] += k
        gpn = {t: max([cap[i] for i, x in enumerate(node_type) if x == t], default=0) for t in types}
        nodes = {t: sum(1 for x in node_type if x == t) for t in types}
        self._remember(state)

        entries: list[_Entry] = []
        options: list[_Option] = []
        room = {t: 0 for t in types}  # GPUs of each type the program may hand out
        whole = {t: 0 for t in types}  # nodes of each type with no fixed job on them
        held_fixed: dict[int, int] = {}  # node -> GPUs held there by jobs that keep them
        for r in state.running:
            e, opts = self._running_options(r, len(entries), node_type, gpn, nodes, state.now)
            entries.append(e)
            if e.fixed:
                for n, k in r.placement:
                    held_fixed[n] = held_fixed.get(n, 0) + k
            options.extend(opts)
        for w in state.waiting:
            rows = w.by_type if (w.by_type is not None and state.node_types) else {t: w for t in types}
            opts = [_Option(len(entries), t, g, v)
                    for t, v2 in rows.items() if t in gpn
                    for g, v in _configs(v2.run_one_node, v2.run_multi_node, gpn[t], nodes[t]).items()]
            if opts:
                entries.append(_Entry(w.job_id, w.submit_time))
                options.extend(_normalised(opts, self.p, None, 1.0))
        for i, t in enumerate(node_type):
            room[t] += cap[i] - held_fixed.get(i, 0)
            whole[t] += int(i not in held_fixed and cap[i] >= gpn[t] > 0)
        options = [o for o in options if o.gpus <= room[o.gtype]]

        chosen, status = self._solve(entries, options, types, room, whole, gpn)
        if chosen is None:  # no solution: the current allocation stays
            return SlotResult(starts=(), q=left[0], z=left[1], info={"sia": f"fallback ({status})"})
        return self._typed_decisions(state, entries, chosen, cap, node_type, gpn, status)

    # --- the jobs' configurations -------------------------------------------------------------
    def _remember(self, state: SlotState) -> None:
        """Keep each waiting job's rows per type (for `_cross_type` once it runs); forget jobs gone."""
        live = {r.job_id for r in state.running}
        for w in state.waiting:
            if w.by_type:
                self._seen[w.job_id] = {t: (v.run_one_node, v.run_multi_node) for t, v in w.by_type.items()}
            live.add(w.job_id)
        for jid in [j for j in self._seen if j not in live]:
            del self._seen[jid]

    def _running_options(self, r: RunningJob, k: int, node_type: tuple[str, ...], gpn: Mapping[str, int],
                         nodes: Mapping[str, int], now: float) -> tuple[_Entry, list[_Option]]:
        on = {node_type[n] for n, _ in r.placement}
        t = next(iter(on)) if len(on) == 1 else ""
        j = self._running(r, gpn.get(t, 1), now) if t in gpn else None
        if j is None or len(on) != 1:  # spans types (an unaware start) or no rows: kept as it is
            return _Entry(r.job_id, r.start_time, r, t, True), []
        cost = r.cost(self.move_cost) if isinstance(r, MovableJob) else self.move_cost
        relaunching = isinstance(r, MovableJob) and r.moves > 0 and now - r.start_time < cost
        age = max(0.0, now - j.submit)
        factor = 1.0 if age < cost else j.factor  # the artifact: no penalty before one restart's delay
        e = _Entry(r.job_id, j.submit, r, t, j.fixed or relaunching)
        if e.fixed:
            return e, []
        own = _configs(r.remaining_one_node, r.remaining_multi_node, gpn[t], nodes[t]) if isinstance(r, MovableJob) else {}
        own[r.gpus] = j.rem[r.gpus]
        opts = [_Option(k, t, g, v, keep=g == r.gpus) for g, v in own.items()]
        for u, rows in self._cross_type(r, t, j.rem[r.gpus], gpn).items():
            if u in gpn:
                opts.extend(_Option(k, u, g, v) for g, v in _configs(rows[0], rows[1], gpn[u], nodes[u]).items())
        return e, _normalised(opts, self.p, (t, r.gpus), factor)

    def _cross_type(self, r: RunningJob, t: str, left: float, gpn: Mapping[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """A running job's rows on the other types it allows: those it had when it last waited,
        scaled by its time left now over then on its own type at its current count."""
        seen = self._seen.get(r.job_id)
        if not seen or t not in seen:
            return {}
        one, multi = seen[t]
        row = one if r.gpus <= gpn[t] else multi
        then = float(row[r.gpus - 1]) if r.gpus <= len(row) else math.inf
        if not (0.0 < then < math.inf) or not math.isfinite(left):
            return {}
        s = left / then
        return {u: (scaled(o, s), scaled(m, s)) for u, (o, m) in seen.items() if u != t}

    # --- the integer program ------------------------------------------------------------------
    def _solve(self, entries: list[_Entry], options: list[_Option], types: list[str], room: Mapping[str, int],
               whole: Mapping[str, int], gpn: Mapping[str, int]) -> tuple[dict[int, _Option] | None, str]:
        if not options:
            return {}, "nothing to allocate"
        n = len(options)
        c = np.array([o.cost - self.lambda_n for o in options])
        rows, cols, vals, ub = [], [], [], []
        for k, o in enumerate(options):  # one configuration per job
            rows.append(o.job)
            cols.append(k)
            vals.append(1.0)
        ub.extend([1.0] * len(entries))
        base = len(entries)
        for ti, t in enumerate(types):  # each type's GPUs, and its whole nodes for multi-node configurations
            for k, o in enumerate(options):
                if o.gtype == t:
                    rows.append(base + 2 * ti)
                    cols.append(k)
                    vals.append(float(o.gpus))
                    if o.gpus > gpn[t]:
                        rows.append(base + 2 * ti + 1)
                        cols.append(k)
                        vals.append(float(o.gpus // gpn[t]))
            ub.extend([float(room[t]), float(whole[t])])
        a = coo_matrix((vals, (rows, cols)), shape=(len(ub), n)).tocsr()
        try:
            res = milp(c, integrality=np.ones(n), bounds=Bounds(0, 1),
                       constraints=LinearConstraint(a, -np.inf, np.array(ub)),
                       options={"time_limit": self.time_limit_s, "mip_rel_gap": 1e-4})
        except (ValueError, RuntimeError) as exc:  # a malformed program: keep the allocation
            return None, f"solver error: {exc}"
        if res.x is None:
            return None, res.message
        if res.status != 0:  # stopped early: its best so far must beat keeping the allocation
            keep = np.array([o.keep for o in options])
            if float(c @ np.round(res.x)) >= float(c[keep].sum()):
                return None, f"{res.message}; its best is no better than the current allocation"
        chosen = {options[k].job: options[k] for k in np.flatnonzero(res.x > 0.5)}
        return chosen, "optimal" if res.status == 0 else res.message

    # --- placements and decisions -------------------------------------------------------------
    def _typed_decisions(self, state: SlotState, entries: list[_Entry], chosen: dict[int, _Option], cap: list[int],
                   node_type: tuple[str, ...], gpn: Mapping[str, int], status: str) -> SlotResult:
        placed: dict[str, Placement] = {}
        gtype: dict[str, str] = {}
        for t in gpn:
            cap_t = [c if node_type[i] == t else 0 for i, c in enumerate(cap)]
            alloc: dict[str, int] = {}
            by_id: dict[str, AllocJob] = {}
            for k, e in enumerate(entries):
                o = chosen.get(k)
                r = e.running if e.gtype == t else None  # running here
                if e.fixed and r is not None:
                    g = r.gpus
                elif o is not None and o.gtype == t:
                    g = o.gpus
                else:
                    continue
                alloc[e.job_id] = g
                by_id[e.job_id] = AllocJob(e.job_id, e.submit, [g], {g: 0.0}, 1.0,
                                       current=r.gpus if r is not None else 0,
                                       placement=tuple(r.placement) if r is not None else (),
                                       fixed=e.fixed and r is not None)
            got = place(alloc, by_id, cap_t, gpn[t]) or place(alloc, by_id, cap_t, gpn[t], keep=False)
            while got is None:  # cannot pack (fixed jobs in the way): drop the youngest movable job
                movable = [jid for jid in alloc if not by_id[jid].fixed]
                if not movable:
                    got = {}
                    break
                del alloc[max(movable, key=lambda x: (by_id[x].submit, x))]
                got = place(alloc, by_id, cap_t, gpn[t], keep=False)
            for jid, pl in got.items():
                placed[jid] = pl
                gtype[jid] = t
        preempt: list[str] = []
        starts: list[Decision] = []
        moved: set[str] = set()
        for e in entries:
            r = e.running
            if r is None or e.fixed:
                continue
            new = placed.get(e.job_id)
            if new is None or tuple(sorted(new)) != tuple(sorted(r.placement)):
                preempt.append(e.job_id)
                moved.add(e.job_id)
        for e in sorted(entries, key=lambda e: (e.submit, e.job_id)):
            where = placed.get(e.job_id)
            if where is None or (e.running is not None and e.job_id not in moved):
                continue
            g = sum(k for _, k in where)
            starts.append(Decision(e.job_id, g, tuple(sorted(where)),
                                   reason=f"sia: {g} GPUs of type {gtype[e.job_id] or 'any'}"))
        q, z = self._queues(state, {d.job_id for d in starts})
        return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=q, z=z,
                          info={"sia": status, "sia_jobs": len(entries)})

    @staticmethod
    def _queues(state: SlotState, started: set[str]) -> tuple[float, float]:
        left = [w for w in state.waiting if w.job_id not in started]
        return sum(w.work for w in left), sum(max(0.0, state.now - w.submit_time) for w in left)


def _configs(one: np.ndarray | None, multi: np.ndarray | None, gpn: int, nodes: int) -> dict[int, float]:
    """Remaining time on each of the artifact's configurations the rows allow: powers of two up
    to one node's GPUs, then whole nodes; a job allowing none of them (a rigid count) gets its
    allowed counts on one node."""
    out: dict[int, float] = {}
    if gpn <= 0:
        return out
    if one is not None:
        g = 1
        while g <= min(gpn, len(one)):
            v = float(one[g - 1])
            if 0.0 <= v < math.inf:
                out[g] = v
            g *= 2
    if multi is not None:
        for k in range(2, nodes + 1):
            g = k * gpn
            if g > len(multi):
                break
            v = float(multi[g - 1])
            if 0.0 <= v < math.inf:
                out[g] = v
    if not out and one is not None:
        out = {g + 1: float(v) for g, v in enumerate(one[:gpn].tolist()) if 0.0 <= v < math.inf}
    return out


def _normalised(opts: list[_Option], p: float, current: tuple[str, int] | None, factor: float) -> list[_Option]:
    """``cost`` from remaining time to G^p: G is the job's slowest remaining time over this one
    (its slowest configuration scores 1), times the restart factor away from ``current``; a
    configuration a non-positive factor forbids is dropped."""
    worst = max((o.cost for o in opts if o.cost > 0), default=0.0)
    out = []
    for o in opts:
        g = worst / o.cost if o.cost > 0 else worst / 1e-9
        if current is not None and (o.gtype, o.gpus) != current:
            if factor <= 0:
                continue
            g *= factor
        o.cost = min(CLIP, max(g, 1e-12) ** p)
        out.append(o)
    return out
