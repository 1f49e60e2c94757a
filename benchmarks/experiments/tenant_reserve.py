"""Tenant order changes (docs/experiments.md, "Tenant order: a starved tenant's oldest job first,
a reservation, credit by wait (not adopted)").

    python benchmarks/experiments/tenant_reserve.py DESIGNS design|heldout|sym [POLICIES] [NAMES]

DESIGNS (comma-separated): ``shipped``; ``head@X``: a tenant whose received GPU-time is below
(1 - X) of its entitlement (less one slot of the cluster: `TenantBook.shortfall` with slack X),
the one furthest behind, has its oldest waiting jobs started first at their request while its
GPUs held stay below its entitled GPUs now (fairshare's order for that tenant), the other
tenants' jobs then follow the core's order on the GPUs left; ``resv@X``: the same, and when that
oldest job does not fit, its GPUs are reserved: the GPUs free now on the nodes it would get at the
earliest time it fits (running jobs' predicted ends) are withheld from the core, and only jobs
that end before then (at their request, shortest first) may start on them (EASY backfill);
``wait``: the tenant credit moved to the jobs that waited longest (`WaitCredit`); ``lend@H``: a
probe, tenants ahead may not start long jobs beyond their entitled GPUs (`lend_decide`).
Each design runs on benchmarks/fairness.py's workloads (``design``/``heldout``; NAMES: name
prefixes), with fairshare beside it, or on the symmetric seed groups (``sym``: JCT with tenant
input over without, seeds 0-4). POLICIES: lyapunov, elastic (elastic's core step takes the same
order; its swap step is unchanged; ``lend`` is lyapunov only).
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fairness as F  # noqa: E402
import lyasched.policy.elastic as E  # noqa: E402
from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.state import Decision, FreeGpus, SlotResult, SlotState, WaitingJob  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.fairness import tenant_summary  # noqa: E402
from lyasched.sim.metrics import summarize  # noqa: E402

_core = LyapunovPolicy.decide


def _one(job: WaitingJob, g: int) -> bool | None:
    """True: run on one node, False: across nodes, None: the request is not allowed."""
    if 1 <= g <= len(job.run_one_node) and math.isfinite(job.run_one_node[g - 1]):
        return True
    if 1 <= g <= len(job.run_multi_node) and math.isfinite(job.run_multi_node[g - 1]):
        return False
    return None


def starved(pol, state: SlotState) -> str | None:
    """The tenant furthest behind past the slack ``pol._rslack``, among those with a job waiting."""
    book = state.tenants
    if book is None:
        return None
    users = {w.user for w in state.waiting}
    if len(users) < 2:
        return None
    total = max(1, sum(state.free) + sum(r.gpus for r in state.running))
    pad = total * state.slot_len
    y = {k: book.shortfall(k, pol._rslack, pad) for k in users}
    k = max(sorted(y), key=y.__getitem__)
    return k if y[k] > 0 else None


def _when_fits(state: SlotState, g: int, one: bool) -> tuple[float, list[int]] | None:
    """The earliest predicted time ``g`` GPUs fit, and the nodes they would take then."""
    free = list(state.free)
    ends = sorted(((r.predicted_end if math.isfinite(r.predicted_end) else r.expected_end), i)
                  for i, r in enumerate(state.running))
    for t, i in ends:
        for node, k in state.running[i].placement:
            free[node] += k
        f = FreeGpus(tuple(free), state.gpus_per_node)
        if f.fits(g, one):
            pl = f.take(g, one)
            assert pl is not None
            return t, [n for n, _ in pl]
    return None


def reserve_decide(pol, state: SlotState) -> SlotResult:
    """The core's decision with a starved tenant's oldest jobs first (and its reservation)."""
    if state.node_types or not state.waiting:
        return _core(pol, state)
    k = starved(pol, state)
    if k is None:
        return _core(pol, state)
    book = state.tenants
    assert book is not None
    free = FreeGpus(tuple(state.free), state.gpus_per_node)
    mine = sorted((w.submit_time, i) for i, w in enumerate(state.waiting) if w.user == k)
    room = book.rate.get(k, 0.0) - book.held.get(k, 0.0)
    first: list[Decision] = []
    taken: set[int] = set()
    blocked: tuple[WaitingJob, bool] | None = None
    for _, i in mine:
        w = state.waiting[i]
        g = w.requested_gpus
        one = _one(w, g)
        if one is None:
            continue
        if g > room + 1e-9:
            break
        if not free.fits(g, one):
            blocked = (w, one)
            break
        pl = free.take(g, one)
        assert pl is not None
        first.append(Decision(w.job_id, g, pl, 0.0, f"head of starved tenant {k}"))
        taken.add(i)
        room -= g
    held: dict[int, int] = {}
    t_res = math.inf
    if blocked is not None and pol._reserve:
        w, one = blocked
        at = _when_fits(state, w.requested_gpus, one)
        if at is not None:
            t_res, nodes = at
            left = w.requested_gpus
            for n in nodes:
                h = min(free.free[n], left)
                if h > 0:
                    held[n] = h
                    left -= h
    core_free = list(free.free)
    for n, h in held.items():
        core_free[n] -= h
    rest = tuple(w for i, w in enumerate(state.waiting) if i not in taken)
    sub = dataclasses.replace(state, free=tuple(core_free), waiting=rest)
    if not rest:
        base = SlotResult(starts=(), q=0.0, z=0.0)
    elif sum(core_free) == 0:
        base = SlotResult(starts=(), q=sum(j.work for j in rest),
                          z=sum(max(0.0, state.now - j.submit_time) for j in rest), info={"wake_at": math.inf})
    else:
        base = _core(pol, sub)
    more: list[Decision] = []
    if held:  # EASY backfill on the reserved GPUs: jobs that end before the reservation
        hf = FreeGpus(tuple(held.get(n, 0) for n in range(len(state.free))), state.gpus_per_node)
        done = {d.job_id for d in base.starts}
        cand = []
        for w in rest:
            if w.job_id in done:
                continue
            g = w.requested_gpus
            one = _one(w, g)
            if one is None:
                continue
            run = w.run_time(g, not one)
            if state.now + run <= t_res:
                cand.append((g * run, w.job_id, g, one))
        for _, jid, g, one in sorted(cand):
            if hf.fits(g, one):
                pl = hf.take(g, one)
                assert pl is not None
                more.append(Decision(jid, g, pl, 0.0, "backfill before a reservation"))
            if hf.total == 0:
                break
    starts = tuple(first) + tuple(base.starts) + tuple(more)
    gone = {d.job_id for d in first} | {d.job_id for d in more}
    q = base.q - sum(w.work for w in state.waiting if w.job_id in gone)
    z = base.z - sum(max(0.0, state.now - w.submit_time) for w in state.waiting if w.job_id in gone)
    info = dict(base.info)
    if first or more:
        info.pop("wake_at", None)  # something started: the caller decides again anyway
    elif held and "wake_at" in info:
        info["wake_at"] = min(info["wake_at"], t_res)
    return SlotResult(starts=starts, preempt=base.preempt, q=q, z=z, info=info)


def lend_decide(pol, state: SlotState) -> SlotResult:
    """Probe (``lend@H``): a tenant past 1.05 of its entitlement may not start a job predicted to run
    longer than H seconds at its request that takes its GPUs held above its entitled GPUs now."""
    book = state.tenants
    if state.node_types or book is None or len({w.user for w in state.waiting}) < 2:
        return _core(pol, state)
    keep = []
    for w in state.waiting:
        k, g = w.user, w.requested_gpus
        e = book.entitled.get(k, 0.0)
        one = _one(w, g)
        if (one is not None and e > 0 and book.received.get(k, 0.0) > 1.05 * e
                and book.held.get(k, 0.0) + g > book.rate.get(k, 0.0) and w.run_time(g, not one) > pol._lend):
            continue
        keep.append(w)
    if len(keep) == len(state.waiting):
        return _core(pol, state)
    if not keep:
        return SlotResult(starts=(), q=sum(j.work for j in state.waiting),
                          z=sum(max(0.0, state.now - j.submit_time) for j in state.waiting))
    res = _core(pol, dataclasses.replace(state, waiting=tuple(keep)))
    kept = {id(w) for w in keep}
    out = [w for w in state.waiting if id(w) not in kept]
    info = dict(res.info)
    info.pop("wake_at", None)  # the held-back jobs may become startable at any slot
    return SlotResult(starts=res.starts, preempt=res.preempt, q=res.q + sum(j.work for j in out),
                      z=res.z + sum(max(0.0, state.now - j.submit_time) for j in out), info=info)


class _Shim:
    """What elastic's decide calls as its core (`LyapunovPolicy.decide`) in this process."""

    @staticmethod
    def decide(pol, state: SlotState) -> SlotResult:
        return reserve_decide(pol, state) if getattr(pol, "_rslack", None) is not None else _core(pol, state)


