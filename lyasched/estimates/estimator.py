"""Per-user recent-history run-time prediction (Tsafrir, Etsion and Feitelson, "Backfilling
using system-generated predictions rather than user runtime estimates", IEEE TPDS 2007): a job
is predicted to run as long as the average of the last two similar jobs of its user, never
longer than its time limit. "Similar" is the most specific key of a hierarchy that has a past
job: same user, script and GPU count; same user, job name and GPU count; same user and name;
same user and GPU count; same user; same account; else the job's time limit (or a site default).

Each key also keeps the errors of the predictions it would have made for the jobs that
finished under it (asked at their submission), so an estimate says how far off its source
has been (``Estimate.spread``). Pure and deterministic: no clock, no I/O; ``state()`` /
``from_state()`` are JSON-able so the live service can persist and rebuild it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from lyasched.estimates.model import Estimate, Finished, Request

Key = tuple[Any, ...]  # (source name, *values)

# most specific first; each entry: source name, the Request fields it matches on
HIERARCHY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("user+script+gpus", ("user", "script", "gpus")),
    ("user+name+gpus", ("user", "name", "gpus")),
    ("user+name", ("user", "name")),
    ("user+gpus", ("user", "gpus")),
    ("user", ("user",)),
    ("account", ("account",)),
)
SOURCES = tuple(s for s, _ in HIERARCHY) + ("limit", "default")


@dataclass(frozen=True)
class EstimatorParams:
    history: int = 2  # past jobs averaged (Tsafrir et al.: the last two)
    keep: int = 64  # past runs and errors kept per key (what state() persists)
    spread_window: int = 32  # latest prediction errors the spread is measured over
    min_spread_n: int = 3  # fewer errors than this under a key: the source's pooled spread
    default_s: float = 3600.0  # no history and no time limit: the site's default run time
    default_spread: float = 1.0  # no measured error at all (log-sd; 1.0 is a factor of e)
    floor_s: float = 1.0  # run times below this count as this much (a log needs > 0)
    min_left_s: float = 60.0  # a running job is never expected to end sooner than this from now
    outlived_window: int = 64  # a key's latest runs (ended before the moment asked) read by expected_run


def keys_of(req: Request) -> list[Key]:
    """The history keys of a request, most specific first (keys on an unknown value are skipped)."""
    out: list[Key] = []
    for source, fields in HIERARCHY:
        values = tuple(getattr(req, f) for f in fields)
        if any(v == "" for v in values):
            continue
        out.append((source, *values))
    return out


class _Track:
    """One key's past: (end, run seconds) and (end, log error) sorted by end time."""

    __slots__ = ("runs", "errs")

    def __init__(self) -> None:
        self.runs: list[tuple[float, float]] = []
        self.errs: list[tuple[float, float]] = []


def _add(seq: list[tuple[float, float]], item: tuple[float, float], keep: int) -> None:
    bisect.insort(seq, item)
    if len(seq) > keep:
        del seq[: len(seq) - keep]


def _before(seq: list[tuple[float, float]], t: float) -> int:
    """How many entries ended strictly before t."""
    return bisect.bisect_left(seq, (t, -math.inf))


def _rms(errs: list[tuple[float, float]], upto: int, window: int) -> float:
    xs = [e for _, e in errs[max(0, upto - window): upto]]
    return math.sqrt(sum(x * x for x in xs) / len(xs))


def _cap(value: float, limit: float | None) -> float:
    return min(value, limit) if limit is not None and limit > 0 else value


