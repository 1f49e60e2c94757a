"""The parameter table of the design sweeps: lyasched's (`lyasched.policy.params.PARAMS`, the
shipped parameters) plus the options measured and not adopted that this package carries."""

from __future__ import annotations

from lyasched.policy.params import PARAMS as SHIPPED
from lyasched.policy.params import Param

_POS = dict(lo=0.0, lo_open=True)

LYAPUNOV: dict[str, Param] = {
        "q_credit": Param("str", choices=("work", "capped", "mean", "peaked"), help="actual-queue credit of a start: its work, capped at the mean, the mean, or its work up to the mean and mean^2/work above"),
        "max_load": Param("float", allow_inf=True, **_POS, help="more GPUs than asked only while recent offered load / relative efficiency <= this (inf: off)"),
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
}

ELASTIC: dict[str, Param] = {
    **LYAPUNOV,
    # only the shipped value: spread=leftover's growth step would hand out GPUs the moves plan with
    "spread": Param("str", choices=("score",), help="only 'score' for elastic (spread=leftover is lyapunov's alone)"),
    "move_backoff": Param("str", choices=("none", "linear"), help="linear: a job moved m times runs (m + 1) x min_move_interval before its next move; none: the interval alone"),
    "wait_order": Param("str", choices=("shortest", "submitted", "fitting"), help="whom a swap candidate's wait forecast counts ahead of it: shorter jobs (shortest, the default), jobs submitted before it (submitted) or those of them asking no more GPUs than it (fitting); the last two measured on held-out sets, not adopted"),
    "margin": Param("float", lo=0.0, hi=100.0, help="a swap's forecast net gain must clear this many standard errors of the estimates' error (0: off; measured, not adopted: docs/model.md section 3)"),
    "rollout": Param("int", lo=0, hi=1e6, help="a swap must also win a rollout of the core over at most this many decisions (0: off; slow; measured, not adopted)"),
}

PARAMS: dict[str, dict[str, Param]] = {
    **SHIPPED,
    "lyapunov": {**SHIPPED["lyapunov"], **LYAPUNOV},
    "elastic": {**SHIPPED["elastic"], **ELASTIC},
}