E.LyapunovPolicy = _Shim  # type: ignore[misc,assignment]


class WaitCredit:
    """Mixin: each waiting job's tenant credit times (its wait + a slot) / (the mean wait + a slot):
    the same credit on average, moved to the jobs that have waited longest (``wait`` design)."""

    def _tenant_credit(self, state, vtheta, total_gpus, codes=None):
        c = super()._tenant_credit(state, vtheta, total_gpus, codes)  # type: ignore[misc]
        if c is None:
            return None
        w = np.maximum(0.0, state.now - np.fromiter((j.submit_time for j in state.waiting), float,
                                                    count=len(state.waiting)))
        return c * (w + state.slot_len) / (float(w.mean()) + state.slot_len)

    def _wake_at_tenants(self, state, *a):  # the credit grows with each job's wait: decide every slot
        return state.now + state.slot_len


class LyaWait(WaitCredit, LyapunovPolicy):
    pass


class ElWait(WaitCredit, E.ElasticPolicy):
    pass


def build(policy: str, design: str, seed: int):
    if design == "wait":
        return (LyaWait if policy == "lyapunov" else ElWait)(seed=seed)
    pol = make_policy(policy, seed=seed)
    if design == "shipped":
        return pol
    kind, _, x = design.partition("@")
    if kind == "lend":
        pol._lend = float(x)
        pol.decide = lambda st, _p=pol: lend_decide(_p, st)
        return pol
    pol._rslack = float(x)
    pol._reserve = kind == "resv"
    if policy == "lyapunov":
        pol.decide = lambda st, _p=pol: reserve_decide(_p, st)
    return pol


