"""Goodput of a job that lets the scheduler choose its batch (issue 35; docs/model.md, "Goodput").

A job that opts in (`Job.adaptive`, an `Adaptive`) has a base global batch M0 (its
``global_batch``: the batch its learning rate is tuned for), a largest global batch
(``max_batch``) and a gradient noise scale phi that changes with the fraction of its base steps
done (`NoiseScale`). Its length (``iterations``) is counted in base steps: one step at global
batch M advances it by ``(M / M0) * efficiency(phi, M0, M)`` base steps, with the statistical
efficiency ``(phi + M0) / (phi + M)`` (McCandlish et al. 2018, as Pollux uses it). Goodput is
base steps per second; a step at batch M on g GPUs takes `step_time` (the cost model's
iteration time, with gradient accumulation when M/g samples do not fit in one GPU's memory).

The job re-tunes its batch as training goes on, at fixed progress steps: the base steps are cut
into ``Adaptive.pieces`` (default ``PIECES``) equal pieces and in piece k it runs at the batch that maximises goodput at phi
of the piece's middle (`piece_phi`). So the time to finish from any progress on a fixed
configuration is a sum over pieces (`run_time`), and the progress after some seconds walks the
same pieces (`progress_after`): replay, the policies' rows and the live service all use these.

API (stable; the policies and the simulator import only these names):

- `NoiseScale.parse("0:120;0.5:900;1:4000")` / ``NoiseScale.parse("500")``, ``.at(f)``, ``.format()``
- `Adaptive(max_batch, noise)`; `efficiency(phi, m0, m)`; `base_steps_per_step(phi, m0, m)`
- `accumulation(cost, profile, m, g)` (micro-steps, 0 = does not fit), `step_time(cost, profile, m, g, spans)`
- `batch_candidates(cost, job, g)`, `goodput(cost, job, g, spans, m, phi)`,
  `best_batch(cost, job, g, spans, fraction_done)`
- `allowed_counts(cost, job)`, `piece_times(cost, job, g, spans)`,
  `run_time(cost, job, g, spans, fraction_done=0, first_batch=None)`,
  `progress_after(cost, job, g, spans, fraction_done, seconds, first_batch=None)`,
  `remaining_rows(cost, job, max_gpus, fraction_done)` (per-GPU-count rows as `waiting_job` builds them),
  `PiecesLeft(table, fraction_done, scale)` (``.ahead``, ``.time_to``: the work just ahead, per count),
  `piece_table(cost, job, max_gpus)` (the same rows from any progress, vectorised: `PieceTable.rows`)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from lyasched.costmodel.cost import CostModel, Profile

PIECES = 8  # progress steps at which a job re-tunes its batch (equal shares of its base steps)
GRID_RATIO = 2.0 ** 0.5  # geometric step of the batch candidates between the smallest and max_batch


@dataclass(frozen=True)
class NoiseScale:
    """phi as a function of the fraction of base steps done: points ``((fraction, phi), ...)``,
    fractions in [0, 1] increasing, linearly interpolated, constant outside them."""

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("noise scale: no points")
        last = -math.inf
        for f, phi in self.points:
            if not (0.0 <= f <= 1.0) or not f > last:
                raise ValueError(f"noise scale: fractions must be in [0, 1] and increasing, got {f:g}")
            if not (phi > 0 and math.isfinite(phi)):
                raise ValueError(f"noise scale: phi must be a finite number > 0, got {phi:g}")
            last = f

    @classmethod
    def constant(cls, phi: float) -> "NoiseScale":
        return cls(((0.0, float(phi)),))

    @classmethod
    def parse(cls, text: str) -> "NoiseScale":
        """``"0:120;0.5:900;1:4000"`` (fraction:phi pairs) or a single number (a constant phi)."""
        s = text.strip()
        if not s:
            raise ValueError("noise scale: empty")
        try:
            if ":" not in s and ";" not in s:
                return cls.constant(float(s))
            pts = []
            for part in s.split(";"):
                f, _, phi = part.partition(":")
                if not _:
                    raise ValueError(f"noise scale: {part!r} is not fraction:phi")
                pts.append((float(f), float(phi)))
        except ValueError as e:
            if str(e).startswith("noise scale"):
                raise
            raise ValueError(f"noise scale: cannot read {text!r} (want 0:120;0.5:900;1:4000 or one number)") from None
        return cls(tuple(pts))

    def format(self) -> str:
        if len(self.points) == 1 and self.points[0][0] == 0.0:
            return f"{self.points[0][1]:g}"
        return ";".join(f"{f:g}:{phi:g}" for f, phi in self.points)

    def at(self, fraction: float) -> float:
        pts = self.points
        if fraction <= pts[0][0]:
            return pts[0][1]
        for (f0, p0), (f1, p1) in zip(pts, pts[1:]):
            if fraction <= f1:
                return p0 + (p1 - p0) * (fraction - f0) / (f1 - f0)
        return pts[-1][1]


@dataclass(frozen=True)
class Adaptive:
    """A job's opt-in to batch choice: its largest global batch and its noise scale. The base
    batch M0 is the job's ``global_batch``; its ``iterations`` are base steps."""

    max_batch: int
    noise: NoiseScale
    # progress steps at which the job re-tunes its batch (a measured job: one per epoch)
    pieces: int = PIECES

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max batch must be >= 1, got {self.max_batch}")
        if self.pieces < 1:
            raise ValueError(f"pieces must be >= 1, got {self.pieces}")


