"""What a policy sees and what it returns. Pure data: no I/O, no clocks.

The simulator (`lyasched.sim`) and the live service (`lyasched serve`) both build a
`SlotState` and call `Policy.decide` on it, so what `replay` measures is what `serve` does.
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import attrgetter
from bisect import bisect_left, insort
from dataclasses import dataclass, field, replace as _replace
from typing import Mapping, Protocol, Sequence

import numpy as np

from lyasched.costmodel import goodput
from lyasched.costmodel.cost import CostModel
from lyasched.costmodel.jobspec import Job
from lyasched.policy.placement import EQUAL_PER_NODE, Placement
from lyasched.policy.tenants import TenantBook


@dataclass(frozen=True)
class WaitingJob:
    """A job waiting to start, with its predicted run time for every GPU count.

    ``run_one_node[k]`` / ``run_multi_node[k]`` is the predicted run time on k+1 GPUs packed on
    one node / spread over several nodes; ``inf`` where that count is not allowed.
    """

    job_id: str
    submit_time: float
    work: float  # estimated compute time: the job's contribution to the actual queue Q
    run_one_node: np.ndarray
    run_multi_node: np.ndarray
    requested_gpus: int = 1
    time_limit: float = math.inf
    user: str = ""
    attained: float = 0.0  # GPU-seconds already received (jobs preempted earlier; LAS policies)
    # the job lets the scheduler choose its batch with its GPUs (lyasched.costmodel.goodput): its rows
    # are at its best batch per count. No shipped rule reads it yet (docs/elastic.md, "Adaptive jobs")
    adaptive: bool = False
    # GPU type -> this job as it would run on that type (its rows there; `type_rows`); only the
    # types it allows. None: the job is untyped (one type, or a heterogeneity-unaware view)
    by_type: Mapping[str, "WaitingJob"] | None = field(default=None, compare=False, repr=False)
    best_any: float = math.inf  # a by_type view: the job's best run over all the types it allows (inf: unknown)
    # an adaptive job's pieces ahead (its scaling now, not only its rows' average over what is left);
    # None: not adaptive, or a builder that does not know them
    pieces: goodput.PiecesLeft | None = field(default=None, compare=False, repr=False)

    @property
    def best_run(self) -> float:
        return float(min(self.run_one_node.min(), self.run_multi_node.min()))

    def run_time(self, g: int, spans_nodes: bool) -> float:
        row = self.run_multi_node if spans_nodes else self.run_one_node
        return float(row[g - 1]) if 1 <= g <= len(row) else math.inf


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs. ``expected_end`` is what a policy may assume (backfill: the time limit)."""

    job_id: str
    gpus: int
    placement: Placement
    start_time: float
    expected_end: float
    attained: float = 0.0  # GPU-seconds received so far (for LAS-style policies)
    preemptible: bool = False
    predicted_end: float = math.nan  # start + predicted run time (lyapunov's release forecast); nan = unknown
    user: str = ""  # its tenant (lyasched.policy.tenants); "" = unknown


@dataclass(frozen=True)
class SlotState:
    """Everything a policy may look at in one slot."""

    now: float
    slot_len: float
    free: tuple[int, ...]  # free GPUs per node (GPUs used by jobs lyasched does not own are not free)
    gpus_per_node: int
    waiting: tuple[WaitingJob, ...]
    running: tuple[RunningJob, ...] = ()
    # Recent arrival history, for an arrival-rate estimate (lyapunov): submit times of the jobs
    # submitted before ``now`` (ascending; finished, running and waiting alike) and the running
    # sum of their requested GPU-seconds as estimated at submission (requested GPUs x predicted
    # run time there). None = unknown: the policy then never hands out more GPUs than asked.
    arrivals_t: np.ndarray | None = None
    arrivals_cum_gpu_s: np.ndarray | None = None
    # Tenants' shares and GPU-time received / entitled so far (lyasched.policy.tenants); a job's
    # tenant is its ``user``. None = no tenant input: the policy ignores tenants.
    tenants: TenantBook | None = None
    # GPU type of each node (index i is free[i]'s node); () = one type everywhere, the policy
    # places on any node. With types, a job's ``by_type`` says where it may run and how fast.
    node_types: tuple[str, ...] = ()

    @property
    def max_gpus(self) -> int:
        return len(self.waiting[0].run_one_node) if self.waiting else 0


