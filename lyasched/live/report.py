"""What a slot leaves behind: its `SlotReport` (what ``lyasched serve --once`` prints), its row in
the ``slots`` table with its decisions (`record`), and the log of a Slurm outage (`Outage`: one
line when Slurm stops answering, one when it answers again)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lyasched.store import records

if TYPE_CHECKING:
    import sqlite_utils

    from lyasched.live.context import SlotContext

log = logging.getLogger("lyasched.service")


@dataclass
class SlotReport:
    """What one slot did (also what `lyasched serve --once` prints)."""

    slot_id: int | None
    time: float
    duration: float
    q: float = 0.0
    z: float = 0.0
    free: dict[str, int] = field(default_factory=dict)
    waiting: int = 0
    running: int = 0
    started: list[dict] = field(default_factory=list)
    held_again: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    error: str = ""

    def line(self) -> str:
        if self.error:
            return f"slot {self.slot_id}: error: {self.error} ({self.duration * 1000:.0f} ms)"
        starts = ", ".join(f"{s['slurm_id']}:{s['gpus']}gpu@{'+'.join(s['nodes'])}" for s in self.started) or "-"
        return (
            f"slot {self.slot_id}: {self.waiting} waiting, {self.running} running, "
            f"free {sum(self.free.values())} GPUs, started {starts}, held again {len(self.held_again)}, "
            f"finished {len(self.finished)}, Q={self.q:.1f} Z={self.z:.1f} in {self.duration * 1000:.0f} ms"
        )


def record(db: sqlite_utils.Database, ctx: SlotContext, policy: str) -> int:
    """The slot's row and its decisions, in one transaction (`records.record_slot`); returns its id."""
    report = ctx.report
    return records.record_slot(
        db,
        decision_rows=ctx.decisions,
        decision_ids=ctx.decision_ids,
        time=ctx.now,
        q=report.q,
        z=report.z,
        free_gpus=sum(report.free.values()),
        free=json.dumps(report.free),
        waiting=report.waiting,
        running=report.running,
        decisions=json.dumps(report.started),
        duration=report.duration,
        policy=policy,
        error=report.error,
    )


class _QuietDuringOutage(logging.Filter):
    """Drops SlurmCLI's per-retry warnings while an outage is already logged (one line per outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.active or record.levelno >= logging.ERROR


_QUIET = _QuietDuringOutage()  # one per process (one service runs per process); reset by each Outage
logging.getLogger("lyasched.slurm").addFilter(_QUIET)


class Outage:
    """One ERROR line when Slurm stops answering, one WARNING line when it answers again; the
    failed slots between are recorded in ``slots`` (error column) but not logged (`logs`)."""

    def __init__(self) -> None:
        self.since: float | None = None  # first failed slot of the current Slurm outage
        self.slots = 0  # failed slots in it
        self._quiet = _QUIET
        self._quiet.active = False

    def note(self, failed: bool, now: float, report: SlotReport) -> None:
        """A slot ended (``failed``: Slurm did not answer)."""
        if failed:
            self.slots += 1
            if self.since is None:
                self.since = now
                self._quiet.active = True
                log.error("Slurm unavailable, slots fail until it answers (logged once): %s", report.error)
            return
        if self.since is not None:
            log.warning("Slurm available again after %.0f s (%d failed slot(s)): catching up",
                        now - self.since, self.slots)
            self.since, self.slots = None, 0
            self._quiet.active = False

    def logs(self, failed: bool) -> bool:
        """Whether a slot's line is logged at INFO (else DEBUG: a failed slot after the outage's first)."""
        return not (failed and self.slots > 1)
