"""Observe: a neutral snapshot of the cluster, and the one place it becomes a policy's `SlotState`.

The live service builds a `ClusterSnapshot` from Slurm (`lyasched.service`), the simulator from
its own state (`lyasched.sim.simulator`); both hand it to a `SlotStateBuilder`, so a running job's
horizon, its attained service and the arrival history are computed one way for replay and serve.

Running jobs' ``expected_end`` (what backfill plans on) is ``start + max(predicted, time limit)``
when the job has a time limit, else ``start + predicted``, else (neither known) one slot from
``start``. Backfill must plan on a bound the job cannot overrun: Slurm ends a job at its time
limit, never earlier than it wants to run, so the limit is that bound and the prediction (which
may be low) is not. ``predicted_end`` (``start + predicted``, nan when unknown) is the forecast
lyapunov's spread horizon reads.

A snapshot may carry a `TrustBook` (lyasched.estimates.trust): a user whose finished jobs (or
running jobs already past 3.3x their prediction: `Overruns`) ran far longer than predicted has their waiting and running jobs' predictions multiplied by their factor
(at most the time limit, never below the claim) here, so replay and serve apply it alike (a moving
policy's view of running jobs too: `SlotStateBuilder.movable`); and
``known``: a job whose claim is far below what is already known of it is shown with that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from itertools import count
from operator import attrgetter, itemgetter
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from lyasched.costmodel.cost import CostModel, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.costmodel.roofline import GpuType, on_type
from lyasched.estimates.trust import Overruns, TrustBook, distrusted, distrusted_movable, known_scale, scaled_row
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import Placement, splits
from lyasched.policy.state import Capabilities, RunningJob, SlotState, WaitingJob, waiting_job
from lyasched.policy.tenants import TenantBook


@dataclass(frozen=True)
class RunningObs:
    """A job holding GPUs (or committed to them: released, about to start), as observed."""

    job_id: str
    placement: Placement
    start_time: float
    predicted_run: float = math.nan  # predicted run time on this placement; nan = unknown
    time_limit: float = math.inf  # inf = none
    attained_before: float = 0.0  # GPU-seconds received in earlier runs (preempted before)
    user: str = ""  # its tenant; "" = unknown
    # (a non-preemptive builder keeps the `RunningJob` it made of it on the observation itself, in
    # an attribute named for that builder: `SlotStateBuilder._find_unseen`)

    @property
    def gpus(self) -> int:
        return sum(map(_COUNT, self.placement))


_COUNT = itemgetter(1)  # a placement entry's GPUs
_T = TypeVar("_T")
_BUILDERS = count()  # `SlotStateBuilder._key`
_new, _setattr = object.__new__, object.__setattr__
_FIELDS: dict[type, frozenset[str]] = {}


def made(cls: type[_T], **values: Any) -> _T:
    """``cls(**values)`` for a frozen dataclass whose constructor only sets its fields, every field
    given: the same object, without the frozen constructor's ``object.__setattr__`` per field
    (about 0.3 us each, a few microseconds an object; a replay makes a snapshot per slot, an
    observation per start). A call that does not give exactly the fields raises TypeError. Its
    attributes live in a plain dict, not the interpreter's shared-key layout, so each read is a
    little slower: not for what a policy reads (its state, the waiting and running views)."""
    names = _FIELDS.get(cls)
    if names is None:
        assert not hasattr(cls, "__post_init__") and all(f.init for f in fields(cls)), cls  # type: ignore[arg-type]
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    if values.keys() != names:
        raise TypeError(f"made({cls.__name__}): missing {sorted(names - values.keys())}, unknown {sorted(values.keys() - names)}")
    o = _new(cls)
    _setattr(o, "__dict__", values)
    return o


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster at one slot boundary, in terms neither Slurm's nor the simulator's.

    ``nodes`` names the nodes of ``free`` (index i is node ``nodes[i]``); ``waiting`` is in FIFO
    order (submit time, then id); ``running`` in any order.
    """

    now: float
    slot_len: float
    nodes: tuple[str, ...]
    free: tuple[int, ...]  # free GPUs per node (GPUs used by jobs lyasched does not own are not free)
    gpus_per_node: int
    waiting: tuple[WaitingJob, ...]
    running: tuple[RunningObs, ...] = ()
    arrivals_t: np.ndarray | None = None
    arrivals_cum_gpu_s: np.ndarray | None = None
    tenants: TenantBook | None = None  # shares and GPU-time per tenant (lyasched.policy.tenants); None = unknown
    trust: TrustBook | None = None  # users' observed / predicted run-time factors; None = claims as they are
    # job id -> what is already known of its run time (its model's shared profile, the FLOP
    # estimate) over its claim, for jobs where they differ; a claim far below it is replaced
    known: Mapping[str, float] | None = None
    node_types: tuple[str, ...] = ()  # GPU type per node (`SlotState.node_types`); () = one type


