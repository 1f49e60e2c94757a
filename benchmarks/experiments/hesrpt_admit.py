"""Experiment: which running jobs an arrival may shrink under `hesrpt` (lyasched/policy/hesrpt.py)
on Pollux's benchmark (docs/experiments.md, "hesrpt: which running job an arrival may shrink").
Design set: workloads 1-4 at 0.5x and 2.0x; held out: workloads 5-8 and the 1.5x load.

    python benchmarks/experiments/hesrpt_admit.py --designs "before;soon:60;work:1;wide:1" [--loads 0.5,2.0]
        [--workloads 1-4] [--where DESIGN]

Designs (``;`` between them). Shipped: ``hesrpt`` (an arrival waits for the GPUs of running jobs
that end within the slot instead of shrinking one, for at most a slot from its submission:
``soon`` at S = the slot, 60 s here, bounded), ``pollux``.
Each other design is a change to ``before``, hesrpt without that rule (any arrival may shrink):

* ``before``: hesrpt without the rule;
* ``soon:S``: the shipped rule with S seconds instead of the slot;
* ``gpus:S``: ``soon:S``, but an arrival may still shrink a victim whose restart idles no more
  GPU-seconds (its GPUs x its move cost) than the arrival's wait would (its GPUs x S);
* ``soonc:S``: as ``soon``, each arrival that waits claiming its GPUs of theirs, so the next
  arrival may shrink a running job when what finishes is claimed;
* ``work:K``: an arrival may shrink a running job only when its own work (GPU-seconds at its
  smallest count) exceeds K x the GPU-seconds the victim's restart idles (its move cost x its
  GPUs); otherwise it waits for free GPUs (a 1-GPU, one-minute job does not restart a 32-GPU one);
* ``run:K``: an arrival may shrink a running job only when its remaining time at its smallest
  count exceeds K x the victim's move cost;
* ``wide:A``: a running job's change of count charged ``1 + A x max(current, new) / fair`` times
  the shipped charge (fair: GPUs / jobs): a restart idles all the GPUs it holds.

``need`` (docs/experiments.md: the victim's rise per GPU the arrival still needs) was measured with
a hook in pollux's admission loop (``rise / min(g - c, need)``, need = the GPUs still missing) that
is not kept.

``--where NAME``: per application, pollux against design NAME (hesrpt_lowload.py's table).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.allocation import AllocJob  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted  # noqa: E402


@dataclass
class Before(HesrptPolicy):
    """hesrpt before the one-slot wait (any arrival may shrink a running job): what the designs
    below, but ``soon``, change."""

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        return True


@dataclass
class Work(HesrptPolicy):
    k: float = 1.0

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        cost = victim.charge / self.move_charge if isinstance(victim, _Weighted) and self.move_charge else self.move_cost
        g0 = newcomer.counts[0]
        return newcomer.rem[g0] * g0 > self.k * cost * victim.current


@dataclass
class Run(HesrptPolicy):
    k: float = 2.0

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        cost = victim.charge / self.move_charge if isinstance(victim, _Weighted) and self.move_charge else self.move_cost
        return newcomer.rem[newcomer.counts[0]] > self.k * cost


@dataclass
class _Wide(_Weighted):
    base_charge: float = 0.0  # the shipped charge (move_charge x move cost)
    per: float = 0.0  # extra charge per GPU held over the fair share

    def loss(self, g: int) -> float:
        if self.current and g != self.current and not self.fixed:
            self.charge = self.base_charge * (1.0 + self.per * max(self.current, g))
        return super().loss(g)


@dataclass
class Wide(Before):
    a: float = 1.0

    def _allocate(self, jobs, cap, gpn):
        fair = max(1, sum(cap) // max(1, len(jobs)))
        for i, j in enumerate(jobs):
            if isinstance(j, _Weighted) and j.current:
                jobs[i] = _Wide(**{f: getattr(j, f) for f in j.__dataclass_fields__}, base_charge=j.charge,
                                per=self.a / fair)
        return super()._allocate(jobs, cap, gpn)


@dataclass
class Soon(Before):
    soon: float = 60.0
    _soon_free: int = 0

    def _allocate(self, jobs, cap, gpn):
        self._soon_free = sum(j.current for j in jobs if j.current and j.rem.get(j.current, math.inf) <= self.soon)
        return super()._allocate(jobs, cap, gpn)

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        return newcomer.counts[0] > self._soon_free


@dataclass
class SoonClaim(Soon):
    """Soon, each waiting arrival claiming its GPUs of the finishing jobs' (the rest may shrink)."""

    _claims: dict = field(default_factory=dict)

    def _allocate(self, jobs, cap, gpn):
        self._claims = {}
        return super()._allocate(jobs, cap, gpn)

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        if newcomer.job_id in self._claims:
            return False
        g0 = newcomer.counts[0]
        if self._soon_free - sum(self._claims.values()) >= g0:
            self._claims[newcomer.job_id] = g0
            return False
        return True


@dataclass
class GpuSec(Soon):
    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        if super()._may_shrink(victim, newcomer):
            return True
        cost = victim.charge / self.move_charge if isinstance(victim, _Weighted) and self.move_charge > 0 else self.move_cost
        return victim.current * cost <= newcomer.counts[0] * self.soon


def build(design: str):
    name, _, arg = design.partition(":")
    if name in ("pollux", "hesrpt"):
        return make_policy(name)
    if name == "before":
        return Before()
    if name == "work":
        return Work(k=float(arg))
    if name == "wide":
        return Wide(a=float(arg))
    if name == "soon":
        return Soon(soon=float(arg))
    if name == "gpus":
        return GpuSec(soon=float(arg))
    if name == "soonc":
        return SoonClaim(soon=float(arg))
    if name == "run":
        return Run(k=float(arg))
    raise SystemExit(f"unknown design {design!r}")


def one(args):
    data, load, k, design = args
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    r = sim.run(build(design))
    s = summarize(r)
    jobs = [(x.job.job_id, x.job.profile.model, x.jct, x.preemptions, x.gpu_s) for x in r.records]
    return load, k, design, s["avg_jct_s"] / 3600.0, s["preemptions"], jobs


def main() -> None:
    from hesrpt_lowload import where

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux"))
    ap.add_argument("--designs", default="hesrpt;work:1")
    ap.add_argument("--loads", default="0.5,2.0")
    ap.add_argument("--workloads", default="1-4")
    ap.add_argument("--where", default="")
    a = ap.parse_args()
    designs = [d for d in (a.where or a.designs).split(";") if d and d != "pollux"]
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res = {}
    with ProcessPoolExecutor(2) as ex:
        for ld, k, d, h, mv, jobs in ex.map(one, [(a.data, ld, k, d) for ld in loads for k in ks for d in ["pollux", *designs]]):
            res[ld, k, d] = (h, mv, jobs)
    if a.where:
        for ld in loads:
            where(ld, [res[ld, k, "pollux"][2] for k in ks], [res[ld, k, designs[0]][2] for k in ks], designs[0])
    for d in designs:
        for ld in loads:
            mean = sum(res[ld, k, d][0] for k in ks) / sum(res[ld, k, "pollux"][0] for k in ks)
            worst = max(res[ld, k, d][0] / res[ld, k, "pollux"][0] for k in ks)
            mv = sum(res[ld, k, d][1] for k in ks)
            print(f"{d} load {ld}: mean {mean:.3f} of pollux, worst workload {worst:.3f}, moves {mv}", flush=True)


if __name__ == "__main__":
    main()
