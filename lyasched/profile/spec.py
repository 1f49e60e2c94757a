"""Turn a model name from the command line into a `ModelSpec`.

A name is either a built-in example (`mlp`, `resnet`, ...) or ``package.module:factory``,
a callable returning a `ModelSpec`, a ``(model, make_batch, loss)`` tuple, or a dict with
those keys. Every failure is a `SpecError` with a one-line message.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
from typing import Any, Mapping

from torch import nn

from lyasched.profile.models import EXAMPLES, ModelSpec, example


class SpecError(ValueError):
    """The model spec cannot be loaded (bad name, import error, wrong return type)."""


def parse_args(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["width=32", "name=x"]`` -> ``{"width": 32, "name": "x"}`` (Python literals, else strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SpecError(f"bad model argument {pair!r}: expected KEY=VALUE")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def coerce_spec(obj: Any, name: str, args: Mapping[str, Any] | None = None) -> ModelSpec:
    """Accept the forms a user factory may return and normalise them to a `ModelSpec`."""
    if isinstance(obj, ModelSpec):
        return obj
    if isinstance(obj, Mapping):
        try:
            obj = (obj["model"], obj["make_batch"], obj.get("loss"), obj.get("optimizer"))
        except KeyError as e:
            raise SpecError(f"{name}: returned dict lacks key {e.args[0]!r}") from None
    if isinstance(obj, tuple) and 2 <= len(obj) <= 4:
        model, make_batch, *rest = obj
        loss = rest[0] if rest else None
        optim = rest[1] if len(rest) > 1 else None
        if not isinstance(model, nn.Module) or not callable(make_batch) or (loss is not None and not callable(loss)):
            raise SpecError(f"{name}: expected (nn.Module, make_batch(b, device), loss(output, target))")
        spec = ModelSpec(name, model, make_batch, optimizer=optim, args=dict(args or {}))
        if loss is not None:
            spec.loss = loss
        return spec
    raise SpecError(f"{name}: factory returned {type(obj).__name__}, expected ModelSpec, tuple or dict")


def import_user_module(mod_name: str) -> Any:
    """Import a user's model module from the installed packages or, failing those, the current
    directory (as ``python -m`` would; the lyasub and lyasched commands do not put it on the path)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)  # last: an installed package of the same name wins
    try:
        return importlib.import_module(mod_name)
    finally:
        if added:
            sys.path.remove(cwd)


def load_spec(name: str, args: Mapping[str, Any] | None = None) -> ModelSpec:
    """Load ``name`` (an example name or ``package.module:factory``) with factory ``args``."""
    kwargs = dict(args or {})
    if name in EXAMPLES:
        try:
            return example(name, **kwargs)
        except TypeError as e:
            raise SpecError(f"{name}: bad model argument ({e})") from None
    mod_name, sep, attr = name.partition(":")
    if not sep or not mod_name or not attr:
        raise SpecError(
            f"unknown model {name!r}: give a built-in ({', '.join(EXAMPLES)}) or package.module:factory"
        )
    try:
        module = import_user_module(mod_name)
    except Exception as e:  # ImportError, or anything the module raises on import
        raise SpecError(f"cannot import {mod_name!r}: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(f"{mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise SpecError(f"{name} is not callable")
    try:
        made = obj(**kwargs)
    except Exception as e:
        raise SpecError(f"{name}(...) failed: {type(e).__name__}: {e}") from None
    return coerce_spec(made, name, kwargs)
