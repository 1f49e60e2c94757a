"""Usage decay and the tenant credit (docs/experiments.md, "Tenant credit from decayed GPU-time").

    python benchmarks/experiments/tenant_decay.py H[,H2] design|heldout|sym [POLICIES] [NAMES]

Each policy runs on benchmarks/fairness.py's workloads (``design``/``heldout``, NAMES: name
prefixes) or on the symmetric seed groups (``sym``: JCT with tenant input over without) with the
simulator's tenant ledger replaced by one whose books carry GPU-seconds received and entitled
decayed with a half-life of H days (Slurm's PriorityDecayHalfLife is 7) in place of the whole-run
sums, so lyapunov's and elastic's tenant credit reads recent deficits; ``fairshare`` in
POLICIES reads its usage with that half-life instead of 7 days (its `TenantBook.usage`); H = 0:
the shipped ledger. The worst share is measured as always (benchmarks/fairness.py's own ledger,
undecayed). The books' `TenantBook.at` still extrapolates linearly (the wake-up bound), which is
close enough for a probe, not for shipping.
"""
import functools
import math
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fairness as F
import lyasched.sim.simulator as S
from lyasched.policy.tenants import TenantLedger, TenantBook, decay_all
from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.fairness import tenant_summary
from lyasched.sim.metrics import summarize


class DecayLedger(TenantLedger):
    """A ledger whose books give decayed received (``usage``) and decayed entitled GPU-seconds."""

    def advance(self, t):
        if math.isfinite(self.t) and t - self.t > 0:
            dt = t - self.t
            rate = self.rates()
            ent = getattr(self, "_ent_use", {})
            for k in set(rate) | set(ent):
                ent[k] = ent.get(k, 0.0)
            self._ent_use = decay_all(ent, rate, dt, self.half_life)
        super().advance(t)

    def book(self, t):
        b = super().book(t)
        ent = dict(getattr(self, "_ent_use", {}))
        dt = t - self.t if math.isfinite(self.t) else 0.0
        if dt > 0:
            ent = decay_all({k: ent.get(k, 0.0) for k in set(ent) | set(b.rate)}, b.rate, dt, self.half_life)
        for k in b.entitled:
            ent.setdefault(k, 0.0)
        return TenantBook(b.shares, dict(b.usage), ent, b.held, b.rate, b.usage, b.half_life)


def main() -> None:
    hls = [float(x) for x in sys.argv[1].split(",")]
    which = sys.argv[2]
    pols = sys.argv[3].split(",") if len(sys.argv) > 3 else ["lyapunov", "elastic"]
    names = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    for hl in hls:
        fs_only = pols == ["fairshare"]  # fairshare reads only ``usage``: the plain ledger with another half-life
        S.TenantLedger = (TenantLedger if hl <= 0 else functools.partial(TenantLedger if fs_only else DecayLedger,
                                                                          half_life=hl * 86400))
        if which == "sym":
            from lyasched.sim.workloads import load_workload
            out = {p: [] for p in pols}
            for g in ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty"):
                for seed in range(5):
                    w = load_workload(g, seed=seed)
                    for p in pols:
                        j = {}
                        for on in (False, True):
                            sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=on)
                            j[on] = summarize(sim.run(make_policy(p, seed=seed), name=p))["avg_jct_s"]
                        out[p].append((f"{g}@{seed}", j[True] / j[False]))
            for p, v in out.items():
                r = [x for _, x in v]
                print(f"hl {hl} {p} sym within 2%: {sum(x <= 1.02 for x in r)}/20 gmean {math.exp(sum(map(math.log, r)) / 20):.3f} max {max(r):.3f}",
                      [f"{n} {x:.3f}" for n, x in v if x > 1.02], flush=True)
            continue
        for w in F.workloads(False, which):
            if names and not any(w["name"].startswith(n) for n in names):
                continue
            for p in pols:
                sim = Simulation(w["jobs"], w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"], shares=w["shares"])
                res = sim.run(make_policy(p, seed=w["seed"]), name=p)
                t, f = tenant_summary(res, w["shares"])
                print(f"hl {hl} {p:9s} {w['name'][:18]:18s} jct {summarize(res)['avg_jct_s']:.0f} worst {f['worst_share_ratio']:.3f} {f['worst_share_tenant']}", flush=True)


if __name__ == "__main__":
    main()
