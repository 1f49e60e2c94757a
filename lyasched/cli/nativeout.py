"""Native libraries' prints kept off standard output while policies run.

HiGHS (scipy's MILP solver, which the `sia` policy calls) writes debug lines with C's printf to
file descriptor 1, below Python's `sys.stdout`; they would break a ``--json`` document. While a
command computes, descriptor 1 points at standard error; the command prints its result after."""

from __future__ import annotations

import ctypes
import os
import sys
from contextlib import contextmanager
from typing import Iterator


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers (a printf to a pipe sits there until exit otherwise)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask: nothing buffered by it either
        pass


@contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """Descriptor 1 is standard error inside the block; restored, C buffers flushed, on leaving it."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed): nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
