"""No cyclic garbage collection while one slot (or one pyslurm worker request) runs.

A slot over a long queue allocates a few objects per job (rows, Slurm jobs, policy rows) while
the service holds tens of thousands more; CPython's cyclic collector, triggered by allocation
counts, then scans the live heap again and again (it took about two thirds of a slot with 10,000
held jobs: benchmarks/slot_profile.py). What a slot frees is freed by reference counting as
ever; reference cycles made meanwhile wait for the next collection after it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused() -> Iterator[None]:
    """Cyclic GC off inside, back to how it was after (nested uses are fine)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
