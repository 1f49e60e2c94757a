"""What a policy that moves running jobs sees of them, and how it says "move". Pure data.

A `MovableJob` is a `RunningJob` with what a move decision needs: the job's predicted
*remaining* run time on every GPU count (no move cost in it), its move cost (checkpoint +
relaunch, seconds), its request and the time it has spent waiting so far. The simulator
(`lyasched.sim.moves`) and the service (`lyasched.live.inputs`) build them for policies with
``moves = True`` through the same functions here, `share_left`, `waited_so_far` and
`movable_job`, each from what it knows of the job; a plain `RunningJob` is never moved. ``preemptible`` says whether the
job is checkpointable.

A `SlotResult` expresses the three moves with its existing fields (docs/elastic.md):

* suspend ``j``: ``j`` in ``preempt`` and not in ``starts``: it checkpoints, leaves its GPUs and
  waits again (with its progress, and its move cost added to its next run);
* resize ``j`` (shrink or grow): ``j`` in ``preempt`` *and* in ``starts`` with its new GPU count
  and placement: it checkpoints and relaunches at once on the new configuration, paying its
  move cost there. The preempted GPUs are free for the same slot's starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lyasched.costmodel.goodput import PiecesLeft
from lyasched.policy.state import RunningJob


@dataclass(frozen=True)
class MovableJob(RunningJob):
    """A running job with what a move needs (rows: predicted remaining time on k+1 GPUs)."""

    requested_gpus: int = 1
    move_cost_s: float = math.nan  # checkpoint + relaunch (nan: the policy's default)
    waited_s: float = 0.0  # time spent waiting so far (submission to now, minus time holding GPUs)
    work_left: float = 0.0  # remaining compute time on one GPU at the full batch (its share of Q if suspended)
    moves: int = 0  # moves of this job completed so far (checkpoints taken: suspensions and resizes)
    adaptive: bool = False  # its batch is chosen with its GPUs (rows at its best batch per count; WaitingJob.adaptive)
    remaining_one_node: np.ndarray | None = None
    remaining_multi_node: np.ndarray | None = None
    pieces: PiecesLeft | None = field(default=None, compare=False, repr=False)  # an adaptive job's pieces ahead (WaitingJob.pieces)

    def cost(self, default: float) -> float:
        """Seconds a move of this job costs (checkpoint + relaunch): its own, else ``default``."""
        return default if math.isnan(self.move_cost_s) else float(self.move_cost_s)

    def remaining(self, g: int, spans_nodes: bool) -> float:
        row = self.remaining_multi_node if spans_nodes else self.remaining_one_node
        if row is None or not 1 <= g <= len(row):
            return math.inf
        return float(row[g - 1])

    def best_remaining(self, g: int) -> tuple[float, bool]:
        """Remaining run on g GPUs, one node when allowed (then spans_nodes False)."""
        # `remaining` twice, inlined: the elastic policy asks this millions of times per replay
        a, b = self.remaining_one_node, self.remaining_multi_node
        one = float(a[g - 1]) if a is not None and 1 <= g <= len(a) else math.inf
        multi = float(b[g - 1]) if b is not None and 1 <= g <= len(b) else math.inf
        return (one, False) if one <= multi else (multi, True)

    @property
    def spans_nodes(self) -> bool:
        return len(self.placement) > 1


def share_left(left_at_start: float, remaining_s: float, segment_s: float) -> float:
    """The share of the whole job still to do, estimated from the prediction as both replay and
    serve must (the policy never sees true progress). ``left_at_start``: the share left when this
    run began (1 minus what its last checkpoint saved); ``segment_s``: this run's predicted
    compute, which covers that share; ``remaining_s``: how much of it lies ahead (predicted end
    minus now: more than ``segment_s`` while the run relaunches, negative past the prediction).
    A run past its prediction counts as done (0); an unknown prediction (nan) as nothing done."""
    if segment_s > 0 and math.isfinite(segment_s):
        return left_at_start * (min(segment_s, max(0.0, remaining_s)) / segment_s)
    return left_at_start if math.isnan(segment_s) else 0.0


def waited_so_far(now: float, submit: float, held_before: float, run_start: float) -> float:
    """The time a job has spent waiting by ``now``: since its submission, less the time it held
    GPUs, in its earlier runs (``held_before``, summed) and in this one (since ``run_start``). One
    definition for replay (segments) and serve (the moves table), so a job moved once has the same
    wait on both sides; never negative (clocks of whole seconds)."""
    return max(0.0, (now - submit) - held_before - (now - run_start))


def movable_job(
    base: RunningJob,
    *,
    one: np.ndarray,
    multi: np.ndarray,
    work: float,
    scale: float,
    requested: int,
    move_cost: float,
    waited: float,
    checkpointable: bool,
    plain: bool = False,
    moves: int = 0,
    adaptive: bool = False,
    pieces: PiecesLeft | None = None,
) -> MovableJob:
    """``base`` as a moving policy sees it: the job's rows ``one``/``multi`` and ``work`` (run
    times and one-GPU compute of the whole job, or per unit that ``scale`` counts) times ``scale``
    (the units still to do: `share_left` of the job, times iterations where the rows are per
    iteration), its request (clamped to the counts its rows have), its move cost (nan: the
    policy's default), its wait so far, its completed moves and whether it is adaptive. ``plain``: the rows hold no nan or
    -inf (fast path)."""
    return MovableJob(
        job_id=base.job_id,
        gpus=base.gpus,
        placement=base.placement,
        start_time=base.start_time,
        expected_end=base.expected_end,
        attained=base.attained,
        preemptible=checkpointable,
        predicted_end=base.predicted_end,
        user=base.user,
        requested_gpus=max(1, min(requested, len(one))),
        move_cost_s=move_cost,
        waited_s=waited,
        moves=moves,
        adaptive=adaptive,
        work_left=work * scale,
        remaining_one_node=scaled(one, scale, plain),
        remaining_multi_node=scaled(multi, scale, plain),
        pieces=pieces,
    )


def scaled(row: np.ndarray, s: float, plain: bool = False) -> np.ndarray:
    """``row * s`` with disallowed counts (inf) kept inf when nothing is left (s = 0). ``plain``:
    the row holds no nan or -inf, so for a finite s > 0 the product is that already (fast path)."""
    if plain and 0.0 < s < math.inf:
        return row * s
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(row), row * s, np.inf)