def expected_end(start: float, predicted_run: float, time_limit: float, slot_len: float) -> float:
    """The latest a running job may be assumed to hold its GPUs (see the module docstring)."""
    if math.isfinite(time_limit):
        return start + (max(predicted_run, time_limit) if math.isfinite(predicted_run) else time_limit)
    if math.isfinite(predicted_run):
        return start + predicted_run
    return start + slot_len


class SlotStateBuilder:
    """Turns snapshots into `SlotState`s for one policy, slot after slot.

    ``attained`` of a running job counts its current run only for a preemptive policy (the only
    kind that reads it, to pick whom to preempt); for the others it is the service received before
    this run started, so each `RunningJob` is made once per start and handed over again while the
    job runs (per-job memos in the policies key on object identity).
    """

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps
        self._last: tuple[tuple[RunningObs, ...], tuple[RunningJob, ...]] | None = None
        self._factors: dict[str, float] = {}  # this slot's trust factors (users not at 1)
        self._trust_key: tuple[int, int] | None = None  # (id, version) of the book they came from
        self._overruns = Overruns(told=not caps.preemptive)  # past their claim (told: `_find_unseen`)
        self._overran = False  # this slot's factors counted some
        self._trusted: dict[str, tuple[WaitingJob, float, WaitingJob]] = {}  # job id -> (as observed, factor, as shown)
        self._known: Mapping[str, float] = {}  # this slot's ClusterSnapshot.known
        self._obs: tuple[RunningObs, ...] = ()  # this slot's running jobs as observed
        self._moving: dict[int, tuple[RunningObs, float, float, dict]] = {}  # preemptive: `_running_now`
        # a non-preemptive builder's view of a running job, kept on the observation under this name
        # (one per builder, never reused in the process): found again by one C-speed attribute read
        self._key = f"_view{next(_BUILDERS)}"
        self._view_of = attrgetter(self._key)
        self._unseen: tuple[tuple[RunningJob, ...] | None, list[RunningObs]] = ((), [])  # this slot's `_find_unseen`

    def scale(self, user: str, job_id: str) -> float:
        """This slot's scale of a job's claim: its user's trust factor, or what is known of it over
        its claim when far above (`known_scale`), the larger: either estimates truth / claim, so
        never both multiplied."""
        f = self._factors.get(user, 1.0) if self._factors else 1.0
        if self._known and (k := self._known.get(job_id)) is not None:
            f = max(f, known_scale(k))
        return f

    def running_job(self, obs: RunningObs, now: float, slot_len: float) -> RunningJob:
        gpus = obs.gpus
        live = self.caps.preemptive
        pred = obs.predicted_run
        f = self.scale(obs.user, obs.job_id)
        if f > 1.0 and math.isfinite(pred):
            pred = float(scaled_row(np.array([pred]), f, obs.time_limit)[0])
        return RunningJob(
            job_id=obs.job_id,
            gpus=gpus,
            placement=obs.placement,
            start_time=obs.start_time,
            expected_end=expected_end(obs.start_time, pred, obs.time_limit, slot_len),
            attained=obs.attained_before + (gpus * max(0.0, now - obs.start_time) if live else 0.0),
            preemptible=live,
            predicted_end=obs.start_time + pred,
            user=obs.user,
        )

    def _running_now(self, obs: RunningObs, now: float, slot_len: float) -> RunningJob:
        """`running_job` for a preemptive policy, whose view moves with ``now`` through
        ``attained`` only: the rest is kept per observed job (and its scale and slot length) and
        the view made from it without the dataclass constructor's per-field checks."""
        f = self.scale(obs.user, obs.job_id)
        hit = self._moving.get(id(obs))
        if hit is None or hit[0] is not obs or hit[1] != f or hit[2] != slot_len:
            if len(self._moving) > 4096 and len(self._moving) > 4 * len(self._obs):  # drop the jobs gone
                self._moving.clear()
            base = self.running_job(obs, now, slot_len)
            hit = self._moving[id(obs)] = (obs, f, slot_len, dict(vars(base)))
            return base
        out = RunningJob.__new__(RunningJob)
        d = vars(out)
        d.update(hit[3])
        d["attained"] = obs.attained_before + d["gpus"] * max(0.0, now - obs.start_time)  # as `running_job`
        return out

    def _set_trust(self, book: TrustBook | None, running: tuple[RunningObs, ...], now: float,
                   fresh: list[RunningObs] | None) -> None:
        key = None if book is None else (id(book), book.version)
        # (with ``fresh``, every call: the running jobs it has not seen are those without a view here)
        over = self._overruns.update(running, now, fresh) if book is not None or fresh is not None else ()
        if key != self._trust_key or over or self._overran:
            self._trust_key = key
            self._factors = {} if book is None else book.factors_with(over)
            self._overran = bool(over)

    def _waiting(self, snap: ClusterSnapshot) -> tuple[WaitingJob, ...]:
        """The waiting jobs with their users' trust factors (the same objects while unchanged,
        for the policies' per-job memos)."""
        known = snap.known or {}
        if not self._factors and not known:
            self._trusted.clear()
            return snap.waiting
        out, memo = [], {}
        for w in snap.waiting:
            f = self.scale(w.user, w.job_id)
            if f > 1.0:
                m = self._trusted.get(w.job_id)
                if m is None or m[0] is not w or m[1] != f:
                    d = distrusted(w, f)
                    if w.by_type:  # its rows on every type, scaled alike
                        d = replace(d, by_type={t: distrusted(v, f) for t, v in w.by_type.items()})
                    m = (w, f, d)
                memo[w.job_id] = m
                w = m[2]
            out.append(w)
        self._trusted = memo
        return tuple(out)

    def _running(self, snap: ClusterSnapshot) -> tuple[RunningJob, ...]:
        if self.caps.preemptive:
            return tuple(self._running_now(o, snap.now, snap.slot_len) for o in snap.running)
        if self._last is not None and self._last[0] is snap.running:
            return self._last[1]
        head, fresh = self._unseen
        key = self._key
        new = [self.running_job(o, snap.now, snap.slot_len) for o in fresh]
        for o, v in zip(fresh, new):
            vars(o)[key] = v  # (a frozen observation: its fields stay as they are)
        res = head + tuple(new) if head is not None else tuple(map(self._view_of, snap.running))
        self._last = (snap.running, res)
        return res

    def _find_unseen(self, running: tuple[RunningObs, ...]) -> list[RunningObs] | None:
        """A non-preemptive builder's running jobs without its view yet (started since), in the
        snapshot's order; None for a preemptive one (its views are made every slot) or an unchanged
        running set. Walked from the end, where a replay appends its starts, to the first job it
        has seen; the views of the jobs before it are then read in one C-speed pass, which fails
        only when an unseen job sits among them (a snapshot in another order: all are looked at).
        `_running` makes the new views once this slot's trust factors are set."""
        if self.caps.preemptive or (self._last is not None and self._last[0] is running):
            return None
        key = self._key
        fresh: list[RunningObs] = []
        for o in reversed(running):
            if key in vars(o):
                break
            fresh.append(o)
        fresh.reverse()
        head: tuple[RunningJob, ...] | None
        try:
            head = tuple(map(self._view_of, running[:len(running) - len(fresh)] if fresh else running))
        except AttributeError:
            fresh, head = [o for o in running if key not in vars(o)], None
        self._unseen = (head, fresh)
        return fresh

    def movable(self, state: SlotState) -> SlotState:
        """``state`` (built here) with its running `MovableJob`s (a moving policy's view, made from
        it by the simulator or the service) scaled as their waiting rows would be: remaining rows
        times `scale`, at most the time left to the job's limit, never below the claim."""
        if not self._factors and not self._known:
            return state
        limits = {o.job_id: o.time_limit for o in self._obs}
        out, changed = [], False
        for r in state.running:
            if isinstance(r, MovableJob) and (f := self.scale(r.user, r.job_id)) > 1.0:
                r = distrusted_movable(r, f, limits.get(r.job_id, math.inf) - max(0.0, state.now - r.start_time))
                changed = True
            out.append(r)
        return replace(state, running=tuple(out)) if changed else state

    def build(self, snap: ClusterSnapshot) -> SlotState:
        """The policy's input for this slot: the one place it is built."""
        self._set_trust(snap.trust, snap.running, snap.now, self._find_unseen(snap.running))
        self._known = snap.known or {}
        self._obs = snap.running
        return SlotState(
            now=snap.now,
            slot_len=snap.slot_len,
            free=snap.free,
            gpus_per_node=snap.gpus_per_node,
            waiting=self._waiting(snap),
            running=self._running(snap),
            arrivals_t=snap.arrivals_t,
            arrivals_cum_gpu_s=snap.arrivals_cum_gpu_s,
            tenants=snap.tenants,
            node_types=snap.node_types,
        )


