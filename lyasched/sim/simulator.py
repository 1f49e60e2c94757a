"""Discrete-event simulation of a GPU cluster driven by one `Policy`, slot by slot.

Jobs arrive and finish at any time; the policy decides only at slot boundaries
(multiples of ``slot_len``), exactly as `lyasched serve` does. Slots where nothing can
happen (no waiting job, or no free GPU and a non-preemptive policy) are skipped by jumping
to the next arrival or completion. Each job runs ``factor x`` the predicted run time of the
configuration it got (factor lognormal, fixed per job from the seed); policies see the
predictions, oracles (``Capabilities.needs_true_runtimes``) see the truth. Each slot the
simulator builds a `ClusterSnapshot` of its own state and the policy's `SlotState` comes from the
same `SlotStateBuilder` the live service uses (lyasched.policy.snapshot), its arrival history
from the service's `ArrivalHistory`; decisions are checked
against the same placement rule (lyasched.policy.placement). docs/simulator.md has the full
semantics.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Callable, Mapping, Sequence

import numpy as np

from lyasched.costmodel import goodput
from lyasched.costmodel.cost import ClusterSpec, CostModel, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.estimates.trust import TrustBook
from lyasched.policy import Decision, Policy, WaitingJob, capabilities, waiting_job
from lyasched.policy.placement import featured_types, parse_constraint, violation
from lyasched.policy.snapshot import (ArrivalHistory, ClusterSnapshot, RunningObs, SlotStateBuilder, made,
                                      requested_gpu_s, type_profile, type_rows)
from lyasched.live.gputypes import fit_typed
from lyasched.live.typecost import fastest, profile_type
from lyasched.sim.hetero import TypedCluster
from lyasched.policy.tenants import TenantLedger
from lyasched.sim import moves as mv
from lyasched.sim.progress import Progress

_FIRST = itemgetter(0)
DEFAULT_SLOT = 30.0  # seconds, the live service's default slot
DEFAULT_ESTIMATE_ERROR = 0.2  # sigma of log(true / predicted run time)
DEFAULT_RESTART_OVERHEAD = 30.0  # seconds lost when a preempted job restarts (checkpoint reload)
# A policy that starts nothing for this many slots on an empty cluster with no arrivals to come
# would wait forever: the replay stops with an error instead of spinning.
STARVATION_SLOTS = 20_000


class WallTimeExceeded(RuntimeError):
    """A replay ran past its wall-clock budget (``run(..., wall_limit_s=...)``)."""

    def __init__(self, policy: str, done: int, total: int, wall: float, decide_s: float = 0.0) -> None:
        super().__init__(f"{policy}: stopped after {wall:.0f} s wall time with {done}/{total} jobs finished")
        self.done, self.total, self.wall, self.decide_s = done, total, wall, decide_s


class Unfinished(RuntimeError):
    """The policy left jobs that can never finish: they wait on a cluster where nothing runs and
    nothing is left to arrive (or it started nothing for `STARVATION_SLOTS` slots there)."""

    def __init__(self, policy: str, left: int, total: int, why: str, decide_s: float = 0.0) -> None:
        super().__init__(f"{policy}: {left} of {total} jobs never finish ({why})")
        self.policy, self.left, self.total, self.decide_s = policy, left, total, decide_s


class InvalidDecision(ValueError):
    """The policy returned a decision the cluster cannot carry out."""


@dataclass
class Segment:
    """One stretch of a job holding GPUs; ``done`` is the fraction of the whole job it computed."""

    start: float
    end: float
    gpus: int
    spans_nodes: bool
    overhead: float
    done: float
    batch: int = 0  # global batch it started at (an adaptive job re-tunes it at each progress piece)


@dataclass
class JobRecord:
    job: Job
    factor: float  # true / predicted run time
    best_true_run: float  # shortest true run time over the job's allowed configurations
    best_gpu_s: float = math.nan  # fewest true GPU-seconds over the job's allowed configurations
    first_start: float = math.nan
    end: float = math.nan
    run_s: float = 0.0  # time spent holding GPUs (restart overheads included)
    gpu_s: float = 0.0
    preemptions: int = 0  # checkpoints taken (suspensions and resizes)
    resizes: int = 0  # of those, relaunched at once on another GPU count (elastic moves)
    gpus: int = 0  # GPU count of the last segment
    spans_nodes: bool = False
    segments: list[Segment] = field(default_factory=list)
    gpu_type: str = ""  # type of the last segment's GPUs (typed clusters; "a+b" when it spans types)

    @property
    def jct(self) -> float:
        return self.end - self.job.submit_time

    @property
    def wait(self) -> float:
        return self.jct - self.run_s


@dataclass
class SimResult:
    policy: str
    cluster: ClusterSpec
    records: list[JobRecord]
    busy_gpu_s: float
    util_t: np.ndarray  # times at which the busy-GPU count changed
    util_busy: np.ndarray  # busy GPUs from that time on
    slot_t: np.ndarray  # times of the policy's decide calls
    slot_q: np.ndarray  # SlotResult.q at those calls
    slot_z: np.ndarray  # SlotResult.z at those calls
    decide_calls: int
    wall_s: float
    decide_s: float = 0.0  # part of wall_s spent inside policy.decide
    type_violations: int = 0  # starts on a GPU type the job does not allow (typed clusters; 0 expected)

    @property
    def first_submit(self) -> float:
        return min(r.job.submit_time for r in self.records)

    @property
    def makespan(self) -> float:
        return max(r.end for r in self.records) - self.first_submit


@dataclass
class _Running:
    idx: int
    gpus: int
    placement: tuple[tuple[int, int], ...]
    spans: bool
    start: float
    end: float
    overhead: float
    frac_at_start: float  # fraction of the job still to do when this segment started
    true_full: float  # true run time of the whole job on this configuration
    token: int
    obs: RunningObs  # what a policy is shown of it (lyasched.policy.snapshot)
    batch: int | None = None  # an adaptive job's batch of its first piece (Decision.batch); None: its best
    gtype: str | None = None  # the GPU type whose speed it runs at (typed clusters; the slowest it spans)


def true_factors(n: int, sigma: float, seed: int) -> np.ndarray:
    """Per-job true/predicted run-time factors: lognormal with median 1 (sigma 0 = exact)."""
    if sigma < 0:
        raise ValueError("estimate error must be >= 0")
    if sigma == 0 or n == 0:
        return np.ones(n)
    rng = np.random.default_rng([int(seed), 0xE57])
    return np.exp(rng.normal(0.0, sigma, n))


class Simulation:
    """A workload on a cluster, ready to be replayed under any number of policies.

    Predicted run-time rows are computed once per distinct (profile, batch, GPU range) with
    `waiting_job` on a one-iteration job and scaled by the iteration count: run time is
    linear in iterations, so this equals `waiting_job(job, ...)` exactly and costs a numpy
    multiply per job instead of a Python loop over GPU counts.
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        cluster: ClusterSpec,
        *,
        slot_len: float = DEFAULT_SLOT,
        estimate_error: float = DEFAULT_ESTIMATE_ERROR,
        seed: int = 0,
        restart_overhead: float = DEFAULT_RESTART_OVERHEAD,
        end_fraction: dict[str, float] | None = None,
        checkpointable: str = "all",
        shares: Mapping[str, float] | None = None,
        tenant_input: bool = True,
        liars: Mapping[str, float] | None = None,
        trust: bool = True,
        typed: TypedCluster | None = None,
        gpu_types: Mapping[str, Sequence[str]] | None = None,
        measured: Mapping[tuple[str, str], Profile] | None = None,
        refit: bool = True,
        constraints: Mapping[str, str] | None = None,
    ) -> None:
        if slot_len <= 0:
            raise ValueError("slot length must be > 0")
        if not jobs:
            raise ValueError("no jobs to simulate")
        self.jobs = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
        ids = [j.job_id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate job ids")
        if typed is not None:  # every node as the base type: what an unaware policy (and the cost summary) sees
            cluster = typed.spec(cluster)
        self.cluster = cluster
        # tenants (a job's user) and their shares: the policies see each tenant's GPU-time received
        # and entitled (SlotState.tenants) when there are two or more tenants and tenant_input is on
        self.shares = {str(k): float(v) for k, v in (shares or {}).items()}
        if any(not (v > 0 and math.isfinite(v)) for v in self.shares.values()):
            raise ValueError("tenant shares must be > 0")
        self.tenant_input = tenant_input and len({j.user for j in jobs}) >= 2
        self.cost = CostModel(cluster)
        # GPU types (lyasched.sim.hetero): ``cluster`` is every node as the base type (what an unaware
        # policy sees); each type has its own cost model (its nodes, its memory) and profiles
        # (``measured`` per (model, type), else the roofline); ``gpu_types``: job id -> allowed types
        self.typed = typed
        self.allowed = {str(k): tuple(v) for k, v in (gpu_types or {}).items() if v}
        self.measured = dict(measured or {})
        self.refit = refit
        if typed is not None:
            self.type_costs = {t: CostModel(typed.spec(cluster, t)) for t in typed.types}
            self.true_costs = {t: CostModel(replace(cluster, gpu_mem=typed.spec(cluster, t).gpu_mem)) for t in typed.types}
            for jid, ts in self.allowed.items():
                bad = [t for t in ts if t not in self.type_costs]
                if bad:
                    raise ValueError(f"job {jid}: GPU type {bad[0]} is on no node of {typed.describe()}")
        # ``constraints``: job id -> its --constraint; it may run on the types with a node of those features
        # (a replay node's Features are its type), as serve narrows its rows (lyasched.policy.placement)
        for jid, text in (constraints or {}).items():
            if typed is None:
                raise ValueError(f"job {jid}: --constraint {text} needs a typed cluster (a node's features are its GPU type)")
            ok = featured_types(typed.node_types, typed.node_features, parse_constraint(text))
            kept = tuple(t for t in self.allowed.get(str(jid), typed.types) if t in ok)
            if not kept:
                raise ValueError(f"job {jid}: no node of {typed.describe()} has the features of --constraint {text}")
            self.allowed[str(jid)] = kept
        self.slot_len = float(slot_len)
        self.restart_overhead = float(restart_overhead)
        # which jobs may be preempted/resized, and what a move costs each (lyasched.sim.moves)
        self.checkpointable = mv.checkpointable_mask(self.jobs, checkpointable)
        self.move_costs = mv.move_costs(self.jobs, self.restart_overhead)
        self.row_len = min(typed.total_gpus if typed is not None else cluster.total_gpus, max(j.max_gpus for j in self.jobs))
        if typed is not None:
            # the counts the placement rule can lay out across the real nodes (k nodes x g/k): what an
            # unaware policy's rows allow across nodes (its one-type view has max-size nodes)
            caps = typed.node_gpus
            self._multi_ok = np.array([g >= 2 and any(g % per == 0 and g // per <= sum(c >= per for c in caps)
                                                      for per in range(1, g // 2 + 1)) for g in range(1, self.row_len + 1)])
        self.factors = true_factors(len(self.jobs), estimate_error, seed)
        if end_fraction:  # jobs cancelled or failing early: they run that share of their true time
            for i, j in enumerate(self.jobs):
                f = end_fraction.get(j.job_id)
                if f is not None:
                    if not 0.0 < f <= 1.0:
                        raise ValueError(f"end fraction of job {j.job_id} must be in (0, 1], got {f}")
                    self.factors[i] *= f
        # liars: a user's claimed (predicted) run times are this multiple of what the cost model
        # predicts; their true run times are unchanged (docs/simulator.md, "Liars")
        liars = {str(k): float(v) for k, v in (liars or {}).items()}
        if any(not (v > 0 and math.isfinite(v)) for v in liars.values()):
            raise ValueError("a liar's claim multiplier must be > 0")
        self.claim = np.array([liars.get(j.user, 1.0) for j in self.jobs])
        # trust: the policies see each user's predictions times their observed / predicted factor
        # from the jobs finished so far (lyasched.estimates.trust), as the service does
        self.trust = trust
        # what is known of a liar's job (its model's profile: the cost model's prediction) over
        # their claim: the builder replaces a claim far below it (ClusterSnapshot.known)
        self.known = {j.job_id: 1.0 / c for j, c in zip(self.jobs, self.claim) if c != 1.0} if trust else {}
        self._templates: dict[tuple, WaitingJob] = {}
        self._typed: dict[tuple, dict[str, WaitingJob]] = {}  # typed rows per template (`_typed_templates`)
        self._piece_tables: dict[tuple, goodput.PieceTable] = {}  # adaptive jobs' (lyasched.costmodel.goodput)
        self._plain_rows: dict[int, tuple[WaitingJob, bool]] = {}  # lyasched.sim.moves.plain_rows
        # (job index, predicted run it is shown with, elapsed, now) -> the whole run to show a running
        # job that has outlived that prediction (whatif --managed: lyasched.estimates'
        # expected_run); None: the prediction made at its start stays (every other replay)
        self.running_estimate: Callable[[int, float, float, float], float] | None = None
        self._best = np.empty(len(self.jobs))
        self._best_gpu = np.empty(len(self.jobs))
        # arrival history handed to policies (SlotState.arrivals_*): submit times and the running
        # sum of requested GPU-seconds as predicted at submission, kept by the service's own
        # ArrivalHistory (jobs are in its order already: submit time, then id)
        # a type-aware policy's view of a typed cluster: a job's own rows (its work in Q, its request in
        # the arrival history) are those of its fastest allowed type, as serve builds them (`_view`);
        # set per policy by `run`
        self.own_fastest = False
        self._own_types: dict[tuple[str, ...], str] = {}
        arrivals = ArrivalHistory()
        aware = ArrivalHistory() if typed is not None else None
        gcount = np.arange(1, self.row_len + 1, dtype=float)
        self._job_rows: list[WaitingJob] = []  # job i's `_template` (its key's hash is a Python call per use)
        for i, j in enumerate(self.jobs):
            t = self._template(j)
            self._job_rows.append(t)
            best = t.best_run * j.iterations
            if typed is not None:  # the best over the types it allows
                rows = self._typed_templates(j)
                if not rows:
                    raise ValueError(f"job {j.job_id} ({j.profile.model}, batch {j.global_batch}) fits no GPU type it allows")
                best = min(v.best_run for v in rows.values()) * j.iterations
            self._best_gpu[i] = float(np.min(np.minimum(t.run_one_node, t.run_multi_node) * gcount)) * j.iterations
            v = self.predicted(i)
            gs = requested_gpu_s(v)
            if not math.isfinite(gs) and v.by_type:  # typed: its request on the types it may run on
                gs = min(requested_gpu_s(x) for x in v.by_type.values())
            arrivals.add(j.job_id, j.submit_time, gs)  # as the service records it
            if aware is not None:
                self.own_fastest = True
                aware.add(j.job_id, j.submit_time, requested_gpu_s(self.predicted(i)))
                self.own_fastest = False
            if not math.isfinite(best):
                raise ValueError(
                    f"job {j.job_id} ({j.profile.model}, batch {j.global_batch}) cannot run on "
                    f"{cluster.nodes}x{cluster.gpus_per_node} GPUs: no allowed GPU count"
                )
            self._best[i] = best
        assert len(arrivals) == len(self.jobs)  # every job once, each with a finite weight (checked above)
        self._arr_t, self._arr_cum = self._arr_base = arrivals.arrays()
        self._arr_aware = aware.arrays() if aware is not None else self._arr_base

    # --- rows -------------------------------------------------------------------------
    def _template(self, job: Job, gtype: str | None = None) -> WaitingJob:
        """One iteration's rows: on the base cluster (``gtype`` None), else on the nodes of ``gtype``."""
        if gtype is not None:
            return self._typed_templates(job)[gtype]
        key = (job.profile, job.global_batch, job.min_gpus, job.max_gpus, job.adaptive)
        t = self._templates.get(key)
        if t is None:
            unit = replace(job, iterations=1, job_id="", submit_time=0.0, time_limit=None, user="")
            t = waiting_job(unit, self.cost, self.row_len)
            self._templates[key] = t
        return t

    def _typed_templates(self, job: Job) -> dict[str, WaitingJob]:
        """One iteration's rows on each type the job allows and fits (the builder's `type_rows`)."""
        allowed = self.allowed.get(job.job_id, ())
        key = ("typed", job.profile, job.global_batch, job.min_gpus, job.max_gpus, job.adaptive, allowed)
        t = self._typed.get(key)
        if t is None:
            assert self.typed is not None
            unit = replace(job, iterations=1, job_id="", submit_time=0.0, time_limit=None, user="")
            t = self._typed[key] = type_rows(unit, self.type_costs, allowed, self.typed.base, self.row_len, self.measured)
        return t

    def _typed_job(self, job: Job, gtype: str, whole: bool = False) -> tuple[CostModel, Job]:
        """The cost model and job (its profile there) of ``job`` on ``gtype``'s nodes (``whole``:
        on every node as that type: the true speed of a placement that spans types)."""
        assert self.typed is not None
        cost = (self.true_costs if whole else self.type_costs)[gtype]
        return cost, replace(job, profile=type_profile(job.profile, self.typed.base, gtype, self.measured))

    def _true_unit(self, i: int, gtype: str, g: int, spans: bool) -> float:
        """True-speed seconds per iteration of job i on g GPUs of ``gtype`` (before its factor)."""
        j = self.jobs[i]
        key = ("true", j.profile, j.global_batch, j.min_gpus, j.max_gpus, gtype)
        t = self._templates.get(key)
        if t is None:
            cost, on = self._typed_job(j, gtype, whole=True)
            t = self._templates[key] = waiting_job(replace(on, iterations=1, adaptive=None), cost, self.row_len)
        return t.run_time(g, spans)

    def _true_speed(self, i: int, gtype: str, g: int, spans: bool) -> float:
        """Job i's true time for the whole job on g GPUs of ``gtype`` (every node as that type;
        an adaptive job at its best batches there): what ranks the types a placement spans."""
        if self.jobs[i].adaptive is not None:
            return self.true_left(i, g, spans, 1.0, None, gtype)
        return self._true_unit(i, gtype, g, spans)

    def _landing(self, i: int, placement: Sequence[tuple[int, int]], g: int, spans: bool) -> tuple[str, str]:
        """(the type whose speed job i runs at on ``placement``: the slowest of its nodes', and the
        types it lands on as 'a+b')."""
        assert self.typed is not None
        types = sorted({self.typed.node_types[n] for n, _ in placement})
        if len(types) == 1:
            return types[0], types[0]
        slow = max(types, key=lambda t: self._true_speed(i, t, g, spans))
        return slow, "+".join(types)

    def predicted(self, i: int) -> WaitingJob:
        """The job's `WaitingJob` as a non-oracle policy first sees it (== waiting_job(job))."""
        return self._view(i, 1.0, 0.0, oracle=False, attained=0.0)

    def _view(self, i: int, frac: float, overhead: float, oracle: bool, attained: float) -> WaitingJob:
        j = self.jobs[i]
        t = self._job_rows[i]
        scale = j.iterations * frac * (self.factors[i] if oracle else self.claim[i])
        per = j.iterations * (self.factors[i] if oracle else self.claim[i])
        tab = None
        if j.adaptive is not None:  # time left is not linear in the share left: the piece table's rows
            tab = self._pieces(j)
            one, multi = tab.rows(1.0 - frac)
            one, multi = one * per, multi * per
        else:
            one = t.run_one_node * scale
            multi = t.run_multi_node * scale
        if overhead:
            one = one + overhead
            multi = multi + overhead
        by_type = None
        if self.typed is not None:
            by_type = {}
            for gt, tt in self._typed_templates(j).items():
                if j.adaptive is not None:
                    o, m = self._pieces(j, gt).rows(1.0 - frac)
                    o, m = o * per, m * per
                else:
                    o, m = tt.run_one_node * scale, tt.run_multi_node * scale
                if overhead:
                    o, m = o + overhead, m + overhead
                by_type[gt] = WaitingJob(job_id=j.job_id, submit_time=j.submit_time, work=tt.work * scale, run_one_node=o,
                                         run_multi_node=m, requested_gpus=min(j.requested_gpus, self.row_len),
                                         time_limit=j.time_limit if j.time_limit is not None else math.inf, user=j.user,
                                         attained=attained, adaptive=j.adaptive is not None)
            best_any = min((float(min(v.run_one_node.min(), v.run_multi_node.min())) for v in by_type.values()), default=math.inf)
            by_type = {k: replace(v, best_any=best_any) for k, v in by_type.items()}
            multi = np.where(self._multi_ok, multi, np.inf)
            if self.own_fastest and by_type:  # an aware policy: its rows on its fastest allowed type
                own = by_type[self._own_type(j.job_id, by_type)]
                return replace(own, best_any=math.inf, by_type=by_type)
            if len(by_type) < len(self.typed.types):  # the base rows at the shapes its own types can hold
                one = np.where(np.logical_or.reduce([np.isfinite(v.run_one_node) for v in by_type.values()]), one, np.inf)
                multi = np.where(np.logical_or.reduce([np.isfinite(v.run_multi_node) for v in by_type.values()]), multi, np.inf)
        return WaitingJob(
            job_id=j.job_id,
            submit_time=j.submit_time,
            work=t.work * scale,
            run_one_node=one,
            run_multi_node=multi,
            requested_gpus=min(j.requested_gpus, self.row_len),
            time_limit=j.time_limit if j.time_limit is not None else math.inf,
            user=j.user,
            attained=attained,
            adaptive=j.adaptive is not None,  # as `waiting_job` marks it (serve builds with that)
            by_type=by_type,
            pieces=goodput.PiecesLeft(tab, 1.0 - frac, per) if tab is not None else None,
        )

    def _own_type(self, job_id: str, by_type: Mapping[str, WaitingJob]) -> str:
        """The type whose rows are a job's own in an aware policy's view: the fastest of its allowed
        types that a node has (`typecost.profile_type`, the type serve and lyasub predict it on), or
        the fastest it fits when its batch does not fit that one."""
        allowed = self.allowed.get(job_id, ())
        t = self._own_types.get(allowed)
        if t is None:
            assert self.typed is not None
            t = self._own_types[allowed] = profile_type(allowed, self.typed.types)
        return t if t in by_type else fastest(by_type)

    def _pieces(self, job: Job, gtype: str | None = None) -> goodput.PieceTable:
        """An adaptive job's per-iteration piece table (memoised per job shape in goodput), on
        ``gtype``'s nodes when given (its best batch chosen for that type)."""
        key = (job.profile, job.global_batch, job.min_gpus, job.max_gpus, job.adaptive, gtype)
        t = self._piece_tables.get(key)
        if t is None:
            cost, on = (self.cost, job) if gtype is None else self._typed_job(job, gtype)
            unit = replace(on, iterations=1, job_id="", submit_time=0.0, time_limit=None, user="")
            t = self._piece_tables[key] = goodput.piece_table(cost, unit, self.row_len)
        return t

    def _cost_job(self, i: int, gtype: str | None) -> tuple[CostModel, Job]:
        """The cost model and job that give job i's true speed on ``gtype`` (None: the base cluster)."""
        return (self.cost, self.jobs[i]) if gtype is None else self._typed_job(self.jobs[i], gtype, whole=True)

    def true_left(self, i: int, g: int, spans: bool, frac: float, batch: int | None = None, gtype: str | None = None) -> float:
        """True compute time of the share ``frac`` still to do of job i on g GPUs (an adaptive
        job: re-tuning its batch, its first piece at ``batch`` when given), on ``gtype``'s GPUs."""
        j = self.jobs[i]
        if j.adaptive is not None:
            cost, on = self._cost_job(i, gtype)
            return float(self.factors[i]) * goodput.run_time(cost, on, g, spans, 1.0 - frac, batch)
        if gtype is not None:
            return frac * self._true_unit(i, gtype, g, spans) * j.iterations * float(self.factors[i])
        row = self._job_rows[i]
        unit = float((row.run_multi_node if spans else row.run_one_node)[g - 1])
        return frac * unit * j.iterations * float(self.factors[i])

    def best_true_runs(self) -> np.ndarray:
        """Each job's shortest true run time (no waiting): the per-job JCT lower bound."""
        return self._best * self.factors

    # --- replay -----------------------------------------------------------------------
    def run(
        self, policy: Policy, *, progress: bool | Progress = False, name: str | None = None,
        wall_limit_s: float | None = None,
    ) -> SimResult:
        """Replay the workload under ``policy``; raises InvalidDecision on an impossible decision,
        Unfinished when jobs are left that can never finish, and WallTimeExceeded past
        ``wall_limit_s`` seconds (benchmarks use it). ``progress``: True for a bar on a terminal or
        a line a minute otherwise (`lyasched.sim.progress`), or a `Progress` of the caller's."""
        pname: str = name or getattr(policy, "name", None) or type(policy).__name__
        caps = capabilities(policy)
        oracle, preemptive, invariant = caps.needs_true_runtimes, caps.preemptive, caps.time_invariant
        moves = caps.moves  # may resize: sees MovableJob, is also asked when only a grow could happen
        builder = SlotStateBuilder(caps)
        node_names = tuple(f"node{k}" for k in range(self.cluster.nodes))
        cl = self.cluster
        gpn, total = cl.gpus_per_node, cl.total_gpus
        typed = self.typed
        node_types = typed.node_types if typed is not None else ()
        if typed is not None:
            gpn, total = max(typed.node_gpus), typed.total_gpus
        violations = 0
        self.typed_moves = typed is not None and bool(getattr(policy, "types_aware", False))  # lyasched.sim.moves
        self.own_fastest = self.typed_moves  # an aware policy: own rows on the job's fastest type (`_view`)
        self._arr_t, self._arr_cum = self._arr_aware if self.own_fastest else self._arr_base
        slot = self.slot_len
        jobs, factors = self.jobs, self.factors
        n = len(jobs)
        best_true = self.best_true_runs()
        best_gpu = self._best_gpu * factors
        records = [JobRecord(job=j, factor=f, best_true_run=b, best_gpu_s=g)  # (.tolist(): float() of each, at C speed)
                   for j, f, b, g in zip(jobs, (factors / self.claim).tolist(), best_true.tolist(), best_gpu.tolist())]
        frac = [1.0] * n
        attained = [0.0] * n
        tokens = [0] * n

        free = list(typed.node_gpus) if typed is not None else [gpn] * cl.nodes
        busy = 0
        busy_gpu_s = 0.0
        util_t: list[float] = []
        util_b: list[int] = []
        slot_t: list[float] = []
        slot_q: list[float] = []
        slot_z: list[float] = []

        trust = TrustBook() if self.trust and not oracle else None
        ledger = TenantLedger(capacity=float(total), shares=dict(self.shares),
                              usage={} if caps.reads_tenant_usage else None) if self.tenant_input else None
        pending: list[tuple[float, str, float, float]] = []  # ledger events since the last slot (TenantLedger.apply's)
        req_g = [float(min(j.requested_gpus, total)) for j in jobs]

        waiting: list[int] = []  # job indices, kept sorted (= by submit time)
        wlist: list[WaitingJob] = []  # their views, same order (tuple(list) is C-speed)
        views: dict[int, WaitingJob] = {}
        by_id: dict[str, int] = {}
        waiting_view: tuple[WaitingJob, ...] | None = ()
        running: dict[int, _Running] = {}
        observed: dict[int, RunningObs] = {}  # their `obs`, in the same order (the snapshot's, copied at C speed)
        running_view: tuple[RunningObs, ...] | None = ()
        heap: list[tuple[float, int, int]] = []  # (end, index, token)
        next_arrival = 0
        done = 0
        calls = 0
        idle_calls = 0
        acted = True
        decide_s = 0.0

        bar = progress if isinstance(progress, Progress) else Progress(n, pname) if progress else None
        wall0 = time.perf_counter()

        def note_util(t: float) -> None:
            if util_t and util_t[-1] == t:
                util_b[-1] = busy
            else:
                util_t.append(t)
                util_b.append(busy)

        def stop(r: _Running, t: float, finished: bool) -> None:
            nonlocal busy, busy_gpu_s
            rec = records[r.idx]
            elapsed = t - r.start
            j = jobs[r.idx]
            if finished:
                fdone = r.frac_at_start
            elif j.adaptive is not None:  # progress in base steps, walking its re-tuning pieces
                p0 = 1.0 - r.frac_at_start
                secs = max(0.0, elapsed - r.overhead) / float(factors[r.idx])
                cost, j = self._cost_job(r.idx, r.gtype)
                fdone = min(r.frac_at_start, goodput.progress_after(cost, j, r.gpus, r.spans, p0, secs, r.batch) - p0)
            else:
                fdone = min(r.frac_at_start, max(0.0, elapsed - r.overhead) / r.true_full)
            batch0 = j.global_batch if j.adaptive is None else (
                r.batch or goodput.best_batch(*self._cost_job(r.idx, r.gtype), r.gpus, r.spans, 1.0 - r.frac_at_start))
            rec.segments.append(Segment(r.start, t, r.gpus, r.spans, r.overhead, fdone, batch0))
            rec.run_s += elapsed
            rec.gpu_s += elapsed * r.gpus
            attained[r.idx] += elapsed * r.gpus
            frac[r.idx] = r.frac_at_start - fdone
            busy_gpu_s += elapsed * r.gpus
            for node, k in r.placement:
                free[node] += k
            busy -= r.gpus
            del running[r.idx]
            del observed[r.idx]

        slot_k = math.ceil(jobs[0].submit_time / slot)  # slot index: t = k * slot, no drift
        try:
            while done < n:
                t = slot_k * slot
                if wall_limit_s is not None and calls % 64 == 0 and time.perf_counter() - wall0 > wall_limit_s:
                    raise WallTimeExceeded(pname, done, n, time.perf_counter() - wall0, decide_s)
                # completions up to and including t
                changed_running = False
                while heap and heap[0][0] <= t:
                    end, i, tok = heapq.heappop(heap)
                    if tok != tokens[i]:
                        continue  # preempted since
                    if trust is not None:  # what the service knows of a finished job: its prediction and its run
                        r = running[i]
                        trust.observe(jobs[i].user, r.obs.predicted_run, end - r.start)
                    stop(running[i], end, finished=True)
                    records[i].end = end
                    if ledger is not None:
                        pending.append((end, jobs[i].user, -float(records[i].gpus), 0.0))
                    note_util(end)
                    done += 1
                    changed_running = True
                    if bar is not None:
                        bar.update(1, end)
                # arrivals up to and including t
                while next_arrival < n and jobs[next_arrival].submit_time <= t:
                    i = next_arrival
                    views[i] = self._view(i, 1.0, 0.0, oracle, 0.0)
                    by_id[jobs[i].job_id] = i
                    waiting.append(i)
                    wlist.append(views[i])
                    if ledger is not None:
                        pending.append((jobs[i].submit_time, jobs[i].user, 0.0, req_g[i]))
                    next_arrival += 1
                    waiting_view = None
                if changed_running:
                    running_view = None

                can_act = bool(waiting) and (busy < total or (preemptive and running))
                can_act = can_act or (moves and bool(running) and busy < total)  # a grow
                wake = None  # a policy may say when deciding again could change anything (info["wake_at"])
                if can_act:
                    acted = False
                    if self.running_estimate is not None:
                        for r in running.values():
                            if t - r.start >= r.obs.predicted_run:  # outlived what it is shown with
                                pr = self.running_estimate(r.idx, r.obs.predicted_run, t - r.start, t)
                                r.obs = observed[r.idx] = replace(r.obs, predicted_run=pr)
                                running_view = None
                    if waiting_view is None:
                        waiting_view = tuple(wlist)
                    if running_view is None:
                        running_view = tuple(observed.values())
                    book = None
                    if ledger is not None:
                        pending.sort(key=_FIRST)  # each event at its own time, in time order (stable)
                        ledger.apply(pending)
                        pending.clear()
                        book = ledger.book(t)
                    state = builder.build(made(
                        ClusterSnapshot,
                        now=t,
                        slot_len=slot,
                        nodes=node_names,
                        free=tuple(free),
                        gpus_per_node=gpn,
                        waiting=waiting_view,
                        running=running_view,
                        arrivals_t=self._arr_t[:next_arrival],
                        arrivals_cum_gpu_s=self._arr_cum[:next_arrival],
                        tenants=book,
                        trust=trust,
                        known=self.known if trust is not None else None,
                        node_types=node_types,
                    ))
                    if preemptive:  # checkpointable jobs only; movers see MovableJob (lyasched.sim.moves)
                        state = mv.policy_view(self, state, running, records, oracle, moves)
                        if moves:  # claims scaled by trust in the movers' view too
                            state = builder.movable(state)
                    c0 = time.perf_counter()
                    res = policy.decide(state)
                    decide_s += time.perf_counter() - c0
                    calls += 1
                    slot_t.append(t)
                    slot_q.append(float(res.q))
                    slot_z.append(float(res.z))
                    # preemptions first: their GPUs are free for this slot's starts
                    for jid in res.preempt:
                        found = by_id.get(jid)
                        if found is None or found not in running:
                            raise InvalidDecision(f"{pname}: preempt of {jid!r}, which is not running at t={t:g}")
                        i = found
                        if not self.checkpointable[i]:
                            raise InvalidDecision(f"{pname}: preempt of {jid!r}, which is not checkpointable")
                        r = running[i]
                        tokens[i] += 1
                        if ledger is not None:
                            pending.append((t, jobs[i].user, -float(r.gpus), req_g[i]))
                        stop(r, t, finished=False)
                        records[i].preemptions += 1
                        views[i] = self._view(i, frac[i], float(self.move_costs[i]), oracle, attained[i])
                        pos = bisect.bisect(waiting, i)
                        waiting.insert(pos, i)
                        wlist.insert(pos, views[i])
                        acted = True
                    preempted = set(res.preempt)
                    started: set[int] = set()
                    for d0 in res.starts:
                        gtype, landed = None, ""
                        fitted = self._typed_start(d0, by_id, views, free) if typed is not None else d0
                        if fitted is None:
                            continue  # no node of a type it allows has room: it waits (as serve does)
                        d = fitted
                        i = self._check(d, by_id, views, started, set() if moves else preempted, free, pname, t)
                        v = views[i]
                        spans = len(d.placement) > 1
                        predicted = v.run_time(d.gpus, spans)
                        if typed is not None:
                            gtype, landed = self._landing(i, d.placement, d.gpus, spans)
                            ok = v.by_type or {}
                            if any(x not in ok for x in landed.split("+")):
                                violations += 1  # a type it does not allow, or whose memory cannot hold its batch
                            elif "+" not in landed:
                                predicted = ok[landed].run_time(d.gpus, spans)
                        for node, take in d.placement:
                            free[node] -= take
                        busy += d.gpus
                        batch = d.batch if jobs[i].adaptive is not None else None
                        if jobs[i].adaptive is not None:
                            true_full = math.nan  # not linear in the share left: stop() walks the pieces
                            left_s = self.true_left(i, d.gpus, spans, frac[i], batch, gtype)
                        elif gtype is not None:
                            true_full = self._true_unit(i, gtype, d.gpus, spans) * jobs[i].iterations * float(factors[i])
                            left_s = frac[i] * true_full
                        else:
                            row = self._job_rows[i]
                            unit = float((row.run_multi_node if spans else row.run_one_node)[d.gpus - 1])
                            true_full = unit * jobs[i].iterations * float(factors[i])
                            left_s = frac[i] * true_full
                        overhead = float(self.move_costs[i]) if records[i].preemptions else 0.0
                        end = t + overhead + left_s
                        tokens[i] += 1
                        obs = made(RunningObs, job_id=jobs[i].job_id, placement=tuple(d.placement), start_time=t,
                                   predicted_run=predicted, time_limit=v.time_limit, attained_before=attained[i],
                                   user=jobs[i].user)
                        running[i] = _Running(
                            i, d.gpus, obs.placement, spans, t, end, overhead, frac[i], true_full, tokens[i], obs, batch, gtype
                        )
                        observed[i] = obs
                        records[i].gpu_type = landed
                        heapq.heappush(heap, (end, i, tokens[i]))
                        rec = records[i]
                        if math.isnan(rec.first_start):
                            rec.first_start = t
                        if d.job_id in preempted:
                            rec.resizes += 1
                        rec.gpus, rec.spans_nodes = d.gpus, spans
                        if ledger is not None:
                            pending.append((t, jobs[i].user, float(d.gpus), -req_g[i]))
                        started.add(i)
                        acted = True
                    if started:
                        for i in sorted(started, reverse=True):  # waiting is sorted: bisect, then memmove
                            pos = bisect.bisect_left(waiting, i)
                            del waiting[pos]
                            del wlist[pos]
                        for i in started:
                            del views[i]
                    if acted:
                        waiting_view = None
                        running_view = None
                        note_util(t)
                        idle_calls = 0
                    else:
                        wake = res.info.get("wake_at") if isinstance(res.info, dict) else None
                        if moves and self.running_estimate is not None:
                            wake = None  # a mover reads running jobs' rows, which the estimate redraws once outlived
                        idle_calls += 1
                        if not running and next_arrival >= n and idle_calls > STARVATION_SLOTS:
                            raise Unfinished(pname, n - done, n, f"{len(waiting)} wait on an idle cluster", decide_s)
                # next slot where something can happen
                busy_or_grow = bool(waiting) or (moves and bool(running))
                if busy_or_grow and (busy < total or (preemptive and running)) and (acted or not invariant) and wake is None:
                    slot_k += 1
                    continue
                # drop stale heap entries so heap[0] is a live completion
                while heap and heap[0][2] != tokens[heap[0][1]]:
                    heapq.heappop(heap)
                nxt = math.inf
                if heap:
                    nxt = heap[0][0]
                if next_arrival < n:
                    nxt = min(nxt, jobs[next_arrival].submit_time)
                if wake is not None:
                    nxt = min(nxt, max(float(wake), t + slot))
                if not math.isfinite(nxt):
                    if done < n:
                        raise Unfinished(pname, n - done, n, "nothing runs or arrives, and the policy starts nothing", decide_s)
                    break
                # completions exactly at a slot boundary are processed in that slot
                slot_k = max(slot_k + 1, math.ceil(nxt / slot))
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - wall0
        return SimResult(
            policy=pname,
            cluster=cl,
            records=records,
            busy_gpu_s=busy_gpu_s,
            util_t=np.asarray(util_t),
            util_busy=np.asarray(util_b),
            slot_t=np.asarray(slot_t),
            slot_q=np.asarray(slot_q),
            slot_z=np.asarray(slot_z),
            decide_calls=calls,
            wall_s=wall,
            decide_s=decide_s,
            type_violations=violations,
        )

    def _typed_start(self, d: Decision, by_id: dict[str, int], views: dict[int, WaitingJob], free: list[int]) -> Decision | None:
        """On a typed cluster, a start as the service carries it out (lyasched.live.gputypes): its
        placement fitted onto nodes of one type that the job allows and whose memory holds this
        configuration, unless it is there already (or the job allows every type and spans types
        that all hold it: an unaware policy's choice, run at the slowest); None when no such type
        has room. ``refit`` off: the decision as made (a violation is then counted)."""
        i = by_id.get(d.job_id)
        if not self.refit or i is None or i not in views:
            return d
        assert self.typed is not None
        types = self.typed.node_types
        v = views[i]
        ok = v.by_type or {}
        spans = len(d.placement) > 1
        fine = tuple(t for t, w in ok.items() if math.isfinite(w.run_time(d.gpus, spans)))
        landed = {types[n] for n, _ in d.placement if 0 <= n < len(types)}
        valid = not violation(tuple(d.placement), d.gpus, free)  # an earlier start's re-fit may have taken its GPUs
        if valid and len(landed) == 1 and landed <= set(fine):
            return d
        if valid and len(landed) > 1 and len(ok) == len(self.typed.types) and all(
                math.isfinite(self._true_speed(i, t, d.gpus, spans)) for t in landed):
            return d
        pl = fit_typed(d.gpus, tuple(d.placement), free, types, fine) if fine else None
        return None if pl is None else replace(d, placement=pl)

    def _check(
        self,
        d: Decision,
        by_id: dict[str, int],
        views: dict[int, WaitingJob],
        started: set[int],
        preempted: set[str],
        free: list[int],
        pname: str,
        t: float,
    ) -> int:
        """Validate one start decision against the cluster; return the job's index."""
        i = by_id.get(d.job_id)

        def where() -> str:  # (only for an error: a replay checks every start)
            return f"{pname} at t={t:g}: start of {d.job_id!r}"

        if i is None or i not in views or d.job_id in preempted:
            raise InvalidDecision(f"{where()}: job is not waiting")
        if i in started:
            raise InvalidDecision(f"{where()}: started twice in one slot")
        why = violation(tuple(d.placement), d.gpus, free)  # the placement rule the service enforces too
        if why:
            raise InvalidDecision(f"{where()}: {why}")
        v = views[i]
        if self.typed is not None and v.by_type:  # typed: the rows of the type it lands on (one type)
            landed = {self.typed.node_types[n] for n, _ in d.placement if 0 <= n < len(self.typed.node_types)}
            if len(landed) == 1:
                v = v.by_type.get(next(iter(landed)), v)
        if not math.isfinite(v.run_time(d.gpus, len(d.placement) > 1)):
            raise InvalidDecision(f"{where()}: {d.gpus} GPUs is not an allowed configuration")
        return i