@dataclass(frozen=True)
class Decision:
    """Start ``job_id`` on ``gpus`` GPUs placed as ``placement`` (at global batch ``batch``)."""

    job_id: str
    gpus: int
    placement: Placement
    score: float = 0.0
    reason: str = ""
    # global batch to (re)start an adaptive job at (lyasched.costmodel.goodput); None: a fixed-batch
    # job's own batch, an adaptive job's best batch for these GPUs at its progress
    batch: int | None = None

    @property
    def spans_nodes(self) -> bool:
        return len(self.placement) > 1


@dataclass(frozen=True)
class SlotResult:
    starts: tuple[Decision, ...]
    preempt: tuple[str, ...] = ()
    q: float = 0.0  # actual queue after the slot's decisions
    z: float = 0.0  # virtual queue after the slot's decisions
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a policy needs from whoever carries out its decisions (simulator or service).

    - ``preemptive``: its `SlotResult.preempt` must be carried out (the live service cannot: it
      refuses such a policy at start-up).
    - ``needs_true_runtimes``: an oracle; its rows are built from true run times, which only the
      simulator has (the service refuses it).
    - ``time_invariant``: the decision reads no clock, so after a slot that starts nothing nothing
      changes until a job arrives or ends (the simulator jumps there).
    - ``placement``: the placement rule its decisions follow (`lyasched.policy.placement`); the
      only one a Slurm target can carry out is `EQUAL_PER_NODE`.
    - ``moves``: it resizes running jobs (a job in ``preempt`` and in ``starts`` of one slot) and
      reads them as `lyasched.policy.movable.MovableJob`; implies ``preemptive`` (docs/elastic.md).
    - ``reads_tenant_usage``: it reads `TenantBook.usage`, the tenants' decayed usage; a replay
      keeps that usage only then (its decay is a third of a ledger step), the service always.
    """

    preemptive: bool = False
    needs_true_runtimes: bool = False
    time_invariant: bool = False
    placement: str = EQUAL_PER_NODE
    moves: bool = False
    reads_tenant_usage: bool = False


class Policy(Protocol):
    name: str
    capabilities: Capabilities

    def decide(self, state: SlotState) -> SlotResult: ...


def capabilities(policy: object) -> Capabilities:
    """A policy's declared capabilities; a policy object that declares none gets the defaults
    (non-preemptive, estimates only, reads the clock, Slurm's placement rule), the safe ones."""
    caps = getattr(policy, "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


def type_slice(state: SlotState, gpu_type: str, waiting: Sequence[WaitingJob],
               idx: tuple[int, ...] | None = None) -> tuple[SlotState, tuple[int, ...]]:
    """The part of a typed ``state`` on the nodes of ``gpu_type``, as an untyped state of its own:
    those nodes renumbered 0.., the running jobs placed wholly on them (placements renumbered),
    and those of ``waiting`` that allow the type, with their rows there. Returns it and the
    nodes' indices in ``state`` (to map a decision's placement back, `unslice`); ``idx``: those
    indices, when the caller kept them (`type_nodes`)."""
    if idx is None:
        idx = type_nodes(state.node_types)[gpu_type]
    free = state.free
    cap = [free[i] for i in idx]
    running = []
    local = {g: k for k, g in enumerate(idx)} if state.running else {}
    for r in state.running:
        if r.placement and all(n in local for n, _ in r.placement):
            pl = tuple((local[n], k) for n, k in r.placement)
            for n, k in pl:
                cap[n] += k
            running.append(r if pl == r.placement else _replace(r, placement=pl))
    try:  # C-speed (no Python frame per job: 10,000 waiting jobs a slot): every job typed
        jobs = tuple(filter(None, map(dict.get, map(_BY_TYPE, waiting), repeat(gpu_type))))
    except TypeError:  # some untyped (by_type None): their own rows on every type
        jobs = tuple(w.by_type[gpu_type] if w.by_type is not None else w
                     for w in waiting if w.by_type is None or gpu_type in w.by_type)
    sub = _replace(state, free=tuple(free[i] for i in idx), gpus_per_node=max(cap, default=0),
                   waiting=jobs, running=tuple(running), node_types=())
    return sub, idx


def type_nodes(node_types: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Each GPU type's nodes (their indices, in order): what `type_slice` renumbers."""
    out: dict[str, list[int]] = {}
    for i, t in enumerate(node_types):
        out.setdefault(t, []).append(i)
    return {t: tuple(v) for t, v in out.items()}


def unslice(d: Decision, idx: tuple[int, ...]) -> Decision:
    """A decision made on `type_slice`'s renumbered nodes, on the whole cluster's (the decision
    itself when its nodes keep their numbers: the first type's, in a cluster listed type by type)."""
    pl = d.placement
    if len(pl) == 1:  # the usual start: one node, nothing to sort
        n, k = pl[0]
        if idx[n] == n:
            return d
        return Decision(d.job_id, d.gpus, ((idx[n], k),), d.score, d.reason, d.batch)
    out = tuple(sorted((idx[n], k) for n, k in pl))
    return d if out == pl else Decision(d.job_id, d.gpus, out, d.score, d.reason, d.batch)


_BY_TYPE = attrgetter("by_type")


def untyped(state: SlotState) -> SlotState:
    """A heterogeneity-unaware view of ``state``: every GPU one type (the jobs' own rows, those of
    the reference type), placement anywhere."""
    return _replace(state, node_types=()) if state.node_types else state


def waiting_job(job: Job, cost: CostModel, max_gpus: int, fraction_done: float = 0.0) -> WaitingJob:
    """Precompute a job's run-time rows for GPU counts 1..max_gpus (done once per job), from
    ``fraction_done`` of it (an adaptive job's base steps: its rows are the time left at its best
    batch per count, re-tuned as phi changes, `lyasched.costmodel.goodput.remaining_rows`)."""
    gpn = cost.cluster.gpus_per_node
    if job.adaptive is not None:
        one, multi = goodput.remaining_rows(cost, job, max_gpus, fraction_done)
    else:
        one = np.full(max_gpus, np.inf)
        multi = np.full(max_gpus, np.inf)
        for g in job.allowed_counts(cost):
            if g > max_gpus:
                continue
            if g <= gpn:
                one[g - 1] = job.run_time(cost, g, spans_nodes=False)
            if g > 1:
                multi[g - 1] = job.run_time(cost, g, spans_nodes=True)
        if fraction_done:
            one, multi = one * (1.0 - fraction_done), multi * (1.0 - fraction_done)
    limit = job.time_limit if job.time_limit is not None else math.inf
    return WaitingJob(
        job_id=job.job_id,
        submit_time=job.submit_time,
        work=job.work() * (1.0 - fraction_done) if fraction_done else job.work(),
        run_one_node=one,
        run_multi_node=multi,
        requested_gpus=min(job.requested_gpus, max_gpus),
        time_limit=limit,
        user=job.user,
        adaptive=job.adaptive is not None,
        pieces=goodput.PiecesLeft(goodput.piece_table(cost, job, max_gpus), fraction_done) if job.adaptive is not None else None,
    )


def place(free: Sequence[int], g: int, one_node: bool) -> Placement | None:
    """Pick nodes for g GPUs from ``free``; None if impossible (the rule is `lyasched.policy.placement`'s)."""
    return FreeGpus(tuple(free), max(free, default=0)).take(g, one_node)


class FreeGpus:
    """Free GPUs per node, bucketed by free count (each bucket's nodes in index order), so best fit
    looks at O(gpus per node) buckets and takes a bucket's head; a move is a bisect in two lists.

    The placement rule of every policy (`lyasched.policy.placement`, Slurm's): one node by best
    fit (the fullest node that still has g free, lowest index first), which keeps large holes for
    later multi-GPU jobs; several nodes as k nodes x g/k GPUs, the fewest nodes that have room,
    chosen by best fit too (== `placement.equal_placement`).
    """

    def __init__(self, free: tuple[int, ...], gpus_per_node: int) -> None:
        self.free = list(free)
        self.cap = max([gpus_per_node, *self.free]) if self.free else gpus_per_node
        # nodes by free count, each list in index order (the rule's tie-break: lowest index first)
        self.buckets: list[list[int]] = [[] for _ in range(self.cap + 1)]
        for i, f in enumerate(self.free):
            self.buckets[f].append(i)
        self.total = sum(self.free)
        self._splits: dict[int, tuple[int, int] | None] = {}  # g -> layout, until the pool changes

    def copy(self) -> FreeGpus:
        """The same pool in lists of its own, without bucketing the nodes again (a trial to undo)."""
        out = FreeGpus.__new__(FreeGpus)
        out.free, out.cap, out.total = self.free[:], self.cap, self.total
        out.buckets = [b[:] for b in self.buckets]
        out._splits = dict(self._splits)
        return out

    def _move(self, node: int, new: int) -> None:
        self._splits.clear()
        old = self.buckets[self.free[node]]
        del old[bisect_left(old, node)]
        self.free[node] = new
        insort(self.buckets[new], node)

    def max_on_one_node(self) -> int:
        for f in range(self.cap, 0, -1):
            if self.buckets[f]:
                return f
        return 0

    def fits(self, g: int, one_node: bool) -> bool:
        if one_node:
            return g <= self.max_on_one_node()
        return g <= self.total and g > self.max_on_one_node() and self._split(g) is not None

    def spread_mask(self, k: int) -> np.ndarray:
        """For g = 1..k: whether g GPUs can spread over several nodes by the rule (k nodes x g/k)."""
        ok = np.zeros(k + 1, dtype=bool)
        have = 0
        for per in range(self.cap, 0, -1):
            have += len(self.buckets[per])
            if have >= 2:
                ok[2 * per: min(k, per * have) + 1: per] = True
        return ok[1:]

    def _split(self, g: int) -> tuple[int, int] | None:
        """The (k nodes, g/k GPUs each) layout the rule picks for g GPUs: fewest nodes with room."""
        if g in self._splits:
            return self._splits[g]
        self._splits[g] = out = self._find_split(g)
        return out

    def _find_split(self, g: int) -> tuple[int, int] | None:
        n = len(self.free)
        have = 0  # nodes with at least ``per`` free, as per falls
        f = self.cap
        for per in range(min(self.cap, g // 2), 0, -1):
            while f >= per:
                have += len(self.buckets[f])
                f -= 1
            if g % per == 0 and g // per <= min(n, have):
                return g // per, per
        return None

    def take(self, g: int, one_node: bool) -> Placement | None:
        """Best fit on one node; or spread over the fewest nodes (most free first)."""
        if one_node:
            for f in range(g, self.cap + 1):
                if self.buckets[f]:
                    node = self.buckets[f][0]
                    self._move(node, f - g)
                    self.total -= g
                    return ((node, g),)
            return None
        if g > self.total:
            return None
        split = self._split(g)
        if split is None:
            return None
        k, per = split
        out: list[tuple[int, int]] = []
        for f in range(per, self.cap + 1):  # best fit: the fullest nodes with room, lowest index first
            for node in self.buckets[f]:  # in index order; moved only after the loop
                out.append((node, per))
                if len(out) == k:
                    break
            if len(out) == k:
                break
        for node, n in out:
            self._move(node, self.free[node] - n)
        self.total -= g
        return tuple(sorted(out))

    def give(self, placement: Placement) -> None:
        """Return a placement's GPUs (undo a `take`)."""
        for node, n in placement:
            self._move(node, self.free[node] + n)
        self.total += sum(n for _, n in placement)


def apply(free: list[int], placement: Placement) -> None:
    for node, n in placement:
        free[node] -= n
        if free[node] < 0:
            raise ValueError(f"over-allocated node {node}")
