"""The placement rule, declared once: which GPU layouts a start may ask for.

Slurm gives every node of a job the same GPU count (one ``TresPerNode``), so a job on several
nodes holds k nodes x g/k GPUs (k >= 2). The policies place by this rule (`FreeGpus.take`), the
simulator rejects a decision that breaks it (`check`), and the service re-places a decision that
no longer fits the free GPUs with the same functions (`fit_placement`). Replay therefore never runs
a layout the live service could not carry out.

Choice among layouts: a one-node job goes to the fullest node that still has room (best fit,
lowest index first), keeping large holes for later multi-GPU jobs; a multi-node job uses the
fewest nodes that can hold g/k GPUs each, chosen the same best-fit way.
"""

from __future__ import annotations

from typing import Sequence

Placement = tuple[tuple[int, int], ...]  # ((node index, GPUs on that node), ...)

EQUAL_PER_NODE = "equal-per-node"  # the only rule a Slurm target can express (Capabilities.placement)


def splits(g: int, nodes: int, cap: int) -> list[tuple[int, int]]:
    """The (k nodes, GPUs per node) layouts of g GPUs over k >= 2 of ``nodes`` nodes with at most
    ``cap`` GPUs each, fewest nodes (most GPUs per node) first."""
    out = []
    for per in range(min(cap, g // 2), 0, -1):
        if g % per == 0 and g // per <= nodes:
            out.append((g // per, per))
    return out


def equal_placement(free: Sequence[int], g: int, prefer: Sequence[int] = ()) -> Placement | None:
    """g GPUs as k >= 2 nodes x g/k GPUs, fewest nodes first; among the nodes with room, those in
    ``prefer`` first, then the fullest (best fit), then the lowest index. None if no layout fits."""
    pref = set(prefer)
    for k, per in splits(g, len(free), max(free, default=0)):
        room = [i for i, f in enumerate(free) if f >= per]
        if len(room) < k:
            continue
        room.sort(key=lambda i: (i not in pref, free[i], i))
        return tuple(sorted((i, per) for i in room[:k]))
    return None


def one_node_placement(free: Sequence[int], g: int, prefer: Sequence[int] = ()) -> Placement | None:
    """g GPUs on one node: a preferred node with room, else the fullest with room (lowest index)."""
    room = [i for i, f in enumerate(free) if f >= g]
    if not room or g < 1:
        return None
    pref = set(prefer)
    i = min(room, key=lambda i: (i not in pref, free[i], i))
    return ((i, g),)


def violation(placement: Placement, gpus: int, free: Sequence[int]) -> str:
    """Why ``placement`` is not a start the target can carry out on ``free`` ('' when it is)."""
    if len(placement) == 1:  # the usual start, one node: the checks below without their sets and sums
        i, n = placement[0]
        if n == gpus and n >= 1 and 0 <= i < len(free) and free[i] >= n:
            return ""
    if not placement:
        return "empty placement"
    nodes = [i for i, _ in placement]
    if len(set(nodes)) != len(nodes):
        return f"a node appears twice in placement {placement}"
    if sum(n for _, n in placement) != gpus:
        return f"placement {placement} does not hold {gpus} GPUs"
    for i, n in placement:
        if not (0 <= i < len(free)) or n < 1:
            return f"bad placement entry ({i}, {n})"
        if free[i] < n:
            return f"node {i} has {free[i]} free GPUs, asked for {n}"
    if len({n for _, n in placement}) > 1:
        return f"placement {placement} has unequal GPUs per node (Slurm: the same count on every node)"
    return ""


def fit_placement(gpus: int, placement: Placement, free: Sequence[int]) -> Placement | None:
    """``placement`` if it is valid on ``free``, else a re-placement with the same GPU count and
    the same one-node/multi-node shape (so the predicted run time holds), preferring the nodes
    the policy chose; None when there is none (the job waits for a later slot)."""
    if not violation(placement, gpus, free):
        return tuple(sorted(placement))
    nodes = [i for i, _ in placement]
    if len(placement) <= 1:
        return one_node_placement(free, gpus, prefer=nodes)
    return equal_placement(free, gpus, prefer=nodes)


# ---------------------------------------------------------------- node features (Slurm's --constraint)
#
# A job's ``--constraint`` limits it to nodes with those Slurm Features: ``ib`` (one feature),
# ``a100&ib`` (all of them), ``a100|h100`` (any one of them per node), ``&`` binding tighter than
# ``|``. Anything else Slurm accepts (brackets, counts ``ib*2``, ``!``, commas, spaces) is refused:
# a layout lyasched chose there might be one Slurm will not start.

Constraint = tuple[frozenset[str], ...]  # OR of ANDs of feature names; () = no constraint

_FEATURE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
MAX_CONSTRAINT = 256


def parse_constraint(text: str | None) -> Constraint:
    """``a100&ib|h100`` -> ({a100, ib}, {h100}); '' or None -> (). ValueError (one line) on
    anything but feature names (A-Z a-z 0-9 _ . -) joined by & and |."""
    if not text:
        return ()
    if len(text) > MAX_CONSTRAINT:
        raise ValueError(f"--constraint: longer than {MAX_CONSTRAINT} characters")
    out = []
    for term in text.split("|"):
        names = term.split("&")
        for n in names:
            if not n or not set(n) <= _FEATURE_CHARS:
                raise ValueError(f"--constraint {text!r}: only node feature names (A-Z a-z 0-9 _ . -) joined by & (all) "
                                 "and | (any) are supported")
        out.append(frozenset(names))
    return tuple(dict.fromkeys(out))


def satisfies(features: frozenset[str] | set[str], constraint: Constraint) -> bool:
    """Whether a node with ``features`` may run a job of ``constraint`` (any node when ())."""
    return not constraint or any(term <= features for term in constraint)


def constrained(free: Sequence[int], features: Sequence[frozenset[str]], constraint: Constraint) -> list[int]:
    """``free`` with the nodes that do not satisfy ``constraint`` at 0 (a node without a features
    entry has none); all of it when there is no constraint."""
    if not constraint:
        return list(free)
    return [f if i < len(features) and satisfies(features[i], constraint) else 0 for i, f in enumerate(free)]


def featured_types(node_types: Sequence[str], node_features: Sequence[frozenset[str]], constraint: Constraint) -> frozenset[str]:
    """The node types with at least one node whose features satisfy ``constraint`` (every type when
    there is none; a node without a features entry has none): the types a constrained job may
    run on, which replay and serve give the policy alike."""
    return frozenset(t for i, t in enumerate(node_types)
                     if not constraint or (i < len(node_features) and satisfies(node_features[i], constraint)))