class Job(Protocol):
    """What the model reads of a job (`lyasched.costmodel.jobspec.Job` has it; that module imports
    this one, so the model names the fields it needs instead of importing the class)."""

    @property
    def profile(self) -> Profile: ...
    @property
    def global_batch(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def adaptive(self) -> Adaptive | None: ...
    @property
    def min_gpus(self) -> int: ...
    @property
    def max_gpus(self) -> int: ...


@dataclass(frozen=True)
class _Shape:
    """A job reduced to what the model reads (the memoised tables' key)."""

    profile: Profile
    global_batch: int
    iterations: int
    adaptive: Adaptive | None
    min_gpus: int = 1
    max_gpus: int = 1


def efficiency(phi: float, m0: float, m: float) -> float:
    """Statistical efficiency of batch m relative to m0: (phi + m0) / (phi + m)."""
    return (phi + m0) / (phi + m)


def base_steps_per_step(phi: float, m0: float, m: float) -> float:
    """Base steps one step at global batch m is worth: (m / m0) * efficiency."""
    return (m / m0) * efficiency(phi, m0, m)


def accumulation(cost: CostModel, profile: Profile, m: int, g: int) -> int:
    """Micro-steps per step for global batch m on g GPUs (m a multiple of g): 1 when m/g samples
    fit in one GPU's memory, else the fewest that make each micro-batch fit; 0 when not even one
    sample fits."""
    local = m // g
    if local < 1:
        return 0
    if profile.memory(local) <= cost.cluster.gpu_mem:
        return 1
    if profile.mem_per_sample <= 0:
        return 0  # the model itself does not fit
    fit = int((cost.cluster.gpu_mem - profile.mem_base) // profile.mem_per_sample)
    if fit < 1:
        return 0
    return -(-local // fit)


def step_time(cost: CostModel, profile: Profile, m: int, g: int, spans_nodes: bool) -> float:
    """Seconds per step at global batch m (a multiple of g) on g GPUs: the cost model's iteration
    time at the micro-batch, plus the compute of the other micro-steps of a gradient accumulation
    (one all-reduce per step); inf when no micro-batch fits."""
    s = accumulation(cost, profile, m, g)
    if s == 0:
        return math.inf
    micro = -(-(m // g) // s)
    return cost.iter_time(profile, g * micro, g, spans_nodes) + (s - 1) * profile.step_time(micro)


def batch_candidates(cost: CostModel, job: Job, g: int) -> tuple[int, ...]:
    """The global batches a job may run at on g GPUs: multiples of g from the smallest >= M0 up to
    max_batch, on a geometric grid (ratio ``GRID_RATIO``) plus the largest; () when none. A
    non-adaptive job: its fixed batch when the cost model allows g."""
    ad = job.adaptive
    if ad is None:
        return (job.global_batch,) if cost.allowed(job.profile, job.global_batch, g) else ()
    return _candidates(job.global_batch, ad.max_batch, g)


@lru_cache(maxsize=65536)
def _candidates(m0: int, top: int, g: int) -> tuple[int, ...]:
    if g < 1:
        return ()
    lo = g * (-(-m0 // g))
    hi = g * (max(top, m0) // g)
    if lo > hi:
        return ()
    out: list[int] = []
    x = float(lo)
    while True:
        m = g * int(round(x / g))
        if m > hi:
            break
        if not out or m > out[-1]:
            out.append(m)
        x *= GRID_RATIO
    if out[-1] != hi:
        out.append(hi)
    return tuple(out)


def goodput(cost: CostModel, job: Job, g: int, spans_nodes: bool, m: int, phi: float) -> float:
    """Base steps per second at global batch m on g GPUs when the noise scale is phi."""
    t = step_time(cost, job.profile, m, g, spans_nodes)
    if not math.isfinite(t) or t <= 0:
        return 0.0
    return base_steps_per_step(phi, job.global_batch, m) / t


def _best(cost: CostModel, job: Job, g: int, spans_nodes: bool, phi: float) -> tuple[int, float]:
    """(batch, goodput) of the best candidate at phi; the smallest batch wins ties; (0, 0) if none."""
    best_m, best_v = 0, 0.0
    for m in batch_candidates(cost, job, g):
        v = goodput(cost, job, g, spans_nodes, m, phi)
        if v > best_v * (1 + 1e-12):
            best_m, best_v = m, v
    return best_m, best_v


def piece_phi(job: Job, k: int) -> float:
    """phi the job tunes its batch for in piece k (of its ``pieces``): at the piece's middle."""
    assert job.adaptive is not None
    return job.adaptive.noise.at((k + 0.5) / job.adaptive.pieces)


def _n(job: Job) -> int:
    return job.adaptive.pieces if job.adaptive is not None else PIECES


def piece_of(fraction_done: float, pieces: int = PIECES) -> int:
    return min(pieces - 1, max(0, int(math.floor(fraction_done * pieces + 1e-12))))


def best_batch(cost: CostModel, job: Job, g: int, spans_nodes: bool, fraction_done: float = 0.0) -> int:
    """The global batch the job runs at on g GPUs at this progress (its fixed batch if it does
    not opt in); 0 when g is not allowed."""
    if job.adaptive is None:
        return job.global_batch if batch_candidates(cost, job, g) else 0
    return _best(cost, job, g, spans_nodes, piece_phi(job, piece_of(fraction_done, _n(job))))[0]


def allowed_counts(cost: CostModel, job: Job) -> list[int]:
    """GPU counts (within the job's min/max) with at least one batch that fits."""
    return list(_allowed(cost, job.profile, job.global_batch, job.adaptive, job.min_gpus, job.max_gpus))


@lru_cache(maxsize=65536)
def _allowed(cost: CostModel, profile: Profile, m0: int, ad: Adaptive | None, lo: int, hi: int) -> tuple[int, ...]:
    if ad is None:
        return tuple(cost.allowed_counts(profile, m0, lo, hi))
    top = min(hi, cost.cluster.total_gpus)
    return tuple(g for g in range(max(1, lo), top + 1)
                 if any(accumulation(cost, profile, m, g) for m in _candidates(m0, ad.max_batch, g)))


def piece_times(cost: CostModel, job: Job, g: int, spans_nodes: bool) -> tuple[float, ...]:
    """Seconds each piece takes on g GPUs at its best batch (inf when g is not allowed)."""
    return _piece_times(cost, job.profile, job.global_batch, job.iterations, job.adaptive, g, spans_nodes)


@lru_cache(maxsize=65536)
def _piece_times(cost: CostModel, profile: Profile, m0: int, iterations: int, ad: Adaptive | None, g: int,
                 spans: bool) -> tuple[float, ...]:
    job = _Shape(profile, m0, iterations, ad)
    n = _n(job)
    width = iterations / n
    out = []
    for k in range(n):
        _, v = _best(cost, job, g, spans, piece_phi(job, k))
        out.append(width / v if v > 0 else math.inf)
    return tuple(out)


def _first_piece_time(cost: CostModel, job: Job, g: int, spans: bool, k: int, first_batch: int) -> float:
    """Seconds a whole piece k takes at ``first_batch`` (a start at a batch the scheduler chose)."""
    v = goodput(cost, job, g, spans, first_batch, piece_phi(job, k))
    return job.iterations / _n(job) / v if v > 0 else math.inf


def run_time(cost: CostModel, job: Job, g: int, spans_nodes: bool, fraction_done: float = 0.0,
             first_batch: int | None = None) -> float:
    """Seconds to finish from ``fraction_done`` of the base steps on g GPUs, re-tuning the batch
    at every piece; ``first_batch``: the batch of the first (partial) piece (None: its best)."""
    if job.adaptive is None:
        return (1.0 - fraction_done) * cost.run_time(job.profile, job.global_batch, job.iterations, g, spans_nodes)
    f = min(1.0, max(0.0, fraction_done))
    if f >= 1.0:
        return 0.0
    times = piece_times(cost, job, g, spans_nodes)
    n = _n(job)
    k = piece_of(f, n)
    head = times[k] if first_batch is None else _first_piece_time(cost, job, g, spans_nodes, k, first_batch)
    left = (k + 1) - f * n  # share of piece k still to do
    return left * head + sum(times[k + 1:])


def progress_after(cost: CostModel, job: Job, g: int, spans_nodes: bool, fraction_done: float, seconds: float,
                   first_batch: int | None = None) -> float:
    """Fraction of base steps done after ``seconds`` of computing from ``fraction_done`` on g
    GPUs (the inverse of `run_time`); at most 1."""
    f = min(1.0, max(0.0, fraction_done))
    if job.adaptive is None:
        full = cost.run_time(job.profile, job.global_batch, job.iterations, g, spans_nodes)
        return min(1.0, f + seconds / full) if full > 0 else 1.0
    times = piece_times(cost, job, g, spans_nodes)
    left = max(0.0, seconds)
    n = _n(job)
    k = piece_of(f, n)
    first = True
    while k < n and f < 1.0:
        t = times[k] if not (first and first_batch is not None) else _first_piece_time(
            cost, job, g, spans_nodes, k, first_batch)
        first = False
        share = (k + 1) / n - f
        need = share * n * t
        if left < need:
            return f + (left / (n * t) if math.isfinite(t) and t > 0 else 0.0)
        left -= need
        f = (k + 1) / n
        k += 1
    return 1.0


@dataclass(frozen=True)
class PieceTable:
    """Seconds each piece takes on k+1 GPUs at its best batch, one node (``one[piece, k]``) and
    several (``multi``), inf where not allowed; ``rows`` is the time left from any progress as
    numpy rows (what the simulator hands the policies every slot, without a loop over counts)."""

    one: np.ndarray  # [pieces, max_gpus]
    multi: np.ndarray
    one_suffix: np.ndarray  # [pieces + 1, max_gpus]: sum of pieces k.. (0 at the last)
    multi_suffix: np.ndarray

    def rows(self, fraction_done: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        f = min(1.0, max(0.0, fraction_done))
        if f >= 1.0:
            return np.where(np.isfinite(self.one[0]), 0.0, np.inf), np.where(np.isfinite(self.multi[0]), 0.0, np.inf)
        n = self.one.shape[0]
        k = piece_of(f, n)
        left = (k + 1) - f * n
        return (left * self.one[k] + self.one_suffix[k + 1], left * self.multi[k] + self.multi_suffix[k + 1])


@dataclass(frozen=True)
class PiecesLeft:
    """An adaptive job's piece table and its progress, as a builder hands it to the policies:
    what lies ahead piece by piece, for a policy that weighs the work just ahead on each count
    (its scaling now) rather than all of it (the rows credit a job now with the scaling of its
    last pieces, whose noise scale is largest). ``scale``: seconds per table second."""

    table: PieceTable
    fraction_done: float
    scale: float = 1.0

    def _piece(self, g: int, spans: bool) -> np.ndarray:
        return (self.table.multi if spans else self.table.one)[:, g - 1]

    def ahead(self, g: int, spans: bool, seconds: float) -> float:
        """Progress (share of base steps) after ``seconds`` of computing on g GPUs from here."""
        t, n = self._piece(g, spans) * self.scale, self.table.one.shape[0]
        f, left = min(1.0, max(0.0, self.fraction_done)), max(0.0, seconds)
        while f < 1.0 - 1e-12:
            k = piece_of(f, n)
            if not (0.0 < t[k] < math.inf):
                return f
            need = ((k + 1) / n - f) * n * t[k]
            if left < need:
                return f + left / (n * t[k])
            left -= need
            f = (k + 1) / n
        return 1.0

    def time_to(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        """Seconds on k+1 GPUs (one node, several) from here to progress ``until``: the rows here
        less the rows there (nan or inf where a count is not allowed)."""
        a, b = self.table.rows(self.fraction_done), self.table.rows(max(until, self.fraction_done))
        with np.errstate(invalid="ignore"):
            return (a[0] - b[0]) * self.scale, (a[1] - b[1]) * self.scale


def piece_table(cost: CostModel, job: Job, max_gpus: int) -> PieceTable:
    """The job's `PieceTable` for counts 1..max_gpus (memoised per job shape)."""
    return _piece_table(cost, job.profile, job.global_batch, job.iterations, job.adaptive, job.min_gpus,
                        job.max_gpus, max_gpus)


@lru_cache(maxsize=4096)
def _piece_table(cost: CostModel, profile: Profile, m0: int, iterations: int, ad: Adaptive | None, lo: int, hi: int,
                 max_gpus: int) -> PieceTable:
    job = _Shape(profile, m0, iterations, ad, lo, hi)
    gpn = cost.cluster.gpus_per_node
    n = _n(job)
    one = np.full((n, max_gpus), np.inf)
    multi = np.full((n, max_gpus), np.inf)
    for g in allowed_counts(cost, job):
        if g > max_gpus:
            continue
        if g <= gpn:
            one[:, g - 1] = piece_times(cost, job, g, False)
        if g > 1:
            multi[:, g - 1] = piece_times(cost, job, g, True)

    def suffix(t: np.ndarray) -> np.ndarray:
        out = np.zeros((n + 1, max_gpus))
        out[:n] = np.cumsum(t[::-1], axis=0)[::-1]
        return out

    return PieceTable(one, multi, suffix(one), suffix(multi))


def remaining_rows(cost: CostModel, job: Job, max_gpus: int, fraction_done: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Remaining run time on k+1 GPUs (k < max_gpus) packed on one node / spread over several,
    from ``fraction_done``, inf where not allowed: the rows `lyasched.policy.state.waiting_job`
    gives an adaptive job."""
    return piece_table(cost, job, max_gpus).rows(fraction_done)
