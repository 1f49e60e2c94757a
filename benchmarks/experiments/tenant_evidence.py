"""The tenant credit only for a deficit that chance does not explain: runs a benchmark script with
`TenantBook.shortfall` patched so that a tenant counts as behind only past a threshold that
grows with the evidence its entitlement gives (docs/experiments.md, "Tenant credit past a
confidence bound").

    python benchmarks/experiments/tenant_evidence.py DESIGN SCRIPT [SCRIPT'S ARGS...]

DESIGN (the grain g is the mean work of the waiting jobs, Q/n, GPU-seconds of one job on one GPU):
  shipped   no change;
  conf:Z    behind only past slack x E + pad + Z sqrt(E g): the deficit of a tenant entitled to
            E / g jobs' worth varies by about sqrt(E g) by chance (so the relative slack shrinks
            as 1 / sqrt(jobs));
  conft:Z   conf:Z with g the mean work of the tenant's own waiting jobs;
  gate:Z    conft:Z's bound as a gate: a tenant past it is behind by the shipped shortfall (past
            the slack and the pad only), one short of it not at all;
  grain:C   behind only past slack x E + pad + C g (a tenant owed less than C mean jobs is not).
The patch is in this process only; wake-up bounds read the patched shortfall at their ends.
"""

from __future__ import annotations

import math
import runpy
import sys

from lyasched.policy import lyapunov
from lyasched.policy.tenants import TenantBook

_GRAIN = [0.0]
_OWN: dict[str, float] = {}


def install(design: str) -> None:
    if design == "shipped":
        return
    kind, _, val = design.partition(":")
    c = float(val)
    if kind not in ("conf", "conft", "gate", "grain"):
        raise SystemExit(f"Error: unknown design {design!r}")
    base_behind = lyapunov.LyapunovPolicy._tenants_behind

    def behind(self, state, users, total_gpus):
        n = len(state.waiting)
        _GRAIN[0] = sum(w.work for w in state.waiting) / n if n else 0.0
        if kind in ("conft", "gate"):
            tot: dict[str, list[float]] = {}
            for w in state.waiting:
                t = tot.setdefault(w.user, [0.0, 0.0])
                t[0] += w.work
                t[1] += 1
            _OWN.clear()
            _OWN.update({k: a / b for k, (a, b) in tot.items()})
        return base_behind(self, state, users, total_gpus)

    def shortfall(self, tenant, slack, pad):
        e = self.entitled.get(tenant, 0.0)
        if e <= 0:
            return 0.0
        g = _OWN.get(tenant, _GRAIN[0]) if kind in ("conft", "gate") else _GRAIN[0]
        extra = c * math.sqrt(e * g) if kind != "grain" else c * g
        if kind == "gate":
            d = self.deficit(tenant) - slack * e - pad
            return max(0.0, d) / e if d > extra else 0.0
        return max(0.0, self.deficit(tenant) - slack * e - pad - extra) / e

    lyapunov.LyapunovPolicy._tenants_behind = behind  # type: ignore[method-assign]
    TenantBook.shortfall = shortfall  # type: ignore[method-assign]


def main() -> None:
    if len(sys.argv) < 3:
        print("usage: tenant_evidence.py DESIGN SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    install(sys.argv[1])
    script = sys.argv[2]
    sys.argv = [script, *sys.argv[3:]]
    sys.path.insert(0, script.rsplit("/", 1)[0] if "/" in script else ".")
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
