"""Learning a model's profile from the step times its jobs report (`lyasched.job.steptimes`).

Pure parts: `read_steps` parses a job's step file into a `StepReport` (per-step time of the
slowest rank, placement, local batch, when the first step began); `refit` turns a base
`Profile` and the runs seen so far into a learned one:

- compute: from the 1-GPU runs (a linear fit when two batch sizes were seen, else the base
  t(b) scaled by the median observed/predicted ratio);
- all-reduce: per link kind (one node = intra, several = inter), a factor on the cost
  model's ring all-reduce time, least squares over the multi-GPU runs of that kind of
  (observed step - compute), so the policy's iter_time = compute + comm reproduces them.

The service's side (reading a finished job's report, writing the cost table, the inputs a slot
predicts from) is `lyasched.live.learning`. docs/profiling.md ("Learning from every run").
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from lyasched.costmodel.cost import ClusterSpec, CostModel, Profile, ring_allreduce_time
from lyasched.costmodel.batchshape import fit_batch_shape


WARMUP_STEPS = 2  # first steps of a rank left out (allocator, caches, DDP bucket rebuild)
MAX_RANKS = 1 << 16  # ranks and world sizes beyond this are not a real report
MAX_STEP_SECONDS = 86400.0  # one step longer than a day is not a step time


@dataclass(frozen=True)
class StepReport:
    """One job's reported steps, reduced to what the cost model needs."""

    placement: tuple[int, ...]  # GPUs (ranks) per node
    local_bsz: int
    step_time: float  # median over steps of the slowest rank's step time (s)
    steps: int  # steps counted (after warm-up)
    ranks: int  # ranks that reported
    first_begin: float  # unix time the first step began (earliest rank)
    created: float  # unix time the first rank's reporter was created (script start)
    launcher: str
    cluster: str
    model: str = ""  # the model name the job was submitted with (lyasub --model), if it said


@dataclass(frozen=True)
class Run:
    """One observed placement of a model: what `refit` learns from."""

    placement: tuple[int, ...]
    local_bsz: float
    step_time: float
    job_id: str = ""
    user: str = ""  # who ran it: one user's reports count once however many jobs they ran

    @property
    def gpus(self) -> int:
        return sum(self.placement)


def read_steps(path: str | Path) -> StepReport | None:
    """Parse a step file (a tool's or a test's own; the service reads users' files through
    `lyasched.userfiles` and `parse_steps`); None when it holds no complete step."""
    return parse_steps(Path(path).read_bytes())


MAX_REPORT_BYTES = 16 << 20  # a longer report is parsed up to here (its first steps are as good as all)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def _name(v: Any) -> str:
    """A name a job reported (model, launcher, cluster), kept only when it is a short plain token."""
    s = str(v) if isinstance(v, (str, int)) else ""
    return s if _NAME.fullmatch(s) else ""


def _num(v: Any, default: float = 0.0) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) else default


