"""Forms of the tenant virtual queue (issue 36), measured on benchmarks/fairness.py's held-out
workloads and its robustness sweep (docs/experiments.md, docs/fairness.md).

    python benchmarks/experiments/tenant_forms.py --form FORM [--quick] [--only design|heldout] [--names ...]
        [--policies ...] [--tenant-only] [--sweep] [--releases TENANT]

FORM:

* ``absolute`` (shipped before this study): Y_k = max(0, D_k - sigma E_k), D_k = E_k - R_k;
* ``normalised``: Y_k = Ebar * max(0, D_k / E_k - sigma), Ebar the mean entitlement of the
  tenants with a job waiting: the shortfall as a fraction of the tenant's own entitlement, at the
  mean tenant's scale (equal entitlements: the absolute form);
* ``grow`` (shipped since: it decides as lyasched's policies do): the normalised form with a
  slack that grows for tenants entitled to little: sigma_k = sigma + (G * slot) / E_k (a tenant
  is not behind by less than one slot of the whole cluster's GPU-time);
* ``bounded``: the normalised form with each tenant's Y_k at most ``tenant_cap`` x its absolute
  Y_k (how far the normalisation may reorder against the absolute form).

The credit per GPU over V*Theta is tenant_weight x (Y_k - min Y) / G^2 in every form. The forms
are subclasses here; the runs reuse benchmarks/fairness.py's workloads and figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fairness  # noqa: E402

from lyasched.policy import make_policy as _shipped  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.state import SlotState  # noqa: E402


class _Forms:
    """The tenant queue's Y_k in the form ``tenant_form`` (mixin over the shipped policies)."""

    tenant_form: str
    tenant_cap: float
    tenant_weight: float
    tenant_slack: float

    def _y(self, state: SlotState, k: str, ebar: float, total_gpus: int) -> float:
        book = state.tenants
        assert book is not None
        e = book.entitled.get(k, 0.0)
        d = book.deficit(k)
        absolute = max(0.0, d - self.tenant_slack * e)
        if self.tenant_form == "absolute" or e <= 0:
            return absolute
        slack = self.tenant_slack
        if self.tenant_form == "grow":
            slack += total_gpus * state.slot_len / e
        y = ebar * max(0.0, d / e - slack)
        if self.tenant_form == "bounded":
            y = min(y, self.tenant_cap * absolute)
        return y

    def _tenants_behind(self, state: SlotState, users: list[str], total_gpus: int) -> dict[str, float] | None:
        book = state.tenants
        names = set(users)
        if book is None or len(names) < 2:
            return None
        ents = [book.entitled.get(k, 0.0) for k in names]
        ebar = sum(ents) / len(ents)
        y = {k: self._y(state, k, ebar, total_gpus) for k in names}
        floor = min(y.values())
        if max(y.values()) - floor <= 0:
            return None
        scale = self.tenant_weight / (total_gpus * total_gpus)
        self._tenant_floor = (floor, scale)  # type: ignore[attr-defined]
        self._tenant_ebar = (ebar, total_gpus)  # type: ignore[attr-defined]
        return {k: scale * (v - floor) for k, v in y.items()}

    def tenant_behind(self, state: SlotState, tenant: str) -> float:
        if state.tenants is None or self._tenant_floor is None:  # type: ignore[attr-defined]
            return 0.0
        floor, scale = self._tenant_floor  # type: ignore[attr-defined]
        ebar, total = self._tenant_ebar  # type: ignore[attr-defined]
        return scale * max(0.0, self._y(state, tenant, ebar, total) - floor)


@dataclass
class LyapunovForms(_Forms, LyapunovPolicy):
    tenant_form: str = "absolute"
    tenant_cap: float = 4.0


@dataclass
class ElasticForms(_Forms, ElasticPolicy):
    tenant_form: str = "absolute"
    tenant_cap: float = 4.0


def make_policy(name: str, **kw):
    cls = {"lyapunov": LyapunovForms, "elastic": ElasticForms}.get(name)
    if cls is None:
        return _shipped(name, **kw)
    return cls(**kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--form", default="absolute", choices=("absolute", "normalised", "grow", "bounded"))
    ap.add_argument("--cap", type=float, default=4.0)
    ap.add_argument("--weight", type=float, default=None)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="heldout")
    ap.add_argument("--names", default=None)
    ap.add_argument("--policies", default="lyapunov,elastic")
    ap.add_argument("--releases", default=None, metavar="TENANT", help="print `releases` for TENANT, today and with the tenant queue")
    ap.add_argument("--tenant-only", action="store_true", help="skip the today runs (known)")
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p]
    extra = {"tenant_form": a.form, "tenant_cap": a.cap}
    if a.weight is not None:
        extra["tenant_weight"] = a.weight
    params = {p: dict(extra) for p in policies if p in fairness.TENANT_AWARE}
    fairness.make_policy = make_policy
    if a.sweep:
        out = fairness.sweep(a.quick, params)
        print(json.dumps({"form": a.form, "cap": a.cap, **out}))
        return
    rows = []
    names = tuple(a.names.split(",")) if a.names else None
    for w in fairness.workloads(a.quick, a.only):
        if names and not w["name"].startswith(names):
            continue
        if a.releases:
            for p in policies:
                for on in (False, True):
                    sim = fairness.Simulation(w["jobs"], w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"],
                                              shares=w["shares"], tenant_input=on)
                    res = sim.run(make_policy(p, seed=w["seed"], **params.get(p, {})), name=p)
                    f = fairness._figures(res, w["shares"])
                    print(json.dumps({"name": w["name"], "policy": p, "tenant_input": on, "tenant": a.releases,
                                      **releases(res, a.releases), **f}), flush=True)
            continue
        r = _run(w, policies, params, a.tenant_only)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    print(json.dumps({"form": a.form, "cap": a.cap, "workloads": rows}))


def releases(res, tenant: str) -> dict:
    """What a non-preemptive policy could have done for ``tenant`` in this run: its first
    arrival, its first start, and the GPU releases (segment ends of any job) in between: with
    none, no order of starts could have served it sooner."""
    mine = [r for r in res.records if r.job.user == tenant]
    a = min(r.job.submit_time for r in mine)
    b = min(r.first_start for r in mine)
    ends = sorted((s.end, s.gpus) for r in res.records for s in r.segments if a <= s.end < b)
    runs = [sum(s.end - s.start for s in r.segments) for r in mine]
    return {"jobs": len(mine), "first_arrival": a, "first_start": b, "releases_between": ends[:20],
            "n_releases_between": len(ends), "run_s_min": min(runs), "run_s_max": max(runs)}


def _run(w: dict, policies: list[str], params: dict, tenant_only: bool) -> dict:
    if not tenant_only:
        return fairness.run_one(w, policies, params)
    sim = fairness.Simulation(w["jobs"], w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"], shares=w["shares"])
    out: dict = {"name": w["name"], "policies": {}}
    for p in policies:
        res = sim.run(make_policy(p, seed=w["seed"], **params.get(p, {})), name=p)
        out["policies"][f"{p}/tenant"] = fairness._figures(res, w["shares"])
    return out


if __name__ == "__main__":
    main()
