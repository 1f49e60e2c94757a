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


def _norm(text: str, line: int) -> float | None:
    text = text.strip()
    if not text:
        return None  # e.g. RawShares=parent: the association takes its parent's place
    try:
        v = float(text)
    except ValueError:
        raise SharesParseError(f"sshare line {line}: NormShares {text!r} is not a number") from None
    if not v >= 0:
        raise SharesParseError(f"sshare line {line}: NormShares {text!r} is negative")
    return v


def parse_sshare(text: str) -> dict[str, float]:
    """User -> effective share (fractions of the root, summing to at most 1 over users)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    head = lines[0].split("|")
    if [h.strip() for h in head[:4]] != FORMAT.split(","):
        raise SharesParseError(f"sshare header {lines[0][:120]!r} is not {FORMAT.replace(',', '|')}")
    out: dict[str, float] = {}
    path: list[tuple[int, float]] = []  # (depth, share) of the accounts above the current line
    for n, ln in enumerate(lines[1:], start=2):
        f = ln.split("|")
        if len(f) < 4:
            raise SharesParseError(f"sshare line {n}: {len(f)} fields, expected 4: {ln[:120]!r}")
        account, user = f[0], f[1].strip()
        depth = len(account) - len(account.lstrip(" "))
        norm = _norm(f[3], n)
        while path and path[-1][0] >= depth:
            path.pop()
        above = 1.0
        for _, s in path:
            above *= s
        if user:
            share = above * (1.0 if norm is None else norm)
            out[user] = out.get(user, 0.0) + share
        elif account.strip() != "root" or depth > 0:
            path.append((depth, 1.0 if norm is None else norm))
    return out
