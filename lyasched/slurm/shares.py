"""Slurm's fair-share tree as tenant shares: `sshare` text in, each user's share out. Pure.

`sshare --all --parsable2 --format=Account,User,RawShares,NormShares` prints the association
tree, one line per account and per user association, the depth shown by leading spaces in the
Account column; ``NormShares`` is an association's shares over its siblings'. A user's share of
the cluster is the product of the normalised shares on its path from the root (the fair-share
tree's "effective share"), summed over the accounts it belongs to. lyasched.live.tenants uses
them as the tenants' shares when the config gives none.
"""

from __future__ import annotations

FORMAT = "Account,User,RawShares,NormShares"


class SharesParseError(ValueError):
    """sshare printed something this parser does not read."""


def sshare_command() -> list[str]:
    return ["sshare", "--all", "--parsable2", f"--format={FORMAT}"]


def _raw(text: str, line: int) -> float | None:
    text = text.strip()
    if not text or text == "parent":
        return None  # RawShares=parent: the association takes its parent's place
    try:
        v = float(text)
    except ValueError:
        raise SharesParseError(f"sshare line {line}: RawShares {text!r} is not a number") from None
    if not v >= 0:
        raise SharesParseError(f"sshare line {line}: RawShares {text!r} is negative")
    return v


class _Node:
    __slots__ = ("depth", "user", "raw", "children")

    def __init__(self, depth: int, user: str, raw: float | None) -> None:
        self.depth, self.user, self.raw = depth, user, raw
        self.children: list[_Node] = []


def parse_sshare(text: str) -> dict[str, float]:
    """User -> effective share (fractions of the root, summing to at most 1 over users).

    The normalised shares are computed here from RawShares (siblings' raw shares summed), as
    NormShares is: sshare leaves NormShares empty unless priority/multifactor runs, and the
    admins' word is the raw shares either way. A ``parent`` user shares its account's part
    with the account's other ``parent`` users equally."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    if [h.strip() for h in lines[0].split("|")[:4]] != FORMAT.split(","):
        raise SharesParseError(f"sshare header {lines[0][:120]!r} is not {FORMAT.replace(',', '|')}")
    root = _Node(-1, "", 1.0)
    path = [root]
    for n, ln in enumerate(lines[1:], start=2):
        f = ln.split("|")
        if len(f) < 4:
            raise SharesParseError(f"sshare line {n}: {len(f)} fields, expected 4: {ln[:120]!r}")
        account, user = f[0], f[1].strip()
        depth = len(account) - len(account.lstrip(" "))
        node = _Node(depth, user, _raw(f[2], n))
        if depth == 0 and not user and account.strip() == "root":
            root.depth, path = 0, [root]  # the tree's root line: its children are at depth 1
            continue
        while len(path) > 1 and path[-1].depth >= depth:
            path.pop()
        path[-1].children.append(node)
        if not user:
            path.append(node)
    out: dict[str, float] = {}

    def walk(node: _Node, part: float) -> None:
        sized = [c for c in node.children if c.raw is not None]
        parents = [c for c in node.children if c.raw is None]
        total = sum(c.raw for c in sized if c.raw is not None)
        for c in sized:
            share = part * (c.raw / total if total > 0 and c.raw is not None else 0.0)
            visit(c, share)
        for c in parents:  # RawShares=parent: an equal part of what the sized siblings leave, else of all
            visit(c, part / len(parents) if not sized else 0.0)

    def visit(c: _Node, share: float) -> None:
        if c.user:
            out[c.user] = out.get(c.user, 0.0) + share
        else:
            walk(c, share)

    walk(root, 1.0)
    return out