def type_profile(profile: Profile, base: str, gpu_type: str, measured: Mapping[tuple[str, str], Profile] | None = None,
                 types: Mapping[str, GpuType] | None = None) -> Profile:
    """A job's profile on ``gpu_type``: the one measured there ((model, type) in ``measured``),
    else the roofline's prediction from its profile on its ``base`` type (`on_type`)."""
    m = (measured or {}).get((profile.model, gpu_type))
    if m is not None:
        return m
    return on_type(profile, base, gpu_type, types)


def type_rows(job: Job, costs: Mapping[str, CostModel], allowed: Sequence[str], base: str, max_gpus: int,
              measured: Mapping[tuple[str, str], Profile] | None = None,
              types: Mapping[str, GpuType] | None = None, fraction_done: float = 0.0,
              finish: Callable[[str, WaitingJob], WaitingJob] | None = None) -> dict[str, WaitingJob]:
    """``WaitingJob.by_type``: the job on each type it allows (all of ``costs``' when ``allowed``
    is empty), with its profile there (`type_profile`) on that type's nodes and memory (``costs``:
    a cost model per type, whose ``gpu_mem`` is the type's; a batch that does not fit is inf
    there, an adaptive job's best batch is chosen for the type; a count the placement rule cannot
    lay out on the type's nodes is inf), each with ``best_any``, its best
    run over them all. A type it allows that no node has is absent; so is one where no count is
    allowed (its batch fits nowhere). Replay calls it on one iteration of the job; the service on
    the whole job from ``fraction_done`` (an adaptive job's progress), with ``finish(type, rows)``
    applying what it knows of the type besides the profile (its learned correction, the time
    limit, the start-up term) before ``best_any`` is taken."""
    out: dict[str, WaitingJob] = {}
    for t in (allowed or tuple(costs)):
        cost = costs.get(t)
        if cost is None:
            continue
        on = replace(job, profile=type_profile(job.profile, base, t, measured, types))
        w = waiting_job(on, cost, max_gpus, fraction_done)
        # counts the placement rule cannot lay out on the type's nodes (k nodes x g/k) are out there
        nodes, gpn = cost.cluster.nodes, cost.cluster.gpus_per_node
        multi = w.run_multi_node.copy()
        for g in range(2, len(multi) + 1):
            if math.isfinite(multi[g - 1]) and not splits(g, nodes, gpn):
                multi[g - 1] = math.inf
        w = replace(w, run_multi_node=multi)
        if finish is not None:
            w = finish(t, w)
        if math.isfinite(w.best_run):
            out[t] = w
    best = min((w.best_run for w in out.values()), default=math.inf)
    return {t: replace(w, best_any=best) for t, w in out.items()}


