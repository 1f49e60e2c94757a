"""What Pollux-style allocators share (pollux, hesrpt, sia): a job as the allocation search sees it
(`AllocJob`: its allowed counts and remaining time on each), whether a set of counts packs on the
free GPUs (`packs`), and the placements that realise them by the Pollux paper's rules (`place`:
kept layouts stay, whole nodes for multi-node jobs, best fit largest first for the rest).

Its own module so that the baselines built on Pollux's search reuse one tested placement rule
instead of reaching into pollux.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from lyasched.policy.state import Placement


@dataclass
class AllocJob:
    """A job in the allocation search: waiting (``current`` 0) or running on ``placement``."""

    job_id: str
    submit: float
    counts: list[int]  # allowed counts under the placement rules, ascending
    rem: dict[int, float]  # remaining seconds on each allowed count (no restart in it)
    base: float
    current: int = 0  # GPUs it holds now (0: waiting)
    placement: Placement = ()
    factor: float = 1.0  # restart factor applied when its count changes (running jobs)
    fixed: bool = False  # running and not movable: keeps its allocation

    def loss(self, g: int) -> float:
        """Inverse speed-up on g GPUs (the restart penalty included)."""
        r = self.rem.get(g, math.inf)
        if self.current and g != self.current:
            if self.factor <= 0:
                return math.inf
            return r / self.base / self.factor
        return r / self.base



def packs(alloc: dict[str, int], cap: list[int], gpn: int) -> bool:
    """Whether the counts fit: multi-node counts on whole free nodes, the others best fit."""
    return pack_counts(sorted(alloc.values(), reverse=True), cap, gpn) is not None


def pack_counts(counts: Sequence[int], cap: list[int], gpn: int) -> list[int] | None:
    """Room left per free-count after packing ``counts`` (descending): multi-node counts on whole
    nodes, the others best fit; None when they do not fit. Nodes are tallied by room (0..gpn), so
    best fit is a scan of gpn buckets, not of the nodes."""
    have = [0] * (gpn + 1)
    for c in cap:
        have[min(c, gpn)] += 1
    for g in counts:
        if g <= gpn:
            break
        k = g // gpn
        if have[gpn] < k:
            return None
        have[gpn] -= k
        have[0] += k
    for g in counts:
        if g > gpn:
            continue
        for c in range(g, gpn + 1):
            if have[c]:
                have[c] -= 1
                have[c - g] += 1
                break
        else:
            return None
    return have


def place(alloc: dict[str, int], by_id: dict[str, AllocJob], cap: list[int], gpn: int,
           keep: bool = True) -> dict[str, Placement] | None:
    """Placements for the counts: running jobs whose count is kept stay where they are (``keep``),
    whole nodes for multi-node jobs, best fit largest first for the rest; None if it does not fit."""
    room = list(cap)
    out: dict[str, Placement] = {}
    exclusive: set[int] = set()
    kept = [jid for jid, g in alloc.items() if (by_id[jid].fixed or (keep and by_id[jid].current == g))]
    for jid in sorted(kept, key=lambda x: (not by_id[x].fixed, x)):
        pl = by_id[jid].placement
        if all(room[n] >= k and n not in exclusive for n, k in pl):
            for n, k in pl:
                room[n] -= k
            if len(pl) > 1:
                exclusive.update(n for n, _ in pl)
            out[jid] = pl
        elif by_id[jid].fixed:
            return None
    rest = sorted((jid for jid in alloc if jid not in out), key=lambda x: (-alloc[x], by_id[x].submit, x))
    used_nodes = {n for pl in out.values() for n, _ in pl}
    for jid in rest:
        g = alloc[jid]
        if g > gpn:
            k = g // gpn
            free_nodes = [i for i in range(len(room)) if room[i] >= gpn and i not in used_nodes]
            if len(free_nodes) < k:
                return None
            pl = tuple((i, gpn) for i in free_nodes[:k])
            for i, _ in pl:
                room[i] = 0
                used_nodes.add(i)
                exclusive.add(i)
        else:
            best = -1
            for i, c in enumerate(room):
                if i in exclusive or c < g:
                    continue
                if best < 0 or c < room[best]:
                    best = i
            if best < 0:
                return None
            room[best] -= g
            used_nodes.add(best)
            pl = ((best, g),)
        out[jid] = pl
    return out
