"""Test hook: kill the service at a known point of a slot (crash-consistency tests)."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("lyasched.service")

CRASH_ENV = "LYASCHED_CRASH_AT"
CRASH_POINTS = ("slot_start", "after_read", "before_update", "after_update", "after_release", "after_record",
                "before_slot_record", "move_after_signal", "move_after_requeue", "move_after_resize",
                "move_after_release")


class CrashPoints:
    """Test hook: ``LYASCHED_CRASH_AT=after_update:3[,before_update:1]`` makes the process SIGKILL
    itself the 3rd time it reaches ``after_update`` (a real, uncatchable kill at a known point)."""

    def __init__(self, spec: str = "") -> None:
        self.at: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        for part in filter(None, (x.strip() for x in spec.split(","))):
            name, _, n = part.partition(":")
            if name not in CRASH_POINTS:
                raise ValueError(f"{CRASH_ENV}: unknown point {name!r} (one of {', '.join(CRASH_POINTS)})")
            self.at[name] = int(n or 1)

    @classmethod
    def from_env(cls) -> "CrashPoints":
        return cls(os.environ.get(CRASH_ENV, ""))

    def reach(self, name: str) -> None:
        if name not in self.at:
            return
        self.seen[name] = self.seen.get(name, 0) + 1
        if self.seen[name] == self.at[name]:
            log.warning("%s: SIGKILL at %s #%d", CRASH_ENV, name, self.seen[name])
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
