"""Options of the Lyapunov and elastic policies that were measured and not adopted.

They are not part of the lyasched package: only the design sweeps of benchmarks/experiments/
import them (``sys.path`` holds benchmarks/experiments when such a script runs), so that the
figures docs/model.md and the README cite stay reproducible (``--param lyapunov.refill=price``
and the like, given to a sweep). The shipped policies (`lyasched.policy.lyapunov`,
`lyasched.policy.elastic`) hold the shipped decision only; the classes here subclass them and
change it at their named extension points:

* `core.LyapunovVariant` (policy ``lyapunov`` with any of its parameters): the actual- and
  virtual-queue credits (``q_credit``, ``z_credit``), the slot's values and order (``rate``,
  ``order=fill_first``), and the arrival-history terms of `arrivals` (``max_load`` with
  ``spread_horizon``/``horizon_end``/``lock_free``/``min_window``, ``arrival_weight``,
  ``refill``/``refill_rate``);
* `swaps.ElasticVariant` (policy ``elastic``): the same, plus the swap checks ``margin`` and
  ``rollout``, ``move_backoff`` and ``wait_order``.

`make_policy` builds the variant class only when a parameter the shipped class lacks is given
(`params.PARAMS` lists the shipped parameters and these); with every such parameter at its
default a variant decides exactly as the shipped policy. `parse_params` is lyasched's
``--param`` parser over that larger table.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Iterable

from lyasched.policy import Policy
from lyasched.policy import make_policy as _make_shipped
from lyasched.policy import policy_class

# policy name -> "module:class" of its variant (loaded lazily)
VARIANTS: dict[str, str] = {
    "lyapunov": "variants.core:LyapunovVariant",
    "elastic": "variants.swaps:ElasticVariant",
}


def variant_class(name: str) -> type | None:
    """The class carrying the measured-but-not-adopted options of the policy ``name``, or None."""
    if name not in VARIANTS:
        return None
    mod, cls = VARIANTS[name].split(":")
    return getattr(importlib.import_module(mod), cls)


def make_policy(name: str, **params: Any) -> Policy:
    """`lyasched.policy.make_policy`, or the variant class when a parameter only it has is given."""
    var = variant_class(name)
    if var is not None and not set(params) <= {f.name for f in dataclasses.fields(policy_class(name))}:
        return var(**params)
    return _make_shipped(name, **params)


def parse_params(items: Iterable[str], policies: list[str]) -> dict[str, dict[str, Any]]:
    """``--param`` items checked against the shipped parameters and the variants' (`params.PARAMS`)."""
    from lyasched.policy.params import parse_params as _parse

    from variants.params import PARAMS

    return _parse(items, policies, table=PARAMS)
