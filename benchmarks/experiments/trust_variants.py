"""Trust variants: runs a benchmark script with `SlotStateBuilder.scale` patched (this process only).

    python benchmarks/experiments/trust_variants.py VARIANT SCRIPT [SCRIPT'S ARGS...]

VARIANT:
  shipped      no change;
  known-first  a claim replaced by what is known of the job (`ClusterSnapshot.known`, past
               `known_scale`'s bar) is shown as that alone, not the larger of it and the user's
               trust factor: a liar's jobs of a known model are shown as an honest user's, their
               own estimate error not scaled (docs/experiments.md, "Trust: what is known before
               the factor").
"""

from __future__ import annotations

import runpy
import sys

from lyasched.estimates.trust import known_scale
from lyasched.policy.snapshot import SlotStateBuilder


def install(variant: str) -> None:
    if variant == "shipped":
        return
    if variant != "known-first":
        raise SystemExit(f"Error: unknown variant {variant!r}")

    def scale(self, user: str, job_id: str) -> float:
        if self._known and (k := self._known.get(job_id)) is not None and (f := known_scale(k)) > 1.0:
            return f
        return self._factors.get(user, 1.0) if self._factors else 1.0

    SlotStateBuilder.scale = scale  # type: ignore[method-assign]


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: trust_variants.py VARIANT SCRIPT [ARGS...]")
    install(sys.argv[1])
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
