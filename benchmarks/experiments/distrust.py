"""A proven liar loses the benefit of their claims: runs a benchmark script with
`SlotStateBuilder._waiting` patched (this process only; docs/experiments.md, "Trust: a proven
liar's claims unread").

    python benchmarks/experiments/distrust.py VARIANT SCRIPT [SCRIPT'S ARGS...]

A user whose trust factor (as the builder has it, running jobs' evidence included) is at least
``BAR`` has their waiting jobs predicted as if they had no claim. ``BAR`` = 10: log(10) is 5.8
standard deviations of one honest job's log(observed / predicted) at the noise the `TrustBook`
assumes (0.4; a one-sided chance of 4e-9, less for the mean of more jobs), 11.5 at the replay's
own estimate error (0.2); fixed from that noise model, not from the replays. VARIANT:

  flat      every GPU count predicted at the job's time limit (what Slurm's backfill assumes of a
            job it knows nothing about; a count claimed above it stays as claimed);
  at-count  the count the job asked for predicted at its time limit, the other counts keeping the
            claim's shape (not capped: a flat row makes the fewest GPUs look as fast as many);
  shipped   no change.

With no time limit (the Philly trace) both predict the asked-for count at the larger of claim x
factor and the waiting queue's longest predicted run (best run x its user's scale).
"""

from __future__ import annotations

import math
import runpy
import sys
from dataclasses import replace

from lyasched.estimates.trust import distrusted
from lyasched.policy.snapshot import ClusterSnapshot, SlotStateBuilder
from lyasched.policy.state import WaitingJob

BAR = 10.0


def unclaimed(w: WaitingJob, factor: float, longest: float, flat: bool) -> WaitingJob:
    def one(v: WaitingJob) -> WaitingJob:
        g = max(1, v.requested_gpus)
        at = v.best_run if flat else min(v.run_time(g, False), v.run_time(g, True))
        if not (at > 0 and math.isfinite(at)):
            at = v.best_run
        target = v.time_limit if math.isfinite(v.time_limit) else max(at * factor, longest)
        f = max(factor, target / at) if at > 0 and math.isfinite(at) and math.isfinite(target) else factor
        if flat:  # capped at the limit by `scaled_row`: every count at it
            return distrusted(v, f)
        return replace(v, run_one_node=v.run_one_node * f, run_multi_node=v.run_multi_node * f, work=v.work * f)
    d = one(w)
    if w.by_type:
        d = replace(d, by_type={t: one(v) for t, v in w.by_type.items()})
    return d


def install(variant: str) -> None:
    if variant == "shipped":
        return
    if variant not in ("flat", "at-count"):
        raise SystemExit(f"Error: unknown variant {variant!r}")
    flat = variant == "flat"
    base = SlotStateBuilder._waiting

    def _waiting(self: SlotStateBuilder, snap: ClusterSnapshot) -> tuple[WaitingJob, ...]:
        shown = base(self, snap)
        liars = {u for u, f in self._factors.items() if f >= BAR}
        if not liars:
            return shown
        memo = self.__dict__.setdefault("_unclaimed", {})
        out, longest, keep = [], math.nan, {}
        for w, s in zip(snap.waiting, shown):
            if w.user in liars:
                f = self.scale(w.user, w.job_id)
                if math.isnan(longest) and not math.isfinite(w.time_limit):
                    longest = max((r for v in snap.waiting if math.isfinite(
                        r := v.best_run * self.scale(v.user, v.job_id))), default=0.0)
                key = (f, longest if not math.isfinite(w.time_limit) else None)
                m = memo.get(w.job_id)
                if m is None or m[0] is not w or m[1] != key:
                    m = (w, key, unclaimed(w, f, longest, flat))
                keep[w.job_id] = m
                s = m[2]
            out.append(s)
        self.__dict__["_unclaimed"] = keep
        return tuple(out)

    SlotStateBuilder._waiting = _waiting  # type: ignore[method-assign]


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: distrust.py VARIANT SCRIPT [ARGS...]")
    install(sys.argv[1])
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