def parse_steps(data: bytes | str) -> StepReport | None:
    """`StepReport` of a report's text; None when it holds no complete step. Malformed lines are
    skipped, names that are not plain tokens dropped, numbers bounded: the text is the user's."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    meta: dict[int, dict] = {}
    steps: dict[int, dict[int, tuple[float, float]]] = {}
    shapes: list[tuple[int, float, float]] = []  # (step, micro-batch, accumulation) of an adaptive job's A lines
    for line in text.splitlines():
        f = line.split("\t")
        try:
            if f[0] == "M" and len(f) == 3:
                m = json.loads(f[2])
                if isinstance(m, dict) and 0 <= int(f[1]) < MAX_RANKS:
                    meta[int(f[1])] = m
            elif f[0] == "A" and len(f) == 4 and int(f[1]) == 0:
                a = json.loads(f[3])  # an adaptive job's batch from this step on (lyasched.job.steptimes)
                if isinstance(a, dict):
                    shapes.append((int(f[2]), _num(a.get("local")), _num(a.get("accum")) or 1.0))
            elif f[0] == "S" and len(f) == 5:
                rank, i = int(f[1]), int(f[2])
                begin, dur = float(f[3]), float(f[4])
                if math.isfinite(begin) and math.isfinite(dur) and 0 <= dur <= MAX_STEP_SECONDS \
                        and 0 <= rank < MAX_RANKS and 0 <= i:
                    steps.setdefault(rank, {})[i] = (begin, dur)
        except (ValueError, json.JSONDecodeError, RecursionError):
            continue
    if not steps:
        return None
    local0 = _num((meta.get(0) or next(iter(meta.values()), {})).get("local_bsz"))
    changed = [i for i, local, accum in shapes if (local, accum) != (local0, 1.0)]
    if changed:  # an adaptive job changed its batch: only the steps at the reported local batch teach the fit
        cut = min(changed)
        steps = {r: {i: v for i, v in per.items() if i < cut} for r, per in steps.items()}
        steps = {r: per for r, per in steps.items() if per}
        if not steps:
            return None
    first = min(b for per in steps.values() for b, _ in per.values())
    common = set.intersection(*(set(per) for per in steps.values()))
    counted = sorted(i for i in common if i >= WARMUP_STEPS) or sorted(common)
    if not counted:
        return None
    slowest = [max(per[i][1] for per in steps.values()) for i in counted]
    m0 = meta.get(0) or next(iter(meta.values()), {})
    world = len(steps)  # every rank reports (lyasched.job.steptimes): a claimed world of any other size is not believed
    nnodes = int(min(max(_num(m0.get("nnodes")) or 1, 1), world))
    gpn = int(min(max(_num(m0.get("gpus_per_node")) or max(1, world // nnodes), 1), MAX_RANKS))
    placement = (gpn,) * nnodes if gpn * nnodes == world else (world,)
    created = min((_num(m.get("t_created")) or first for m in meta.values()), default=first)
    return StepReport(placement, int(min(max(_num(m0.get("local_bsz")), 0), 1 << 24)),
                      float(statistics.median(slowest)), len(counted), len(steps), first, created,
                      _name(m0.get("launcher")), _name(m0.get("cluster")), _name(m0.get("model")))


def _comm_unit(base: Profile, cluster: ClusterSpec, placement: Sequence[int]) -> float:
    g = int(sum(placement))
    link = cluster.inter if len(placement) > 1 else cluster.intra
    return ring_allreduce_time(base.grad_bytes, g, link)


def refit(base: Profile, cluster: ClusterSpec, runs: Sequence[Run]) -> tuple[Profile, list[str]]:
    """The learned profile and one line per change, saying why (see the module doc)."""
    why: list[str] = []
    prof = base
    single = [r for r in runs if r.gpus == 1 and r.step_time > 0]
    batches = {r.local_bsz for r in single}
    if len(batches) >= 2:
        f = fit_batch_shape([r.local_bsz for r in single], [r.step_time for r in single])
        prof = replace(prof, alpha=f.alpha, beta=f.beta, knee=f.knee)
        why.append(f"compute refitted on {len(single)} 1-GPU run(s) at {len(batches)} batch sizes")
    elif single:
        ratios = [r.step_time / base.step_time(r.local_bsz) for r in single if base.step_time(r.local_bsz) > 0]
        if ratios:
            c = float(statistics.median(ratios))
            prof = replace(prof, alpha=base.alpha * c, beta=base.beta * c)
            why.append(f"compute x{c:.3f} from {len(single)} 1-GPU run(s)")
    if cluster.shape is not None:
        return _refit_shaped(prof, cluster, runs, why)
    learned: dict[str, float] = {}
    for kind, pick in (("intra", lambda r: len(r.placement) == 1), ("inter", lambda r: len(r.placement) > 1)):
        multi = [r for r in runs if r.gpus > 1 and pick(r) and r.step_time > 0]
        pairs = [(_comm_unit(base, cluster, r.placement), r.step_time - prof.step_time(r.local_bsz)) for r in multi]
        pairs = [(u, e) for u, e in pairs if u > 0]
        if not pairs:
            continue
        # least squares of extra = k * unit, relative to each run's step time
        num = sum(u * e / r.step_time**2 for (u, e), r in zip(pairs, multi))
        den = sum(u * u / r.step_time**2 for (u, _), r in zip(pairs, multi))
        k = max(0.0, num / den) if den > 0 else 1.0
        prof = replace(prof, **{f"comm_scale_{kind}": k})  # type: ignore[arg-type]  # a float field by name
        learned[kind] = k
        gs = sorted({r.gpus for r in multi})
        why.append(f"{kind}-node all-reduce x{k:.3g} of the ring model from {len(multi)} run(s) on "
                   f"{'/'.join(map(str, gs))} GPUs")
    return _borrow(prof, learned, why), why


def _refit_shaped(prof: Profile, cluster: ClusterSpec, runs: Sequence[Run], why: list[str]) -> tuple[Profile, list[str]]:
    """The all-reduce of a cluster with a fitted `CommShape`: the model's own v and inter-node ratio
    from every multi-GPU run it reported, the cluster's shape as the prior
    (`lyasched.costmodel.online.fit_job`), stored as the factors `CostModel.iter_time` applies:
    v relative to the ring model's 2-GPU all-reduce (intra), times the job's inter-node ratio over
    the cluster's (inter). An unmeasured kind of link follows the cluster's ratio, not a guess."""
    from lyasched.costmodel.online import fit_job

    assert cluster.shape is not None
    multi = [r for r in runs if r.gpus > 1 and r.step_time > 0]
    ring2 = ring_allreduce_time(prof.grad_bytes, 2, cluster.intra)
    if not multi or ring2 <= 0:
        return prof, why
    job = fit_job(prof, cluster.shape, multi, prof.grad_bytes, fit="comm")
    ki = job.v / ring2
    ke = ki * job.shape.inter_ratio / cluster.shape.inter_ratio
    gs = "/".join(map(str, sorted({r.gpus for r in multi})))
    why.append(f"all-reduce x{ki:.3g} (one node), x{ke:.3g} (across nodes) of the ring model: this model's own "
               f"fit to {len(multi)} run(s) on {gs} GPUs, the cluster's shape as the prior")
    return replace(prof, comm_scale_intra=ki, comm_scale_inter=ke), why


def _borrow(prof: Profile, learned: dict[str, float], why: list[str]) -> Profile:
    """A kind of link with no run borrows the other's factor: what the model's all-reduce costs
    relative to the ring model on one kind is the best guess for the other, and learning must
    never make the unmeasured kind look cheaper than before relative to the measured one."""
    if len(learned) != 1:
        return prof
    (kind, k), = learned.items()
    other = "inter" if kind == "intra" else "intra"
    why.append(f"{other}-node all-reduce x{k:.3g} too (no {other}-node run yet)")
    return replace(prof, **{f"comm_scale_{other}": k})  # type: ignore[arg-type]  # a float field by name


TRUST_USERS = 3  # distinct users whose fits outvote any one of them
LEARN_BOUND = 3.0  # with fewer, the shared profile stays within this factor of the profiled one
BOUND_BATCHES = (1.0, float(1 << 16))  # compute is bounded at these per-GPU batches (and so between)


def refit_shared(base: Profile, cluster: ClusterSpec, runs: Sequence[Run]) -> tuple[Profile, list[str]]:
    """The profile every user's jobs of a model are predicted with, robust to any one user.

    Each user's runs are refitted on their own (`refit`); each parameter is the median over the
    users whose runs measured it (compute: users with 1-GPU runs; all-reduce: users with runs
    on that kind of link), so one user's reports, however many, are one vote. While fewer than
    `TRUST_USERS` users have reported, no vote is a majority of honest ones: the result is then
    kept within `LEARN_BOUND` of ``base`` (the profiled measurement), term by term: compute at
    `BOUND_BATCHES` (so every batch between) and each all-reduce factor. A user who lies thus
    moves others' predictions by at most that factor, and not beyond the honest users' range
    once they are outvoted."""
    by_user: dict[str, list[Run]] = {}
    for r in runs:
        by_user.setdefault(r.user, []).append(r)
    if not by_user:
        return base, []
    votes: dict[str, list[tuple[float, ...]]] = {"compute": [], "intra": [], "inter": []}
    why: list[str] = []
    for user_runs in by_user.values():
        prof, _ = refit(base, cluster, user_runs)
        if any(r.gpus == 1 and r.step_time > 0 for r in user_runs):
            votes["compute"].append((prof.step_time(BOUND_BATCHES[0]), prof.step_time(BOUND_BATCHES[1])))
        for kind, multi in (("intra", lambda r: len(r.placement) == 1), ("inter", lambda r: len(r.placement) > 1)):
            if any(r.gpus > 1 and multi(r) for r in user_runs):
                votes[kind].append((getattr(prof, f"comm_scale_{kind}"),))
    n = len(by_user)
    bound = LEARN_BOUND if n < TRUST_USERS else math.inf

    def pick(vals: list[tuple[float, ...]], i: int, ref: float) -> float:
        v = float(statistics.median(x[i] for x in vals))
        lo, hi = (ref / bound, ref * bound) if ref > 0 else (ref * bound, ref / bound)
        return min(max(v, lo), hi) if math.isfinite(bound) else v

    prof = base
    if votes["compute"]:
        (b1, b2), y = BOUND_BATCHES, [pick(votes["compute"], i, base.step_time(b)) for i, b in enumerate(BOUND_BATCHES)]
        beta = (y[1] - y[0]) / (b2 - b1)
        prof = replace(prof, alpha=y[0] - beta * b1, beta=beta, knee=0.0)  # the line through the bounds
        why.append(f"compute from {len(votes['compute'])} user(s)' 1-GPU runs")
    learned = {k: pick(votes[k], 0, getattr(base, f"comm_scale_{k}")) for k in ("intra", "inter") if votes[k]}
    for kind, k in learned.items():
        prof = replace(prof, **{f"comm_scale_{kind}": k})  # type: ignore[arg-type]  # a float field by name
        why.append(f"{kind}-node all-reduce x{k:.3g} of the ring model from {len(votes[kind])} user(s)' runs")
    prof = _borrow(prof, learned, why)
    if math.isfinite(bound):
        why.append(f"kept within x{bound:g} of the profile ({n} user(s) reported, {TRUST_USERS} outvote one)")
    return prof, why


def predict_step(profile: Profile, cluster: ClusterSpec, placement: Sequence[int], local_bsz: float) -> float:
    """The policy's per-iteration time (compute + comm) of ``placement`` at ``local_bsz``."""
    g = int(sum(placement))
    return CostModel(cluster).iter_time(profile, int(round(local_bsz * g)), g, len(placement) > 1) if g > 1 \
        else profile.step_time(local_bsz)


def steps_path(workdir: str, job_id: str) -> Path:
    """Where lyasched's launch script points ``LYASCHED_STEPS_FILE`` (templates/launch.sbatch)."""
    return Path(workdir) / ".lyasched" / f"steps-{job_id}.tsv"
