"""Policy parameters: one typed, range-checked table (lyasched.policy.params) for every front end."""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path

import pytest

from lyasched.config import ConfigError, from_mapping
from lyasched.policy import POLICIES, make_policy
from lyasched.policy.params import PARAMS, ParamError, check_param, check_params, parse_params


def test_every_constructor_parameter_is_declared_and_every_declared_one_exists():
    import importlib

    for name, path in POLICIES.items():
        mod, cls = path.split(":")
        sig = inspect.signature(getattr(importlib.import_module(mod), cls))
        ctor = {k for k in sig.parameters if k not in ("seed", "name")}
        assert ctor == set(PARAMS[name]), name


def test_options_measured_and_not_adopted_are_not_in_the_package():
    """They live with the design sweeps (benchmarks/experiments/variants), whose table holds the
    shipped parameters and theirs, each a parameter of the variant class."""
    for policy, key in (("lyapunov", "refill"), ("lyapunov", "max_load"), ("elastic", "margin"), ("elastic", "wait_order")):
        with pytest.raises(ParamError):
            check_param(policy, key, "1")
    with pytest.raises(ModuleNotFoundError):
        __import__("lyasched.policy.variants")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "experiments"))
    try:
        from variants import variant_class
        from variants.params import PARAMS as WITH_VARIANTS
    finally:
        sys.path.pop(0)
    for name in ("lyapunov", "elastic"):
        var = variant_class(name)
        assert var is not None
        assert set(PARAMS[name]) < set(WITH_VARIANTS[name]), name
        assert {k for k in inspect.signature(var).parameters if k not in ("seed", "name")} == set(WITH_VARIANTS[name]), name
    assert check_param("lyapunov", "max_load", "inf", table=WITH_VARIANTS) == math.inf


@pytest.mark.parametrize("policy,key,text,want", [
    ("lyapunov", "V", "3", 3.0),
    ("lyapunov", "V", "0", 0.0),
    ("lyapunov", "relative", "False", False),
    ("lyapunov", "exact_limit", "100", 100),
    ("tiresias", "min_run_s", "0", 0.0),
    ("optimus", "gain", "relative", "relative"),
    ("tiresias", "thresholds", "60,600", (60.0, 600.0)),
    ("tiresias", "restart_overhead_s", "none", None),
])
def test_good_values_are_converted(policy, key, text, want):
    assert check_param(policy, key, text) == want


@pytest.mark.parametrize("policy,key,value", [
    ("lyapunov", "V", "abc"), ("lyapunov", "V", "-1"), ("lyapunov", "V", "nan"), ("lyapunov", "V", "inf"),
    ("lyapunov", "V", True), ("lyapunov", "max_stretch", "0.5"), ("lyapunov", "max_load", "inf"),
    ("lyapunov", "exact_limit", "1.5"), ("lyapunov", "relative", "yes"), ("optimus", "gain", "x"),
    ("tiresias", "thresholds", "5,3"), ("tiresias", "thresholds", "0,3"), ("tiresias", "min_run_s", "-1"),
    ("fifo", "V", "1"), ("lyapunov", "nosuch", "1"), ("nosuch", "V", "1"),
])
def test_bad_values_one_line_error(policy, key, value):
    with pytest.raises(ParamError) as e:
        check_param(policy, key, value)
    assert "\n" not in str(e.value)


def test_typed_values_from_toml_and_policies_accept_them():
    got = check_params("lyapunov", {"V": 2, "relative": True, "exact_limit": 10.0})
    assert got == {"V": 2.0, "relative": True, "exact_limit": 10}
    make_policy("lyapunov", **got)
    make_policy("tiresias", **check_params("tiresias", {"thresholds": [10, 100], "min_run_s": 0}))
    with pytest.raises(ParamError):
        check_params("lyapunov", {"exact_limit": 1.5})


def test_parse_params_routes_unqualified_keys_to_every_taker():
    out = parse_params(["V=2", "optimus.gain=relative"], ["lyapunov", "optimus", "fifo"])
    assert out == {"lyapunov": {"V": 2.0}, "optimus": {"gain": "relative"}, "fifo": {}}
    for bad in (["V"], ["fifo.V=1"], ["nosuch=1"], ["tiresias.min_run_s=1"]):
        with pytest.raises(ParamError):
            parse_params(bad, ["lyapunov", "fifo"])


def test_serve_config_checks_params():
    cfg = from_mapping({"policy": {"name": "lyapunov", "params": {"V": 3}}})
    assert cfg.params == {"V": 3.0}
    for bad in ({"V": -1}, {"V": "abc"}, {"nosuch": 1}):
        with pytest.raises(ConfigError) as e:
            from_mapping({"policy": {"name": "lyapunov", "params": bad}})
        assert "policy.params" in str(e.value) and "\n" not in str(e.value)
