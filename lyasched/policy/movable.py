"""What a policy that moves running jobs sees of them, and how it says "move". Pure data.

A `MovableJob` is a `RunningJob` with what a move decision needs: the job's predicted
*remaining* run time on every GPU count (no move cost in it), its move cost (checkpoint +
relaunch, seconds), its request and the time it has spent waiting so far. The simulator
(`lyasched.sim.moves`) builds them for policies with ``moves = True``; a plain `RunningJob`
is never moved. ``preemptible`` says whether the job is checkpointable.

A `SlotResult` expresses the three moves with its existing fields (docs/elastic.md):

* suspend ``j``: ``j`` in ``preempt`` and not in ``starts``: it checkpoints, leaves its GPUs and
  waits again (with its progress, and its move cost added to its next run);
* resize ``j`` (shrink or grow): ``j`` in ``preempt`` *and* in ``starts`` with its new GPU count
  and placement: it checkpoints and relaunches at once on the new configuration, paying its
  move cost there. The preempted GPUs are free for the same slot's starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lyasched.policy.state import RunningJob


@dataclass(frozen=True)
class MovableJob(RunningJob):
    """A running job with what a move needs (rows: predicted remaining time on k+1 GPUs)."""

    requested_gpus: int = 1
    move_cost_s: float = math.nan  # checkpoint + relaunch (nan: the policy's default)
    waited_s: float = 0.0  # time spent waiting so far (submission to now, minus time holding GPUs)
    work_left: float = 0.0  # remaining compute time on one GPU at the full batch (its share of Q if suspended)
    remaining_one_node: np.ndarray | None = None
    remaining_multi_node: np.ndarray | None = None

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
