"""A Gavel-style heterogeneity-aware baseline (Gavel, OSDI 2020), round-based (docs/baselines.md).

Gavel allocates each round the GPU types that maximise the jobs' summed *normalised throughput*
(a job's throughput on a type over its throughput on its best type), every job at the GPU count
and batch its user set. This version, simple and round-based:

* every ``round_s`` seconds (Gavel's 6-minute rounds) the jobs are ranked by least attained
  GPU-time (Gavel's LAS objective; the submit time breaks ties) and admitted in that order while
  their requested GPUs fit the cluster; admitted running jobs keep their GPUs, the others are
  preempted (checkpointable ones only);
* the admitted waiting jobs then take types greedily by normalised throughput: the job whose
  best type gains it most over its worst goes first, each to the best type (of those it allows)
  where its request still fits, else the next;
* between rounds free GPUs go to waiting jobs in the same order (work conservation).

Where it differs from Gavel: no linear program and no time-sharing of a round between jobs (a
job holds its GPUs a whole round or not at all), and a running job is not moved to another type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from lyasched.policy.state import Capabilities, Decision, FreeGpus, SlotResult, SlotState, WaitingJob


def _count(w: WaitingJob) -> int:
    """The job's request, or the allowed count nearest to it (its batch is fixed: its rows)."""
    ok = [g for g in range(1, len(w.run_one_node) + 1) if math.isfinite(w.run_time(g, False)) or math.isfinite(w.run_time(g, True))]
    if not ok:
        return 0
    return min(ok, key=lambda g: (abs(g - w.requested_gpus), g))


def _run(w: WaitingJob, g: int) -> float:
    return min(w.run_time(g, False), w.run_time(g, True))


@dataclass
class Gavel:
    round_s: float = 360.0
    seed: int = 0
    name: str = "gavel"
    capabilities: ClassVar[Capabilities] = Capabilities(preemptive=True)

    def decide(self, state: SlotState) -> SlotResult:
        types = list(dict.fromkeys(state.node_types)) or [""]
        node_type = state.node_types or ("",) * len(state.free)
        boundary = int(state.now // self.round_s) != int((state.now - state.slot_len) // self.round_s)
        free = list(state.free)
        preempt: list[str] = []
        if boundary:  # admit by least attained service; the rest of the running jobs give way
            total = sum(state.free) + sum(r.gpus for r in state.running)
            ranked = sorted([(r.attained, 0.0, r.job_id, r) for r in state.running]
                            + [(w.attained, w.submit_time, w.job_id, w) for w in state.waiting], key=lambda e: e[:3])
            room = total
            for _, _, _, x in ranked:
                g = x.gpus if not isinstance(x, WaitingJob) else _count(x)
                if g and g <= room:
                    room -= g
                elif not isinstance(x, WaitingJob) and x.preemptible:
                    preempt.append(x.job_id)
                    for n, k in x.placement:
                        free[n] += k
        pools = {t: FreeGpus(tuple(f if node_type[i] == t else 0 for i, f in enumerate(free)), state.gpus_per_node)
                 for t in types}
        cands = []
        for w in sorted(state.waiting, key=lambda w: (w.attained, w.submit_time, w.job_id)):
            rows = w.by_type if (w.by_type is not None and state.node_types) else {t: w for t in types}
            thr = {}
            for t, v in rows.items():
                g = _count(v)
                if t in pools and g and math.isfinite(_run(v, g)):
                    thr[t] = (g, 1.0 / _run(v, g), v)
            if thr:
                cands.append((w, thr))
        starts: list[Decision] = []
        left = sum(p.total for p in pools.values())
        if boundary:  # the admitted ones (fit the room left), then types by normalised-throughput spread
            admitted, room = [], left
            for w, thr in cands:
                g = min(x[0] for x in thr.values())
                if g <= room:
                    room -= g
                    admitted.append((w, thr))
            cands = sorted(admitted, key=lambda c: -(max(x[1] for x in c[1].values()) / min(x[1] for x in c[1].values())))
        for w, thr in cands:
            best = max(x[1] for x in thr.values())
            for t in sorted(thr, key=lambda t: -thr[t][1]):
                g, speed, v = thr[t]
                pool = pools[t]
                one = math.isfinite(v.run_time(g, False)) and pool.fits(g, True)
                if not one and not (math.isfinite(v.run_time(g, True)) and pool.fits(g, False)):
                    continue
                pl = pool.take(g, one)
                if pl is not None:
                    starts.append(Decision(w.job_id, g, pl, score=speed / best, reason=f"gavel: type {t or 'any'}, normalised throughput {speed / best:.2f}"))
                    break
        started = {d.job_id for d in starts}
        still = [w for w in state.waiting if w.job_id not in started]
        q = sum(w.work for w in still)
        z = sum(max(0.0, state.now - w.submit_time) for w in still)
        return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=q, z=z)
