"""Which slower type a job may take in a typed slot: the shipped backlog rule against the rule
before it and a stretch bound (docs/experiments.md, "Which slower GPU type a job may take").

    python benchmarks/experiments/type_choice.py pollux design|heldout [--designs before,stretch]
    python benchmarks/experiments/type_choice.py table [--designs before,stretch] [--workloads "W;W"]

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
* ``before``: no such rule (the decision before the backlog rule).

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
from typing import ClassVar

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from lyasched.policy import POLICIES  # noqa: E402
from lyasched.policy.bytype import decide_by_type  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.state import SlotState  # noqa: E402


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


def _typed(policy, state: SlotState, decide):
    if policy.design == "reserve":
        return decide_by_type(policy, reserve_views(state), decide)  # on top of the backlog rule
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


def _register(designs: list[str]) -> list[str]:
    names = []
    for d in designs:
        for base in ("lyapunov", "elastic"):
            POLICIES[f"{base}-{d}"] = f"type_choice:{base.capitalize()}{d.capitalize()}"
            names.append(f"{base}-{d}")
    return names


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
    bad = [d for d in designs if d not in ("before", "stretch", "reserve")]
    if bad:
        ap.exit(2, f"type_choice.py: unknown design {bad[0]!r} (before, stretch, reserve)\n")
    res = pollux(a.set, designs) if a.what == "pollux" else table(designs, a.workloads.split(";"))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
