"""Which policies a what-if compares by default, and how the report names them.

By default an admin sees four outcomes: what actually happened, lyasched (the policy the service
runs by default, `lyasched.config.Config.policy`), Slurm's backfill, and the best of the other
non-oracle baselines on this very history (`CANDIDATES`, replayed and the one with the lowest
average JCT shown, labelled as the pick). Strawmen (`random`, `fixed-1`), oracles and `elastic`
run only when named with ``--policies``; a named list is run and shown exactly as given.
"""

from __future__ import annotations

from typing import Sequence

from lyasched.config import Config

LYASCHED: str = Config.policy  # what `lyasched serve` runs unless configured otherwise
SLURM: str = "backfill"
# the realistic, non-oracle baselines the "best other baseline" is picked from
CANDIDATES: tuple[str, ...] = ("fifo", "tiresias", "optimus")
CHOSEN_BY = "avg_jct_s"


def default_policies() -> list[str]:
    """What the default run replays: lyasched, backfill, then every candidate."""
    return list(dict.fromkeys([LYASCHED, SLURM, *CANDIDATES]))


def managed_policies() -> list[str]:
    """What ``--managed`` replays by default: lyasched and backfill (backfill twice: with the
    same estimates and with the time limits, lyasched.whatif.managed)."""
    return list(dict.fromkeys([LYASCHED, SLURM]))


def pick_best(figures: dict[str, dict]) -> dict:
    """The candidate with the lowest average JCT (ties: the earlier in CANDIDATES), with every
    candidate's figure: ``{"chosen", "by", "candidates": {name: avg_jct_s}}``."""
    cands = {n: float(figures[n][CHOSEN_BY]) for n in CANDIDATES if n in figures}
    best = min(cands, key=lambda n: (cands[n], CANDIDATES.index(n)))
    return {"chosen": best, "by": CHOSEN_BY, "candidates": cands}


def labels(names: Sequence[str], chosen: str | None = None, managed: bool = False) -> dict[str, str]:
    """How the tables and plots name each outcome (``managed``: backfill's two runs told apart)."""
    out = {"actual": "actual (recorded)"}
    for n in names:
        if managed and n == SLURM:
            out[n] = f"{n} (Slurm, estimates)"
        elif managed and n == f"{SLURM}-limits":
            out[n] = f"{SLURM} (Slurm, time limits)"
        elif n == LYASCHED:
            out[n] = f"{n} (lyasched)"
        elif n == SLURM:
            out[n] = f"{n} (Slurm)"
        elif n == chosen:
            out[n] = f"{n} (best other baseline)"
        else:
            out[n] = n
    return out
