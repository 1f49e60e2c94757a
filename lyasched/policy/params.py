"""Every policy parameter with its type and range, and the one parser all front ends call.

`lyasched replay --param`, `serve`'s ``[policy] params`` table and `lyasched whatif` check
parameters here, so a bad value gets the same one-line error everywhere (the CLIs exit 2).
Values come either as text (``KEY=VALUE`` on a command line) or already typed (TOML).

Only the shipped policies' parameters are here. Options measured and not adopted live with the
design sweeps that measured them (benchmarks/experiments/variants/), which pass their larger
table as ``table``.
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
        "relative": Param("bool", help="imposed delay relative to the job shortest-first would start instead"),
        "max_stretch": Param("float", lo=1.0, hi=1e6, help="fewer GPUs than asked only while the run stays within this factor of the request's"),
        "exact_limit": Param("int", lo=0, hi=1e9, help="exact knapsack when jobs x free GPUs x options is at most this"),
        "tenant_slack": Param("float", lo=0.0, hi=1.0, help="a tenant counts as behind only once it has received less than (1 - this) of its entitled GPU-time"),
        "tenant_weight": Param("float", lo=0.0, hi=1e9, help="weight of a tenant's GPU-time deficit against its entitlement (0: tenants ignored)"),
        "cross_type": Param("bool", help="GPU types: a start's penalty counts from the job's best run over all its types (else over the slot's type)"),
    },
    "elastic": {},  # filled below: the lyapunov core's parameters and the moves'
    "fixed-1": {},
    "random": {},
    "fifo": {},
    "backfill": {},
    "fairshare": {
        "weight_fairshare": Param("float", lo=0.0, hi=1e9, help="PriorityWeightFairshare: weight of the fair-share factor 2^(-usage/shares)"),
        "weight_age": Param("float", lo=0.0, hi=1e9, help="PriorityWeightAge: weight of the age factor (wait / max_age_s, at most 1)"),
        "max_age_s": Param("float", **_POS, hi=1e9, help="PriorityMaxAge (s): the wait at which the age factor reaches 1"),
        "calc_period_s": Param("float", **_POS, hi=1e9, help="PriorityCalcPeriod (s): priorities are re-read at least this often while nothing starts"),
    },
    "sjf-oracle": {},
    "srpt-oracle": {"move_cost": Param("float", lo=0.0, hi=1e9, help="checkpoint + relaunch time (s) of a job that carries none")},
    "pollux": {"move_cost": Param("float", lo=0.0, hi=1e9, help="restart delay (s) of a job that carries none: the restart penalty's d")},
    "hesrpt": {"move_cost": Param("float", lo=0.0, hi=1e9, help="move cost (s) of a job that carries none"),
               "p": Param("float", lo=0.0, hi=0.95, help="speed-up exponent heSRPT's shares assume (x^p on a share x)"),
               "move_charge": Param("float", lo=0.0, hi=1e3, help="moves a change of a running job's count is charged"),
               "horizon_s": Param("float", lo=0.0, hi=1e9, help="an adaptive job's counts weighed by this much of its work ahead (s; 0: all)")},
    "optimus": {"gain": Param("str", choices=("absolute", "relative"), help="marginal gain in seconds or relative to the run")},
    "tiresias": {
        "thresholds": Param("floats", hi=1e12, **_POS, help="attained GPU-seconds at which a job drops to the next queue"),
        "min_run_s": Param("float", lo=0.0, hi=1e9, help="a started job runs at least this long before it can be preempted"),
        "restart_overhead_s": Param("float", lo=0.0, hi=1e9, optional=True, help="seconds a restart is assumed to cost"),
    },
}

PARAMS["elastic"] = {
    **PARAMS["lyapunov"],
    "min_move_interval": Param("float", lo=0.0, hi=1e9, help="a job runs at least this long (s) after a start or a move before it is moved again"),
    "move_cost": Param("float", lo=0.0, hi=1e9, help="checkpoint + relaunch time (s) of a job that carries none"),
    "grow": Param("bool", help="give idle GPUs to running checkpointable jobs when nothing waits"),
    "group": Param("bool", help="suspend a running job larger than a waiting one for a batch of waiting jobs that takes all its GPUs"),
    "grow_hold": Param("str", choices=("interval", "release"), help="how long a grow's GPUs are priced as held: until the running jobs' releases give as many back, at least min_move_interval (release, the default since the tenth pass) or min_move_interval alone (interval, the rule before)"),
    "max_candidates": Param("int", lo=0, hi=1e6, help="waiting jobs considered for a swap per slot"),
    "max_searches": Param("int", lo=0, hi=1e6, help="of those, how many may search for victims per slot"),
    "min_window": Param("float", hi=1e9, **_POS, help="shortest window of the recent arrival rate that prices a grow (s)"),
    "type_moves": Param("bool", help="GPU types: a running job moves onto another type's free GPUs when its time left there plus its move cost is below its time left where it runs"),
}


# the heterogeneity-unaware references take their aware version's parameters (docs/types.md)
PARAMS["lyapunov-unaware"] = dict(PARAMS["lyapunov"])
PARAMS["elastic-unaware"] = dict(PARAMS["elastic"])
PARAMS["gavel"] = {"round_s": Param("float", hi=1e9, **_POS, help="round length (s): jobs are re-admitted and preempted at each round")}
PARAMS["sia"] = {
    "move_cost": Param("float", lo=0.0, hi=1e9, help="restart delay (s) of a job that carries none: the restart penalty's d"),
    "p": Param("float", lo=-10.0, hi=-0.01, help="fairness exponent of the normalised goodputs (negative)"),
    "lambda_n": Param("float", lo=1.0, hi=1e6, lo_open=True, help="cost of a job left without GPUs (above 1: any allocation beats none)"),
    "round_s": Param("float", hi=1e9, **_POS, help="round length (s): the integer program is solved once a round"),
    "time_limit_s": Param("float", hi=1e4, **_POS, help="solver time limit per round (s); no solution keeps the allocation"),
}

# every policy takes a seed; replay sets it from --seed, serve's config may set it
SEED = Param("int", lo=0, hi=2**63 - 1, help="seed of random choices (random); ignored elsewhere")


def check_param(policy: str, key: str, value: Any, *, seed_ok: bool = False,
                table: Mapping[str, Mapping[str, Param]] = PARAMS) -> Any:
    """``value`` (text or typed) converted to the parameter's type; ParamError if it is not valid.
    ``seed`` is accepted only with ``seed_ok`` (config files; replay takes it from --seed)."""
    if policy not in table:
        raise ParamError(f"unknown policy {policy!r}; known: {', '.join(table)}")
    spec = SEED if (seed_ok and key == "seed") else table[policy].get(key)
    if spec is None:
        known = ", ".join(table[policy]) or "none"
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


def parse_params(items: Iterable[str], policies: list[str],
                 table: Mapping[str, Mapping[str, Param]] = PARAMS) -> dict[str, dict[str, Any]]:
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
            if pol not in table:
                raise ParamError(f"{item!r}: unknown policy {pol!r}")
            if pol not in out:
                raise ParamError(f"{item!r}: policy {pol!r} is not being replayed")
            out[pol][k] = check_param(pol, k, raw, table=table)
        else:
            takers = [p for p in policies if key in table.get(p, {})]
            if not takers:
                raise ParamError(f"{item!r}: no replayed policy has a parameter {key!r}")
            for p in takers:
                out[p][key] = check_param(p, key, raw, table=table)
    return out
