"""Rules tried for typed lyapunov against the Gavel-style baseline (docs/experiments.md,
"lyapunov against gavel on GPU types"), each a variant of lyapunov and elastic:

    python benchmarks/experiments/gavel_rules.py design|heldout [--rules xt,release] [--json]

* ``xt``: the cross-type penalty on (``cross_type``, the shipped switch, off by default), with the
  backlog rule: a start on a slow type costs its slowdown against the job's best type;
* ``release``: the backlog rule with the running jobs' part of the wait for a job's fastest type
  read from their predicted ends (the time until the type's free GPUs plus those released reach the
  job's request there) instead of their GPU-seconds over the type's GPUs (a fluid estimate); the
  waiting jobs' part stays fluid;
* ``compadv``: the backlog rule, then Gavel's comparative advantage (normalised throughput): a job
  leaves its fastest type's queue when another type it may join has free GPUs and its loss there is
  below the mean loss there of the waiting jobs sharing its fastest type (`_queues_compadv`).

Prints, per set, the mean over its workloads of the average JCT (h) of lyapunov, elastic, each
variant and gavel (on the fixed-batch jobs, as the benchmark), and the ratios to gavel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import lyasched.policy.bytype as bytype  # noqa: E402
from gavel_gap import EXTRA, build  # noqa: E402
from heterogeneous import SETS  # noqa: E402
from lyasched.cli.nativeout import native_stdout_to_stderr  # noqa: E402
from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.bytype import TypeMemo  # noqa: E402
from lyasched.policy.elastic import ElasticPolicy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.state import SlotState  # noqa: E402

_SHIPPED = bytype._queues


def _queues_release(memo: TypeMemo, sel: np.ndarray, state: SlotState) -> np.ndarray:
    """`bytype._queues` with the running jobs' part of the wait read from their predicted ends."""
    best, fast = memo.best[sel], memo.fast[sel]
    gsec = memo.gsec[sel]
    width = len(memo.types)
    col = {t: i for i, t in enumerate(memo.types)}
    node_t = np.fromiter(map(col.__getitem__, state.node_types), dtype=np.intp, count=len(state.node_types))
    free = np.bincount(node_t, weights=np.asarray(state.free, dtype=float), minlength=width)
    cap = free.copy()
    queue = np.bincount(fast, weights=gsec, minlength=width).astype(float)
    ends: list[list[tuple[float, int]]] = [[] for _ in range(width)]
    for r in state.running:
        for n, g in r.placement:
            cap[node_t[n]] += g
        ts = {int(node_t[n]) for n, _ in r.placement}
        if len(ts) == 1:
            end = r.predicted_end if math.isfinite(r.predicted_end) else math.inf
            ends[ts.pop()].append((max(0.0, end - state.now), r.gpus))
    with np.errstate(divide="ignore", invalid="ignore"):
        fluid = np.where(cap > 0, queue / np.maximum(cap, 1.0), math.inf)
    # per type: the times (ascending) at which its free GPUs reach 1, 2, ..., cap
    reach = []
    for t in range(width):
        steps = np.full(int(cap[t]) + 1, math.inf)
        have = int(free[t])
        steps[: have + 1] = 0.0
        for dt, g in sorted(ends[t]):
            steps[have + 1: have + g + 1] = dt
            have += g
        reach.append(steps)
    req = np.array([max(1, memo.keep[i].requested_gpus) for i in sel.tolist()], dtype=np.intp)
    run_wait = np.array([reach[f][min(g, len(reach[f]) - 1)] for f, g in zip(fast.tolist(), req.tolist())])
    limit = best[np.arange(len(fast)), fast] + fluid[fast] + run_wait
    return best <= limit[:, None]