def main() -> None:
    designs = sys.argv[1].split(",")
    which = sys.argv[2]
    pols = sys.argv[3].split(",") if len(sys.argv) > 3 else ["lyapunov"]
    names = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    if which == "sym":
        from lyasched.sim.workloads import load_workload
        for p in pols:
            for d in designs:
                r = []
                for g in ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty"):
                    for seed in range(5):
                        w = load_workload(g, seed=seed)
                        j = {}
                        for on in (False, True):
                            sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=on)
                            j[on] = summarize(sim.run(build(p, d, seed), name=p))["avg_jct_s"]
                        r.append((f"{g}@{seed}", j[True] / j[False]))
                v = [x for _, x in r]
                print(f"sym {p} {d}: within 2% {sum(x <= 1.02 for x in v)}/20 gmean "
                      f"{math.exp(sum(map(math.log, v)) / len(v)):.3f} max {max(v):.3f}",
                      [f"{n} {x:.3f}" for n, x in r if x > 1.02], flush=True)
        return
    for w in F.workloads(False, which):
        if names and not any(w["name"].startswith(n) for n in names):
            continue
        kw = dict(seed=w["seed"], end_fraction=w["end_fraction"], shares=w["shares"])
        sim = Simulation(w["jobs"], w["cluster"], **kw)
        fs = sim.run(make_policy("fairshare", seed=w["seed"]), name="fairshare")
        fj = summarize(fs)["avg_jct_s"]
        fw = tenant_summary(fs, w["shares"])[1]["worst_share_ratio"]
        print(f"{w['name'][:20]:20s} fairshare jct {fj:.0f} worst {fw:.3f}", flush=True)
        for p in pols:
            for d in designs:
                res = Simulation(w["jobs"], w["cluster"], **kw).run(build(p, d, w["seed"]), name=p)
                j = summarize(res)["avg_jct_s"]
                f = tenant_summary(res, w["shares"])[1]
                print(f"{w['name'][:20]:20s} {p:8s} {d:10s} jct {j:.0f} ({j / fj:.2f}x) worst "
                      f"{f['worst_share_ratio']:.3f} ({f['worst_share_ratio'] - fw:+.3f}) {f['worst_share_tenant']} "
                      f"wall {res.wall_s:.1f}", flush=True)


if __name__ == "__main__":
    main()
