"""Policy parameters: one typed, range-checked table (lyasched.policy.params) for every front end."""

from __future__ import annotations

import inspect
import math

import pytest

from lyasched.config import ConfigError, from_mapping
from lyasched.policy import POLICIES, make_policy, variant_class
from lyasched.policy.params import PARAMS, ParamError, check_param, check_params, parse_params


def test_every_constructor_parameter_is_declared_and_every_declared_one_exists():
    import importlib

    for name, path in POLICIES.items():
        mod, cls = path.split(":")
        sig = inspect.signature(getattr(importlib.import_module(mod), cls))
        ctor = {k for k in sig.parameters if k not in ("seed", "name")}
        var = variant_class(name)  # the not-adopted options' class (lyasched/policy/variants) has them all
        if var is None:
            assert ctor == set(PARAMS[name]), name
        else:
            assert ctor < set(PARAMS[name]), name
            assert {k for k in inspect.signature(var).parameters if k not in ("seed", "name")} == set(PARAMS[name]), name


@pytest.mark.parametrize("policy,key,text,want", [
    ("lyapunov", "V", "3", 3.0),
    ("lyapunov", "V", "0", 0.0),
    ("lyapunov", "relative", "False", False),
    ("lyapunov", "exact_limit", "100", 100),
    ("lyapunov", "max_load", "inf", math.inf),
    ("optimus", "gain", "relative", "relative"),
    ("tiresias", "thresholds", "60,600", (60.0, 600.0)),
    ("tiresias", "restart_overhead_s", "none", None),
])
def test_good_values_are_converted(policy, key, text, want):
    assert check_param(policy, key, text) == want


@pytest.mark.parametrize("policy,key,value", [
    ("lyapunov", "V", "abc"), ("lyapunov", "V", "-1"), ("lyapunov", "V", "nan"), ("lyapunov", "V", "inf"),
    ("lyapunov", "V", True), ("lyapunov", "max_stretch", "0.5"), ("lyapunov", "max_load", "0"),
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
