"""Every policy parameter with its type and range, and the one parser all front ends call.

`lyasched replay --param`, `serve`'s ``[policy] params`` table and `lyasched whatif` check
parameters here, so a bad value gets the same one-line error everywhere (the CLIs exit 2).
Values come either as text (``KEY=VALUE`` on a command line) or already typed (TOML).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping


class ParamError(ValueError):
    """A policy parameter that is unknown, of the wrong type or out of range (one line)."""


@dataclass(frozen=True)
class Param:
    """One parameter: ``kind`` float | int | bool | str | floats (ascending list of floats)."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False  # accepts "none" (text) / None
    allow_inf: bool = False  # accepts inf (e.g. "off")
    help: str = ""

    def describe(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "one of " + ", ".join(self.choices)
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        hi = "inf" if self.hi is None else f"{self.hi:g}"
        what = {"float": "a number", "int": "an integer", "floats": "comma-separated ascending numbers"}[self.kind]
        return f"{what} in {'(' if self.lo_open else '['}{lo}, {hi}]"


_POS: dict[str, Any] = dict(lo=0.0, lo_open=True)

PARAMS: dict[str, dict[str, Param]] = {
    "lyapunov": {
        "V": Param("float", lo=0.0, hi=1e9, help="penalty weight: small starts at once, large waits for the best configuration"),
        "externality": Param("float", lo=0.0, hi=1e6, help="weight of the delay a start imposes on other waiting jobs"),
        "q_weight": Param("float", lo=0.0, hi=1e6, help="weight of the actual queue's drift term"),
        "q_credit": Param("str", choices=("work", "capped", "mean", "peaked"), help="actual-queue credit of a start: its work, capped at the mean, the mean, or its work up to the mean and mean^2/work above"),
        "relative": Param("bool", help="imposed delay relative to the job shortest-first would start instead"),
        "max_load": Param("float", allow_inf=True, **_POS, help="more GPUs than asked only while recent offered load / relative efficiency <= this (inf: off)"),
        "max_stretch": Param("float", lo=1.0, hi=1e6, help="fewer GPUs than asked only while the run stays within this factor of the request's"),
        "spread_horizon": Param("bool", help="more GPUs than asked only while the run ends before the running jobs' last predicted end (or lock_free)"),
        "arrival_weight": Param("float", lo=0.0, hi=1e6, help="weight of the delay a start's GPU-seconds beyond the request impose on the arrivals expected during its run (0: off)"),
        "arrival_wait": Param("str", choices=("load", "erlang"), help="with arrival_weight: the share of arrivals that wait, the recent load or the M/M/c approximation"),
        "arrival_norm": Param("str", choices=("off", "run", "share"), help="with arrival_weight: the share as is, against the best run with it included, or less its value at the configuration of least run + share"),
        "arrival_ref": Param("str", choices=("request", "efficient"), help="with arrival_weight: charge the GPU-seconds beyond the request's or beyond the job's least"),
        "horizon_end": Param("str", choices=("latest", "median", "earliest"), help="with spread_horizon: which running job's predicted end bounds the exemption"),
        "z_credit": Param("str", choices=("wait", "slot"), help="virtual-queue credit of a start: its wait so far plus the slot, or the slot alone"),
        "rate": Param("str", choices=("none", "size", "held"), help="slot values: the score, or the score per GPU-second held (size: the job's least GPU-time; held: the configuration's)"),
        "refill": Param("str", choices=("off", "mask", "price"), help="more GPUs than asked vs the expected refill of the free GPUs: off, mask (only spreads the arrivals are not expected to need) or price (charge the arrivals left short)"),
        "refill_rate": Param("str", choices=("recent", "all"), help="refill's arrival rates: over the last max(T(r), min_window) seconds, or the whole arrival history"),
        "order": Param("str", choices=("score", "fill_first"), help="score: the knapsack then the fill; fill_first: shortest-first at the request first, the knapsack on the GPUs left"),
        "spread": Param("str", choices=("score", "leftover"), help="more GPUs than asked: competing in the knapsack (score), or only into GPUs left idle once every waiting job that fits started at its request (leftover)"),
        "lock_free": Param("float", lo=0.0, hi=1e9, help="configurations holding GPUs at most this long (s) skip the load check"),
        "min_window": Param("float", hi=1e9, **_POS, help="shortest window of the offered-load estimate (s)"),
        "exact_limit": Param("int", lo=0, hi=1e9, help="exact knapsack when jobs x free GPUs x options is at most this"),
    },
    "elastic": {},  # filled below: the lyapunov core's parameters and the moves'
    "fixed-1": {},
    "random": {},
    "fifo": {},
    "backfill": {},
    "sjf-oracle": {},
    "srpt-oracle": {"move_cost": Param("float", lo=0.0, hi=1e9, help="checkpoint + relaunch time (s) of a job that carries none")},
    "optimus": {"gain": Param("str", choices=("absolute", "relative"), help="marginal gain in seconds or relative to the run")},
    "tiresias": {
        "thresholds": Param("floats", hi=1e12, **_POS, help="attained GPU-seconds at which a job drops to the next queue"),
        "min_run_s": Param("float", lo=0.0, hi=1e9, help="a started job runs at least this long before it can be preempted"),
        "restart_overhead_s": Param("float", lo=0.0, hi=1e9, optional=True, help="seconds a restart is assumed to cost"),
    },
}

PARAMS["elastic"] = {
    **PARAMS["lyapunov"],
    # only the shipped value: spread=leftover's growth step would hand out GPUs the moves plan with
    "spread": Param("str", choices=("score",), help="only 'score' for elastic (spread=leftover is lyapunov's alone)"),
    "min_move_interval": Param("float", lo=0.0, hi=1e9, help="a job runs at least this long (s) after a start or a move before it is moved again"),
    "move_cost": Param("float", lo=0.0, hi=1e9, help="checkpoint + relaunch time (s) of a job that carries none"),
    "grow": Param("bool", help="give idle GPUs to running checkpointable jobs when nothing waits"),
    "group": Param("bool", help="suspend a running job larger than a waiting one for a batch of waiting jobs that takes all its GPUs"),
    "move_backoff": Param("str", choices=("none", "linear"), help="linear: a job moved m times runs (m + 1) x min_move_interval before its next move; none: the interval alone"),
    "wait_order": Param("str", choices=("shortest", "submitted", "fitting"), help="whom a swap candidate's wait forecast counts ahead of it: shorter jobs (shortest, the default), jobs submitted before it (submitted) or those of them asking no more GPUs than it (fitting); the last two measured on held-out sets, not adopted"),
    "grow_hold": Param("str", choices=("interval", "release"), help="how long a grow's GPUs are priced as held: until the running jobs' releases give as many back, at least min_move_interval (release, the default since the tenth pass) or min_move_interval alone (interval, the rule before)"),
    "max_candidates": Param("int", lo=0, hi=1e6, help="waiting jobs considered for a swap per slot"),
    "max_searches": Param("int", lo=0, hi=1e6, help="of those, how many may search for victims per slot"),
    "margin": Param("float", lo=0.0, hi=100.0, help="a swap's forecast net gain must clear this many standard errors of the estimates' error (0: off; measured, not adopted: docs/model.md section 3)"),
    "rollout": Param("int", lo=0, hi=1e6, help="a swap must also win a rollout of the core over at most this many decisions (0: off; slow; measured, not adopted)"),
}


# every policy takes a seed; replay sets it from --seed, serve's config may set it
SEED = Param("int", lo=0, hi=2**63 - 1, help="seed of random choices (random); ignored elsewhere")


def check_param(policy: str, key: str, value: Any, *, seed_ok: bool = False) -> Any:
    """``value`` (text or typed) converted to the parameter's type; ParamError if it is not valid.
    ``seed`` is accepted only with ``seed_ok`` (config files; replay takes it from --seed)."""
    if policy not in PARAMS:
        raise ParamError(f"unknown policy {policy!r}; known: {', '.join(PARAMS)}")
    spec = SEED if (seed_ok and key == "seed") else PARAMS[policy].get(key)
    if spec is None:
        known = ", ".join(PARAMS[policy]) or "none"
        raise ParamError(f"policy {policy!r} has no parameter {key!r} (its parameters: {known})")
    where = f"{policy}.{key}"
    if spec.optional and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
        return None
    try:
        return _convert(spec, value)
    except (ValueError, TypeError):
        raise ParamError(f"{where}={_show(value)}: must be {spec.describe()}") from None


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(spec: Param, v: Any, integer: bool) -> float:
    if isinstance(v, bool):
        raise TypeError
    if isinstance(v, str):
        v = v.strip()
        x = int(v) if integer else float(v)
    elif integer:
        if not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise TypeError
        x = v
    elif isinstance(v, (int, float)):
        x = float(v)
    else:
        raise TypeError
    if math.isnan(x) or (math.isinf(x) and not (spec.allow_inf and x > 0)):
        raise ValueError
    if spec.lo is not None and (x < spec.lo or (spec.lo_open and x == spec.lo)):
        raise ValueError
    if spec.hi is not None and x > spec.hi:
        raise ValueError
    return x


def _convert(spec: Param, v: Any) -> Any:
    if spec.kind == "float":
        return float(_number(spec, v, False))
    if spec.kind == "int":
        return int(_number(spec, v, True))
    if spec.kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        raise ValueError
    if spec.kind == "str":
        if isinstance(v, str) and v.strip() in spec.choices:
            return v.strip()
        raise ValueError
    # floats: "a,b,c" or a list
    items = [p for p in v.split(",")] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
    if not items:
        raise ValueError
    out = tuple(float(_number(spec, x, False)) for x in items)
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError
    return out


def check_params(policy: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A whole ``{key: value}`` table for one policy (serve's config), converted."""
    return {k: check_param(policy, k, v, seed_ok=True) for k, v in params.items()}


def parse_params(items: Iterable[str], policies: list[str]) -> dict[str, dict[str, Any]]:
    """``KEY=VALUE`` (every listed policy that has KEY) or ``POLICY.KEY=VALUE`` -> per-policy params.

    The `--param` syntax of `lyasched replay` and `lyasched whatif`. ParamError (one line) on
    anything malformed, unknown, mistyped or out of range.
    """
    out: dict[str, dict[str, Any]] = {p: {} for p in policies}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParamError(f"{item!r}: expected KEY=VALUE or POLICY.KEY=VALUE")
        pol, dot, k = key.rpartition(".")
        if dot:
            if pol not in PARAMS:
                raise ParamError(f"{item!r}: unknown policy {pol!r}")
            if pol not in out:
                raise ParamError(f"{item!r}: policy {pol!r} is not being replayed")
            out[pol][k] = check_param(pol, k, raw)
        else:
            takers = [p for p in policies if key in PARAMS.get(p, {})]
            if not takers:
                raise ParamError(f"{item!r}: no replayed policy has a parameter {key!r}")
            for p in takers:
                out[p][key] = check_param(p, key, raw)
    return out