class RuntimeEstimator:
    """Learns from finished jobs (``observe``) and estimates a request's run time at a moment
    (``estimate``) from the jobs that had finished by then only."""

    def __init__(self, params: EstimatorParams | None = None) -> None:
        self.params = params or EstimatorParams()
        self._tracks: dict[Key, _Track] = {}
        self._pooled: dict[str, list[tuple[float, float]]] = {s: [] for s in SOURCES}

    # --- learning -------------------------------------------------------------------------
    def observe(self, job: Finished) -> None:
        """Learn from a finished job (call in the order jobs end; out of order is sorted in)."""
        p = self.params
        req, end = job.request, job.end
        actual = max(job.elapsed, p.floor_s)
        for key in keys_of(req):
            track = self._tracks.setdefault(key, _Track())
            pred = self._predict(track, job.submit, req.time_limit)
            if pred is not None:
                err = math.log(actual / max(pred[0], p.floor_s))
                _add(track.errs, (end, err), p.keep)
                _add(self._pooled[key[0]], (end, err), p.keep * 4)
            _add(track.runs, (end, job.elapsed), p.keep)
        fallback = "limit" if req.time_limit is not None and req.time_limit > 0 else "default"
        guess = req.time_limit if fallback == "limit" else p.default_s
        assert guess is not None
        _add(self._pooled[fallback], (end, math.log(actual / max(guess, p.floor_s))), p.keep * 4)

    def observe_all(self, jobs: Iterable[Finished]) -> None:
        for j in sorted(jobs, key=lambda j: (j.end, j.submit)):
            self.observe(j)

    # --- estimating -----------------------------------------------------------------------
    def _predict(self, track: _Track, now: float, limit: float | None) -> tuple[float, int] | None:
        k = _before(track.runs, now)
        if k == 0:
            return None
        last = track.runs[max(0, k - self.params.history): k]
        return _cap(max(sum(r for _, r in last) / len(last), self.params.floor_s), limit), len(last)

    def _spread(self, track_errs: list[tuple[float, float]], source: str, now: float) -> float:
        p = self.params
        k = _before(track_errs, now)
        if k >= p.min_spread_n:
            return _rms(track_errs, k, p.spread_window)
        pooled = self._pooled[source]
        k = _before(pooled, now)
        if k >= p.min_spread_n:
            return _rms(pooled, k, p.spread_window * 4)
        return p.default_spread

    def estimate(self, req: Request, now: float) -> Estimate:
        """The run time expected for ``req`` from the jobs that ended before ``now``, never more
        than its time limit; its time limit (or the site default) when nothing similar ended."""
        for key in keys_of(req):
            track = self._tracks.get(key)
            if track is None:
                continue
            pred = self._predict(track, now, req.time_limit)
            if pred is not None:
                return Estimate(mean_s=pred[0], spread=self._spread(track.errs, key[0], now), source=key[0], n=pred[1])
        if req.time_limit is not None and req.time_limit > 0:
            return Estimate(mean_s=req.time_limit, spread=self._spread([], "limit", now), source="limit", n=0)
        return Estimate(mean_s=self.params.default_s, spread=self._spread([], "default", now), source="default", n=0)

    def _outlived_by(self, req: Request, elapsed_s: float, now: float) -> float | None:
        """What the history says of jobs like ``req`` that ran longer than ``elapsed_s``: the
        average of the last ``history`` such runs (among the key's last ``outlived_window`` that
        ended before ``now``) under the most specific key that has one; None when no similar job ran that long."""
        p = self.params
        for key in keys_of(req):
            track = self._tracks.get(key)
            if track is None:
                continue
            k = _before(track.runs, now)
            longer = [r for _, r in track.runs[max(0, k - p.outlived_window): k] if r > elapsed_s]
            if longer:
                last = longer[-p.history:]
                return sum(last) / len(last)
        return None

    def expected_run(self, req: Request, estimate_s: float, elapsed_s: float, now: float) -> float:
        """The whole run time to expect, at ``now``, of a job of ``req`` that has run
        ``elapsed_s`` and was estimated at ``estimate_s``: the estimate while it has not reached
        it; past it, what the similar jobs that ran that long ran (`outlived`), never more than its
        time limit and never ending sooner than ``min_left_s`` from now. The simulator's
        ``whatif --managed`` and the live service both ask this."""
        if elapsed_s < estimate_s:
            return estimate_s
        return outlived(estimate_s, elapsed_s, req.time_limit, self._outlived_by(req, elapsed_s, now),
                        self.params.min_left_s)

    # --- persistence ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything learnt, JSON-able (lists, strings, numbers)."""
        return {
            "version": 1,
            "params": asdict(self.params),
            "tracks": [[list(k), [list(r) for r in t.runs], [list(e) for e in t.errs]]
                       for k, t in sorted(self._tracks.items(), key=lambda kv: repr(kv[0]))],
            "pooled": {s: [list(e) for e in v] for s, v in self._pooled.items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "RuntimeEstimator":
        """Rebuild from ``state()``; a state of another version or shape is a ValueError."""
        if not isinstance(state, dict) or state.get("version") != 1:
            raise ValueError("not a RuntimeEstimator state (version 1)")
        try:
            est = cls(EstimatorParams(**state["params"]))
            for key, runs, errs in state["tracks"]:
                t = _Track()
                t.runs = [(float(a), float(b)) for a, b in runs]
                t.errs = [(float(a), float(b)) for a, b in errs]
                est._tracks[tuple(key)] = t
            for s, v in state["pooled"].items():
                if s not in est._pooled:
                    raise ValueError(f"unknown source {s!r}")
                est._pooled[s] = [(float(a), float(b)) for a, b in v]
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed RuntimeEstimator state: {e}") from None
        return est


def outlived(estimate_s: float, elapsed_s: float, time_limit: float | None, conditional_s: float | None = None,
             min_left_s: float = 60.0) -> float:
    """The run time to expect of a job still running at ``elapsed_s``: its estimate while it has
    not reached it; past it, ``conditional_s`` (what similar jobs that ran that long ran:
    `RuntimeEstimator.expected_run`) or, with none longer than ``elapsed_s``, twice what it has
    run so far (Tsafrir et al. extend an exceeded prediction step by step); never more than its
    time limit (Slurm ends it there: an outlived estimate is never taken as a longer job than its
    limit says) and always at least ``min_left_s`` beyond ``elapsed_s`` (a job still running is
    never planned as ending now or in the past, not even past its limit, where Slurm is about to
    end it)."""
    if elapsed_s < estimate_s:
        return estimate_s
    guess = conditional_s if conditional_s is not None and conditional_s > elapsed_s else 2.0 * elapsed_s
    return max(_cap(max(guess, estimate_s), time_limit), elapsed_s + min_left_s)
