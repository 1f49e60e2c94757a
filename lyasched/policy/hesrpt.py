"""Goodput shares for the mean JCT: every job's GPUs re-chosen each slot, as Pollux does, but with
the shares that minimise the mean completion time of jobs whose sizes are known (heSRPT) instead
of Pollux's fairness objective.

Why. Pollux (`lyasched.policy.pollux`) maximises the p = -1 mean of the jobs' speed-ups, which
evens out the slow-downs. For the mean JCT, shorter jobs should get more: heSRPT (Berg, Vesilo and
Harchol-Balter, 2020) shows that for M jobs whose speed-up on a share x of the machine is x^p, the
shares that minimise the total flow time depend only on the jobs' ranks by remaining size: the
i-th largest gets ``theta_i = (i/M)^c - ((i-1)/M)^c`` with ``c = 1 / (1 - p)``, so the smallest
gets the most and the largest the least, and all are served at once (speed-ups are concave).

How. Real jobs do not scale as x^p, so the shares become weights on each job's remaining time:
the search minimises ``sum_j w_j * remaining_j(g_j)`` with ``w_j = theta_j^(1+p) / size_j``
(size: ``remaining_j(f) * f^p``, read at the fair share f of the GPUs, G / M, or the largest
allowed count below it: the x^p model fitted where jobs run, not on one GPU, where measured rows
scale almost linearly). For rows of the form size / g^p the
optimum of that sum is exactly g_j proportional to theta_j; on measured rows (the goodput model's:
for an adaptive job, its best batch per count as its noise scale grows) a job that scales worse
than x^p gets fewer GPUs and one that scales better more. Restarts are charged as time: a running
job's count other than its current one costs ``move_charge`` moves (its move cost each: the move,
the moves back when the shares turn, and the GPUs idle while it relaunches; 8, measured on the
design set, docs/hesrpt.md), added to its remaining time; a job that cannot move keeps its GPUs.
An adaptive job's rows credit it now with the scaling of its last pieces (largest noise scale),
though the allocation is re-chosen long before then: so its loss on g is its remaining time at an
anchor count (its current one; a waiting job's fair-share count) times the seconds its next
``horizon_s`` of work takes on g over those on the anchor (`set_shape`, from the pieces the
builders hand: `goodput.PiecesLeft`); a job with less left, or without pieces, by its rows.

The search, placement rules and decisions are the pollux baseline's (from the current allocation;
up to one node or whole nodes; resizes and suspensions as `elastic`'s); only the objective, the
restart charge and the admission (smallest first, as SRPT; an arrival waits up to a slot for the
GPUs of jobs that end within it rather than shrink a running job: `_may_shrink`) are this policy's. What it reads
is what pollux reads: the waiting jobs' rows and the running jobs' `MovableJob` rows and move
costs, which the simulator and the service build the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lyasched.costmodel.goodput import PiecesLeft
from lyasched.policy.movable import MovableJob
from lyasched.policy.allocation import AllocJob
from lyasched.policy.pollux import PolluxPolicy
from lyasched.policy.state import RunningJob, SlotResult, SlotState, WaitingJob

HOUR = 3600.0  # the weights' unit (only their ratios matter; it keeps them near 1)


@dataclass
class _Weighted(AllocJob):
    w: float = 1.0  # heSRPT weight: theta^(1+p) / size
    charge: float = 0.0  # seconds a change of count costs (move_charge x its move cost)
    pieces: PiecesLeft | None = None  # an adaptive job's pieces ahead (WaitingJob.pieces)
    anchor: int = 0  # the count whose remaining time the shape is scaled to (0: no shape)
    shape: dict[int, float] = field(default_factory=dict)  # count -> seconds of the work just ahead

    def loss(self, g: int) -> float:
        """Weighted remaining time on g GPUs, a change of a running job's count charged; with a
        shape, the remaining time at the anchor scaled by the work just ahead on g over on it."""
        s = self.shape
        r = self.rem[self.anchor] * s[g] / s[self.anchor] if g in s else self.rem.get(g, math.inf)
        if self.current and g != self.current:
            if self.fixed:
                return math.inf
            r += self.charge
        return self.w * r


@dataclass
class HesrptPolicy(PolluxPolicy):
    """Pollux's re-allocation of every job each slot, with heSRPT's shares as the objective."""

    p: float = 0.5  # the speed-up exponent the shares assume (x^p on a share x)
    move_charge: float = 8.0  # moves a change of count is charged
    horizon_s: float = 360.0  # an adaptive job's counts weighed by its next horizon_s of work (0: all of it)
    name: str = "hesrpt"
    _slot_s: float = field(default=0.0, init=False, repr=False)  # this call's slot length
    _freeing: int = field(default=0, init=False, repr=False)  # GPUs freed within it (`_allocate`)
    _now: float = field(default=0.0, init=False, repr=False)  # this call's time

    def __post_init__(self) -> None:
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"hesrpt: p must be in [0, 1), got {self.p}")
        if not self.horizon_s >= 0.0:
            raise ValueError(f"hesrpt: horizon_s must be >= 0, got {self.horizon_s}")

    def _make(self, job_id: str, submit: float, rem: dict[int, float]) -> AllocJob | None:
        if not rem:
            return None
        counts = sorted(rem)
        return _Weighted(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))

    def _waiting(self, w: WaitingJob, gpn: int) -> AllocJob | None:
        j = super()._waiting(w, gpn)
        if isinstance(j, _Weighted):
            j.pieces = w.pieces
        return j

    def _running(self, r: RunningJob, gpn: int, now: float) -> AllocJob | None:
        j = super()._running(r, gpn, now)
        if isinstance(j, _Weighted):
            j.charge = self.move_charge * (r.cost(self.move_cost) if isinstance(r, MovableJob) else self.move_cost)
            if isinstance(r, MovableJob):
                j.pieces = r.pieces
        return j

    def decide(self, state: SlotState) -> SlotResult:
        self._slot_s, self._now = state.slot_len, state.now
        return super().decide(state)

    def _allocate(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        fair = max(1, sum(cap) // max(1, len(jobs)))
        # GPUs of running jobs that finish before the next decision: an arrival waits for those
        self._freeing = sum(j.current for j in jobs if j.current and j.rem.get(j.current, math.inf) <= self._slot_s)
        if self.horizon_s > 0:
            for j in jobs:
                if isinstance(j, _Weighted) and j.pieces is not None and not j.fixed:
                    set_shape(j, j.current or max((c for c in j.counts if c <= fair), default=j.counts[0]),
                              self.horizon_s, gpn)
        set_weights(jobs, self.p, fair=fair)
        return self._local(jobs, cap, gpn)

    def _admission_key(self, j: AllocJob) -> tuple[float, str]:
        """Smallest first (SRPT's order): the jobs the shares favour enter first."""
        return (j.base, j.job_id)

    def _may_shrink(self, victim: AllocJob, newcomer: AllocJob) -> bool:
        """An arrival shrinks a running job only when the jobs finishing within the slot free fewer
        GPUs than it needs: otherwise it waits for theirs, and no job restarts; at most a slot, since
        a job that overruns its prediction looks as if it ended within every slot."""
        return newcomer.counts[0] > self._freeing or self._now - newcomer.submit >= self._slot_s


def shares(m: int, p: float) -> list[float]:
    """heSRPT's shares of m jobs, largest job first: theta_i = (i/m)^c - ((i-1)/m)^c, c = 1/(1-p)."""
    c = 1.0 / (1.0 - p)
    return [(i / m) ** c - ((i - 1) / m) ** c for i in range(1, m + 1)]


def size(j: AllocJob, p: float, fair: int) -> float:
    """The job's size in the x^p model, ``remaining(g) * g^p``, read at the fair share ``fair`` (or
    the largest allowed count below it; its smallest count when none is)."""
    g = max((c for c in j.counts if c <= fair), default=j.counts[0])
    return max(j.rem[g] * g**p, 1e-9)


def set_weights(jobs: list[AllocJob], p: float, fair: int = 1) -> None:
    """Each job's weight from its rank by size (`size`, at the fair share ``fair``), largest first,
    ties by id."""
    sz = {j.job_id: size(j, p, fair) for j in jobs}
    order = sorted(jobs, key=lambda j: (-sz[j.job_id], j.job_id))
    for j, th in zip(order, shares(len(order), p)):
        if isinstance(j, _Weighted):
            j.w = HOUR * th ** (1.0 + p) / sz[j.job_id]


def set_shape(j: _Weighted, anchor: int, horizon_s: float, gpn: int) -> None:
    """The job's shape: seconds on each allowed count for the work its next ``horizon_s`` on
    ``anchor`` GPUs would do (all that is left when less is); none when that is no work."""
    assert j.pieces is not None
    if anchor not in j.rem:
        return
    until = j.pieces.ahead(anchor, anchor > gpn, horizon_s)
    if not until > j.pieces.fraction_done:
        return
    one, multi = j.pieces.time_to(until)
    shape = {g: float(multi[g - 1] if g > gpn else one[g - 1]) for g in j.counts if g <= len(one)}
    shape = {g: t for g, t in shape.items() if 0.0 < t < math.inf}
    if anchor in shape:
        j.anchor, j.shape = anchor, shape