def requested_gpu_s(w: WaitingJob) -> float:
    """The GPU-seconds a job asked for, as predicted when it arrived: its requested GPU count x its
    run time there (one node if allowed, else spread; its best run if the count is not allowed)."""
    r = w.requested_gpus
    pr = w.run_time(r, spans_nodes=False)
    if not math.isfinite(pr):
        pr = w.run_time(r, spans_nodes=True)
    return r * pr if math.isfinite(pr) else r * w.best_run


class ArrivalHistory:
    """Submit times and the running sum of requested GPU-seconds (`SlotState.arrivals_*`), kept
    sorted by (submit time, key) as jobs are first seen, the simulator's order."""

    def __init__(self) -> None:
        self._t: list[float] = []
        self._keys: list[str] = []
        self._gpu_s: list[float] = []
        self._seen: set[str] = set()
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._t)

    def add(self, key: str, submit_time: float, gpu_s: float) -> None:
        """Record one job's arrival (once per key; later calls for the same key are ignored)."""
        if key in self._seen or not math.isfinite(gpu_s):
            return
        self._seen.add(key)
        k = len(self._t)
        while k > 0 and (self._t[k - 1], self._keys[k - 1]) > (submit_time, key):  # nearly in order: walk back
            k -= 1
        self._t.insert(k, submit_time)
        self._keys.insert(k, key)
        self._gpu_s.insert(k, gpu_s)
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.asarray(self._t, dtype=float), np.cumsum(np.asarray(self._gpu_s, dtype=float)))
        return self._arrays