def _queues_compadv(memo: TypeMemo, sel: np.ndarray, state: SlotState) -> np.ndarray:
    """The shipped backlog rule, then Gavel's comparative advantage: a job leaves its fastest type's
    queue when another type it may join has free GPUs and the job's loss there (its best run there
    over its best on its fastest type) is below the mean loss there of the waiting jobs that share
    its fastest type and allow that type. Alone, a job is its own mean and stays."""
    joins = _SHIPPED(memo, sel, state)
    best, fast = memo.best[sel], memo.fast[sel]
    n, width = best.shape
    if n < 2 or width < 2:
        return joins
    col = {t: i for i, t in enumerate(memo.types)}
    node_t = np.fromiter(map(col.__getitem__, state.node_types), dtype=np.intp, count=len(state.node_types))
    free = np.bincount(node_t, weights=np.asarray(state.free, dtype=float), minlength=width)
    rows = np.arange(n)
    base = best[rows, fast]
    typed = np.isfinite(base) & (base > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(typed[:, None], best / np.where(typed, base, 1.0)[:, None], np.inf)
    leave = np.zeros(n, dtype=bool)
    for f in range(width):
        of = typed & (fast == f)
        for u in range(width):
            if u == f or free[u] <= 0:
                continue
            ok = of & np.isfinite(loss[:, u])
            if ok.sum() < 2:
                continue
            mean = float(loss[ok, u].mean())
            leave |= ok & joins[:, u] & (loss[:, u] < mean)
    joins[rows[leave], fast[leave]] = False
    return joins


def _with_queues(fn: Any, policy: Any, state: SlotState, decide: Any) -> Any:
    bytype._queues = fn
    try:
        return decide(policy, state)
    finally:
        bytype._queues = _SHIPPED


@dataclass
class LyaXT(LyapunovPolicy):
    cross_type: bool = True
    name: str = "lyapunov-xt"


@dataclass
class ElaXT(ElasticPolicy):
    cross_type: bool = True
    name: str = "elastic-xt"


@dataclass
class LyaRelease(LyapunovPolicy):
    name: str = "lyapunov-release"

    def decide(self, state: SlotState) -> Any:
        return _with_queues(_queues_release, self, state, LyapunovPolicy.decide)


@dataclass
class ElaRelease(ElasticPolicy):
    name: str = "elastic-release"

    def decide(self, state: SlotState) -> Any:
        return _with_queues(_queues_release, self, state, ElasticPolicy.decide)


@dataclass
class LyaCompAdv(LyapunovPolicy):
    name: str = "lyapunov-compadv"

    def decide(self, state: SlotState) -> Any:
        return _with_queues(_queues_compadv, self, state, LyapunovPolicy.decide)


@dataclass
class ElaCompAdv(ElasticPolicy):
    name: str = "elastic-compadv"

    def decide(self, state: SlotState) -> Any:
        return _with_queues(_queues_compadv, self, state, ElasticPolicy.decide)


RULES = {"xt": (LyaXT, ElaXT), "release": (LyaRelease, ElaRelease), "compadv": (LyaCompAdv, ElaCompAdv)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set", choices=tuple(SETS))
    ap.add_argument("--rules", default="xt,release")
    ap.add_argument("--base", default="lyapunov,elastic,gavel")
    ap.add_argument("--workloads", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = [p for p in args.base.split(",") if p]
    for r in [x for x in args.rules.split(",") if x]:
        for cls in RULES[r]:
            EXTRA[cls.name] = cls
            names.append(cls.name)
    wls = [int(x) for x in args.workloads.split(",")] if args.workloads else list(SETS[args.set][1])
    out: dict = {"set": args.set, "workloads": {}}
    viol = 0
    with native_stdout_to_stderr():
        for k in wls:
            row = {}
            for p in names:
                sim, simf, _typed, _gt = build(args.set, k)
                res = (simf if p == "gavel" else sim).run(EXTRA[p]() if p in EXTRA else make_policy(p), name=p)
                row[p] = float(np.mean([x.jct for x in res.records])) / 3600
                viol += res.type_violations
            out["workloads"][f"workload-{k}"] = row
            print(f"w{k}: " + "  ".join(f"{p} {v:.3f}" for p, v in row.items()), file=sys.stderr)
    rows = list(out["workloads"].values())
    out["mean_avg_jct_h"] = mean = {p: float(np.mean([r[p] for r in rows])) for p in names}
    if "gavel" in mean:
        out["over_gavel"] = {p: mean[p] / mean["gavel"] for p in names if p != "gavel"}
    out["type_violations"] = viol
    if args.json:
        print(json.dumps(out))
        return
    for p, v in mean.items():
        g = out.get("over_gavel", {}).get(p)
        print(f"{p:18s} {v:.3f} h" + (f"  {g:.3f}x gavel" if g else ""))
    print(f"type violations: {viol}")


if __name__ == "__main__":
    main()
