#!/usr/bin/env python3
"""Reliability figures of issue 5 (docs/reliability.md): the fault, load and bad-input suites of the
test package tests/reliability at full size, one line per figure.

    python benchmarks/reliability.py [--json] [--quick] [--only faults,load,badinput] [--details FILE]
                                     [--backend cli[,pyslurm]]

Needs root and the real local Slurm cluster (`slurm/cluster up`); see tests/reliability/run.py for
the sizes, the figures and the exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path

# tests/ on the path ahead of this directory (whose reliability.py is this runner), as pytest puts it:
# the suites are imported as the tests import them.
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from reliability.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
