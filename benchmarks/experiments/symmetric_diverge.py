"""Where the tenant queue first changes a symmetric-tenant schedule, and which path of the
tenant term did it (docs/experiments.md, "Tenant credit past a confidence bound"). For each case
(group@seed:policy) the replay runs without tenant input (each decide call recorded), then with
it; at the first action (starts or preemptions) that differs from the reference's, the tenant
run's state is decided again on copies of the policy, without tenants and with the credit off
(``tenant_slack`` 1e9). ``cause``:

* ``credit``: the same time, and the state without tenants gives the reference's decision: the
  tenant input moved it; ``no_start_credit_gives_nt`` says whether the credit past the slack
  alone did (for elastic this includes the swap's tenant term, which reads the same credit), and
  ``tenants`` lists the tenants behind then (shortfall y past the slack and pad, deficit,
  entitled and received GPU-s, credit in seconds per GPU);
* ``nt-wake-skip`` / ``slot+credit``: the reference skipped this time (its wake-up rule) and its
  policy would / would not have made this run's decision here;
* ``tenant-run-skipped``: the reference acted at a time this run did not decide;
* ``state``: the state without tenants still decides otherwise (something else differs).

    python benchmarks/experiments/symmetric_diverge.py CASES    # one JSON line per case
    CASES: comma-separated group@seed:policy, e.g. seed-small-scattered@3:lyapunov
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import load_workload


def _key(res) -> tuple:
    return (tuple(sorted((d.job_id, d.gpus, tuple(d.placement)) for d in res.starts)),
            tuple(sorted(getattr(res, "preempt", ()) or ())))


class Recorder:
    """Wraps a policy: logs (t, decision) per decide call; with ``ref``, stops at the first
    difference and analyses it."""

    def __init__(self, inner, ref=None):
        self.inner, self.ref, self.log, self.found = inner, ref, [], None
        for k in ("name", "capabilities", "types_aware"):
            if hasattr(inner, k):
                setattr(self, k, getattr(inner, k))

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def decide(self, state):
        probe = copy.deepcopy(self.inner) if self.ref is not None and self.found is None else None
        res = self.inner.decide(state)
        k = _key(res)
        self.log.append((state.now, k))
        if probe is not None:
            acts = [a for a in self.ref if a[1] != ((), ())]
            mine = [a for a in self.log if a[1] != ((), ())]
            i = len(mine) - 1 if k != ((), ()) else len(mine)
            nxt = acts[i] if i < len(acts) else None
            if k != ((), ()):  # an action: the same as the reference's next one?
                if nxt is None or nxt != (state.now, k):
                    self.found = self.analyse(state, res, probe, nxt)
            elif nxt is not None and nxt[0] <= state.now:  # the reference acted by now; this run did not
                self.found = self.analyse(state, res, probe, nxt)
        return res

    def analyse(self, state, res, probe, nxt):
        """``nxt``: the reference's next action (t, decision) at the point this run differs."""
        ref_at = dict(self.ref)
        out = {"t": state.now, "tenant_decision": _key(res), "nt_next_action": nxt,
               "nt_called_at_t": state.now in ref_at}
        nt = copy.deepcopy(probe).decide(dataclasses.replace(state, tenants=None))
        out["nt_policy_on_this_state"] = _key(nt)
        if nxt is not None and nxt[0] < state.now:
            out["cause"] = "tenant-run-skipped"  # the reference acted at a time this run did not decide
            return out
        if state.now not in ref_at:
            # the reference skipped this time; would it have acted here?
            out["cause"] = "nt-wake-skip" if _key(nt) == _key(res) else "slot+credit"
            if _key(nt) == _key(res):
                return out
        elif _key(nt) != ref_at[state.now]:
            out["cause"] = "state"
            return out
        total = max(1, sum(state.free) + sum(r.gpus for r in state.running))
        book = state.tenants
        users = [w.user for w in state.waiting]
        behind = probe._tenants_behind(state, users, total)
        out["credit_present"] = behind is not None
        if behind is not None:
            pad = total * state.slot_len
            out["tenants"] = {k: {"y": round(book.shortfall(k, probe.tenant_slack, pad), 4),
                                  "deficit": round(book.deficit(k)), "entitled": round(book.entitled.get(k, 0.0)),
                                  "received": round(book.received.get(k, 0.0)),
                                  "credit_s_per_gpu": round(probe.V * v, 2)}
                              for k, v in behind.items()}
        p2 = copy.deepcopy(probe)
        p2.tenant_slack = 1e9
        out["no_start_credit_gives_nt"] = _key(p2.decide(state)) == _key(nt)
        out.setdefault("cause", "credit" if behind is not None else "other-tenant-path")
        return out


def run_case(group: str, seed: int, policy: str) -> dict:
    w = load_workload(group, seed=seed)

    def sim(t):
        return Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=t)

    base = Recorder(make_policy(policy, seed=seed))
    jn = summarize(sim(False).run(base, name=policy))["avg_jct_s"]
    rec = Recorder(make_policy(policy, seed=seed), ref=base.log)
    jt = summarize(sim(True).run(rec, name=policy))["avg_jct_s"]
    return {"case": f"{group}@{seed}:{policy}", "ratio": jt / jn, "calls": [len(base.log), len(rec.log)],
            "first": rec.found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases")
    a = ap.parse_args()
    for c in a.cases.split(","):
        gs, _, p = c.partition(":")
        g, _, s = gs.partition("@")
        r = run_case(g, int(s), p or "lyapunov")
        print(json.dumps(r, default=str), flush=True)


if __name__ == "__main__":
    sys.exit(main())
