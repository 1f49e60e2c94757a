"""How far a long replay has got, on stderr: a tqdm bar on a terminal, otherwise one plain line a
minute (a log file or a batch job's output gets no carriage returns). Nothing for a replay that
ends within the first interval."""

from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_INTERVAL_S = 60.0


class Progress:
    """Jobs finished out of ``total`` for the replay ``name``; `update` per finished job, `close` at the end."""

    def __init__(self, total: int, name: str, *, tty: bool | None = None, stream: TextIO | None = None,
                 interval: float = PLAIN_INTERVAL_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.name, self.interval = total, name, interval
        self.done = 0
        self.t0 = self._last = time.monotonic()
        self.bar = None
        if tty if tty is not None else self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="job", desc=name, file=self.stream, leave=False, mininterval=0.5)

    def update(self, n: int, sim_time: float) -> None:
        """``n`` more jobs finished; ``sim_time``: the simulated clock (seconds)."""
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self.line(sim_time)

    def line(self, sim_time: float) -> None:
        wall = time.monotonic() - self.t0
        self.stream.write(f"replay {self.name}: {self.done}/{self.total} jobs finished, "
                          f"simulated {sim_time / 86400:.1f} days, {wall:.0f} s\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
