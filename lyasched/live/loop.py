"""The service loop: one slot every ``slot_seconds`` until SIGTERM/SIGINT.

Slots run in one worker thread (APScheduler, coalescing: a slot that overruns makes the next one
start late, never two at once). A signal stops scheduling; the slot in progress finishes the Slurm
updates for the job in hand (`Service.stop_requested`) and the loop returns once it has.
"""

from __future__ import annotations

import logging
import signal
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger("lyasched.serve")


def run_forever(service: Any, slot_seconds: float) -> None:
    """Run ``service.run_slot`` every ``slot_seconds`` (the first at once) until a signal."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.blocking import BlockingScheduler

    scheduler = BlockingScheduler(executors={"default": ThreadPoolExecutor(1)})
    scheduler.add_job(
        service.run_slot, "interval", seconds=slot_seconds, id="slot", coalesce=True, max_instances=1,
        misfire_grace_time=max(1, int(slot_seconds)), next_run_time=datetime.now(timezone.utc),
    )

    def stop(signum, _frame) -> None:
        log.info("%s: stopping after the slot in progress", signal.Signals(signum).name)
        service.stop_requested.set()
        if scheduler.running:
            scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheduler.start()
    with service.busy:  # wait for a slot still running in the executor thread
        pass
