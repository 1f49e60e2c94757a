"""Pollux (Qiao et al., OSDI 2021) as a baseline: re-allocate every job's GPUs each interval to
maximise the generalised mean (p = -1) of the jobs' goodput speed-ups, with the paper's restart
penalty and placement rules; each job runs at its best batch for the GPUs it gets.

Written after the paper and the OSDI'21 artifact's simulator (petuum/adaptdl, simulator/);
docs/baselines.md says where it differs (chiefly: a deterministic local search instead of the
artifact's genetic algorithm).

What it reads: a job's rows (remaining time on every GPU count; for an adaptive job already at its
best batch per count, `lyasched.costmodel.goodput`), so goodput on g GPUs is proportional to
1 / remaining(g) and a job's speed-up on g GPUs is ``base / remaining(g)`` with ``base`` its
remaining time on its smallest allowed count times that count. Maximising the p = -1 mean of the
speed-ups is minimising the sum of their inverses, ``L_j(g) = remaining_j(g) / base_j``. A running
job's count other than its current one is discounted by the paper's restart factor
``(T - S*d) / (T + d)`` (T its age, S its restarts so far, d its restart delay: its move cost);
a non-positive factor forbids the change.

Each decision, from the current allocation (as the artifact's search is seeded with it):

1. **Admission**: running jobs keep their counts; each waiting job, oldest first, enters at its
   smallest count, taking GPUs from the running job whose objective rises least per GPU given (a
   job without GPUs has speed-up 0, which p = -1 forbids);
2. **Local search**: the single change that lowers the objective most (a job grows into free
   GPUs, or grows one count step by what another gives) is taken while one lowers it and the
   counts still pack;
3. **Placement** (the paper's rules): counts are up to one node's GPUs (one node) or whole nodes
   (several nodes, never shared with another job, so no node holds two distributed jobs); a
   running job whose count is kept keeps its GPUs when they still fit; the rest is packed
   largest first, best fit.

Running jobs whose allocation changes are preempted and started again on the new one in the same
slot (a resize, as `elastic` does; the simulator charges the same move cost); jobs left without
GPUs are suspended.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lyasched.policy.allocation import AllocJob, packs, place
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import Capabilities, Decision, RunningJob, SlotResult, SlotState, WaitingJob


@dataclass
class PolluxPolicy:
    """Goodput-driven re-allocation of every job each interval (a Pollux-style baseline)."""

    seed: int = 0
    move_cost: float = 30.0  # restart delay d of a job that carries none (s)
    name: str = "pollux"

    # preempts and resizes running jobs (read as MovableJob), like elastic
    capabilities: ClassVar[Capabilities] = Capabilities(preemptive=True, moves=True)

    def decide(self, state: SlotState) -> SlotResult:
        gpn = state.gpus_per_node
        nodes = len(state.free)
        cap = list(state.free)  # GPUs lyasched may use per node: free + held by running jobs
        for r in state.running:
            for node, k in r.placement:
                cap[node] += k
        jobs: list[AllocJob] = []
        for r in state.running:
            j = self._running(r, gpn, state.now)
            if j is not None:
                jobs.append(j)
        for w in state.waiting:
            j = self._waiting(w, gpn)
            if j is not None:
                jobs.append(j)
        alloc = self._allocate(jobs, cap, gpn)
        return self._decisions(state, jobs, alloc, cap, gpn, nodes)

    # --- the jobs as the search sees them ---------------------------------------------------
    def _counts(self, one: np.ndarray | None, multi: np.ndarray | None, gpn: int) -> dict[int, float]:
        """Remaining time on each count the placement rules allow: up to one node's GPUs on one
        node, or whole nodes."""
        # plain Python over a handful of values: called for every job every slot, where numpy's
        # per-call cost on arrays this small was a quarter of a replay (the same values: finite, >= 0)
        rem: dict[int, float] = {}
        if one is not None:
            for k, v in enumerate(one[:gpn].tolist()):
                if 0.0 <= v < math.inf:
                    rem[k + 1] = v
        if multi is not None and len(multi) >= 2 * gpn:
            for k, v in enumerate(multi[2 * gpn - 1::gpn].tolist()):
                if 0.0 <= v < math.inf:
                    rem[(k + 2) * gpn] = v
        return rem

    def _make(self, job_id: str, submit: float, rem: dict[int, float]) -> AllocJob | None:
        if not rem:
            return None
        counts = sorted(rem)
        g0 = counts[0]
        base = max(rem[g0] * g0, 1e-9)
        return AllocJob(job_id, submit, counts, rem, base)

    def _waiting(self, w: WaitingJob, gpn: int) -> AllocJob | None:
        return self._make(w.job_id, w.submit_time, self._counts(w.run_one_node, w.run_multi_node, gpn))

    def _running(self, r: RunningJob, gpn: int, now: float) -> AllocJob | None:
        submit = r.start_time
        if isinstance(r, MovableJob):
            rem = self._counts(r.remaining_one_node, r.remaining_multi_node, gpn)
            submit = now - (r.waited_s + (now - r.start_time))  # at least as old as its wait and this run
            cost = r.cost(self.move_cost)
            moves = r.moves
        else:
            rem, cost, moves = {}, self.move_cost, 0
        if r.gpus not in rem:  # keeps what it holds (not movable, or a layout outside the rules)
            rem[r.gpus] = max(0.0, r.predicted_end - now) if math.isfinite(r.predicted_end) else 1.0
            fixed = True
        else:
            fixed = not r.preemptible
        j = self._make(r.job_id, submit, rem)
        if j is None:
            return None
        j.current, j.placement, j.fixed = r.gpus, tuple(r.placement), fixed
        age = max(0.0, now - submit)
        j.factor = (age - moves * cost) / (age + cost) if age + cost > 0 else 0.0
        return j

    # --- the search -------------------------------------------------------------------------
    def _allocate(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        return self._local(jobs, cap, gpn)

    def _local(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        """Search from the current allocation, as the paper's genetic algorithm is seeded with it:
        running jobs keep their counts, each waiting job (oldest first) enters at its smallest count,
        taking GPUs from the running job that loses least by giving them (a job without GPUs costs
        the p = -1 mean more than any restart), then free GPUs go by marginal gain and single-job
        steps (one job smaller, another larger) are taken while they lower the objective."""
        alloc: dict[str, int] = {j.job_id: j.current for j in jobs if j.current}
        if not packs(alloc, cap, gpn):
            return self._greedy(jobs, cap, gpn)
        by_id = {j.job_id: j for j in jobs}
        total = sum(cap)

        def used() -> int:
            return sum(alloc.values())

        def smaller(j: AllocJob, g: int) -> list[int]:
            return [c for c in j.counts if c < g]

        for j in sorted((j for j in jobs if not j.current), key=self._admission_key):
            g0 = j.counts[0]
            alloc[j.job_id] = g0
            while not packs(alloc, cap, gpn):
                # the cheapest shrink of a movable running job, by the rise of its loss per GPU freed
                best: tuple[float, str, int] | None = None
                for jid, g in alloc.items():
                    o = by_id[jid]
                    if jid == j.job_id or o.fixed or not self._may_shrink(o, j):
                        continue
                    for c in smaller(o, g):
                        rise = (o.loss(c) - o.loss(g)) / (g - c)
                        if best is None or rise < best[0]:
                            best = (rise, jid, c)
                if best is None:
                    break
                alloc[best[1]] = best[2]
            if not packs(alloc, cap, gpn):
                del alloc[j.job_id]
        loss = {j.job_id: {c: j.loss(c) for c in j.counts} for j in jobs}
        movable = [jid for jid in alloc if not by_id[jid].fixed]
        for _ in range(4 * len(alloc) + 8):  # grow into free GPUs, then steps between two jobs
            free = total - used()
            moves: list[tuple[float, str, int, str | None, int]] = []
            for jid in movable:
                g, lj = alloc[jid], loss[jid]
                moves.extend((lj[g] - lj[g2], jid, g2, None, 0) for g2 in by_id[jid].counts
                             if g < g2 <= g + free and lj[g] - lj[g2] > 1e-9)
            if not moves:
                # one job grows a step by what another gives (its largest smaller count that frees enough)
                gives = []
                for oid in movable:
                    og, lo = alloc[oid], loss[oid]
                    gives.append((oid, og, [(c, lo[c] - lo[og]) for c in reversed(by_id[oid].counts) if c < og]))
                for jid in movable:
                    g, lj = alloc[jid], loss[jid]
                    g2 = next((c for c in by_id[jid].counts if c > g), 0)
                    if not g2 or lj[g] - lj[g2] <= 1e-9:
                        continue
                    gain, need = lj[g] - lj[g2], g2 - g - free
                    for oid, og, steps in gives:
                        if oid == jid:
                            continue
                        for c, rise in steps:
                            if og - c >= need:
                                if gain - rise > 1e-9:
                                    moves.append((gain - rise, jid, g2, oid, c))
                                break
            if not moves:
                break
            moves.sort(key=lambda m: -m[0])
            for _, jid, g2, giver, c in moves:
                old = (alloc[jid], alloc[giver] if giver is not None else 0)
                alloc[jid] = g2
                if giver is not None:
                    alloc[giver] = c
                if packs(alloc, cap, gpn):
                    break
                alloc[jid] = old[0]
                if giver is not None:
                    alloc[giver] = old[1]
            else:
                break
        return alloc

    def _admission_key(self, j: AllocJob) -> tuple[float, str]:
        """The order waiting jobs enter the search in: oldest first (Pollux's)."""
        return (j.submit, j.job_id)

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        """Whether admitting ``newcomer`` may shrink the running ``victim`` (Pollux's: any may)."""
        return True

    def _greedy(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        """From nothing (when the current allocation itself does not pack): oldest first at the
        smallest count (the current one if cheaper to keep), then free GPUs by marginal gain."""
        alloc: dict[str, int] = {}
        for j in jobs:
            if j.fixed:
                alloc[j.job_id] = j.current
        if not packs(alloc, cap, gpn):
            alloc = {}  # cannot happen on a consistent state; start from nothing rather than fail
        order = sorted((j for j in jobs if not j.fixed), key=lambda j: (j.submit, j.job_id))
        by_id = {j.job_id: j for j in jobs}
        total = sum(cap)
        used = sum(alloc.values())
        for j in order:  # admission, oldest first, at the smallest count (the current one if cheaper to keep)
            g = j.counts[0]
            if j.current and j.loss(j.current) <= j.loss(g):
                g = j.current
            if used + g > total:
                if used + j.counts[0] > total:
                    continue
                g = j.counts[0]
            alloc[j.job_id] = g
            if not packs(alloc, cap, gpn):
                if g != j.counts[0]:
                    alloc[j.job_id] = j.counts[0]
                    if packs(alloc, cap, gpn):
                        used += j.counts[0]
                        continue
                del alloc[j.job_id]
                continue
            used += g
        heap: list[tuple[float, str]] = []

        def push(j: AllocJob) -> None:
            g = alloc[j.job_id]
            best = 0.0
            lg = j.loss(g)
            for g2 in j.counts:
                if g2 <= g or g2 - g > total - used:
                    continue
                gain = (lg - j.loss(g2)) / (g2 - g)
                if gain > best:
                    best = gain
            if best > 0:
                heapq.heappush(heap, (-best, j.job_id))

        for jid in alloc:
            if not by_id[jid].fixed:
                push(by_id[jid])
        while heap and used < total:
            _, jid = heapq.heappop(heap)
            j = by_id[jid]
            g = alloc[jid]
            lg = j.loss(g)
            options = sorted(((lg - j.loss(g2)) / (g2 - g), g2) for g2 in j.counts if g < g2 <= g + total - used)
            took = False
            for gain, g2 in reversed(options):
                if gain <= 0:
                    break
                alloc[jid] = g2
                if packs(alloc, cap, gpn):
                    used += g2 - g
                    took = True
                    break
                alloc[jid] = g
            if took:
                push(j)
        return alloc

    # --- placements and decisions ------------------------------------------------------------
    def _decisions(self, state: SlotState, jobs: list[AllocJob], alloc: dict[str, int], cap: list[int], gpn: int,
                   nodes: int) -> SlotResult:
        by_id = {j.job_id: j for j in jobs}
        placed = place(alloc, by_id, cap, gpn)
        if placed is None:  # the kept layouts block the packing: place everything afresh
            placed = place(alloc, by_id, cap, gpn, keep=False)
        while placed is None:  # only jobs that cannot move can block it: drop the youngest movable job
            movable = [jid for jid in alloc if not by_id[jid].fixed]
            if not movable:
                return SlotResult(starts=(), q=sum(w.work for w in state.waiting),
                                  z=sum(state.now - w.submit_time for w in state.waiting))
            del alloc[max(movable, key=lambda x: (by_id[x].submit, x))]
            placed = place(alloc, by_id, cap, gpn, keep=False)
        preempt: list[str] = []
        starts: list[Decision] = []
        for r in state.running:
            j = by_id.get(r.job_id)
            new = placed.get(r.job_id)
            if j is None or j.fixed:
                continue
            if new is None or tuple(sorted(new)) != tuple(sorted(r.placement)):
                preempt.append(r.job_id)
        running_ids = {r.job_id for r in state.running}
        moved = set(preempt)
        for jid, pl in sorted(placed.items(), key=lambda kv: (by_id[kv[0]].submit, kv[0])):
            if jid in running_ids and jid not in moved:
                continue
            g = sum(k for _, k in pl)
            starts.append(Decision(job_id=jid, gpus=g, placement=tuple(sorted(pl)),
                                   reason=f"pollux: {g} GPUs, speed-up {1.0 / max(by_id[jid].loss(g), 1e-12):.2f}"))
        started = {d.job_id for d in starts}
        left = [w for w in state.waiting if w.job_id not in started]  # the queues, as the other baselines report them
        return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=sum(w.work for w in left),
                          z=sum(state.now - w.submit_time for w in left))
