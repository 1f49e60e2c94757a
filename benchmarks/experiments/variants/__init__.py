"""Options of the Lyapunov and elastic policies that were measured and not adopted.

Each is off by default and kept so that the figures docs/model.md and the README cite stay
reproducible (``--param lyapunov.refill=price`` and the like). The shipped policies
(`lyasched.policy.lyapunov`, `lyasched.policy.elastic`) hold the shipped decision only; the
classes here subclass them and change it at their named extension points:

* `core.LyapunovVariant` (policy ``lyapunov`` with any of its parameters): the actual- and
  virtual-queue credits (``q_credit``, ``z_credit``), the slot's values and order (``rate``,
  ``order=fill_first``), and the arrival-history terms of `arrivals` (``max_load`` with
  ``spread_horizon``/``horizon_end``/``lock_free``/``min_window``, ``arrival_weight``,
  ``refill``/``refill_rate``);
* `swaps.ElasticVariant` (policy ``elastic``): the same, plus the swap checks ``margin`` and
  ``rollout``.

`lyasched.policy.make_policy` builds the variant class only when a parameter the shipped
class lacks is given (the parameter table, `lyasched.policy.params`, lists both); with every
such parameter at its default a variant decides exactly as the shipped policy.
"""

from __future__ import annotations

# policy name -> "module:class" of its variant (loaded lazily by lyasched.policy.make_policy)
VARIANTS: dict[str, str] = {
    "lyapunov": "lyasched.policy.variants.core:LyapunovVariant",
    "elastic": "lyasched.policy.variants.swaps:ElasticVariant",
}
