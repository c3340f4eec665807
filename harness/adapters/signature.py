"""Calling a vendor function with the contract's arguments, bound by parameter name.

A vendor's signature is read with :mod:`inspect` when the adapter loads, so a release that
renames, reorders or adds a parameter is seen there instead of at a wrong positional call.
The contract's signature is the one the op's spec declares (``OpSpec.signature``). ``aliases`` maps a vendor
parameter name onto a contract one (vLLM's ``rms_norm_eps`` is the contract's ``rms_eps``); a
vendor parameter named ``out`` is a caller-made output buffer, allocated by ``make_out``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Mapping

from harness.core.layouts import INPUT_NAMES_ATTR
from harness.core.specs import get_spec


def contract_signature(op: str) -> inspect.Signature:
    return get_spec(op).signature


def bind_by_name(op: str, fn: Callable, *, aliases: Mapping[str, str] | None = None,
                 make_out: Callable[..., Any] | None = None) -> Callable | str:
    """A contract-signature function calling ``fn`` by name, or why that cannot be done."""
    aliases = dict(aliases or {})
    contract = contract_signature(op)
    try:
        vendor = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        return f"{_name(fn)} has no readable signature ({exc})"
    to_vendor: dict[str, str] = {}
    wants_out = False
    for name, param in vendor.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        target = aliases.get(name, name)
        if target in contract.parameters:
            to_vendor[target] = name
        elif name == "out" and make_out is not None:
            wants_out = True
        elif param.default is param.empty:
            return (f"{_name(fn)}{vendor} needs {name!r}, which the contract of {op} "
                    f"{contract} does not give; map it in the adapter")
    missing = [c for c, p in contract.parameters.items()
               if c not in to_vendor and p.default is p.empty]
    if missing:
        return (f"{_name(fn)}{vendor} takes no {', '.join(missing)} (contract of {op}: "
                f"{contract}); map it in the adapter")

    @functools.wraps(fn)
    def call(*args, **kwargs):
        bound = contract.bind(*args, **kwargs)
        bound.apply_defaults()
        given = {}
        for name, value in bound.arguments.items():
            if name in to_vendor:
                if value is None and vendor.parameters[to_vendor[name]].default is not inspect._empty:
                    continue
                given[to_vendor[name]] = value
            elif value is not None and value != contract.parameters[name].default:
                raise TypeError(f"{_name(fn)} has no parameter for {name}={value!r}")
        if not wants_out:
            return fn(**given)
        out = make_out(**bound.arguments)
        fn(**given, out=out)
        return out

    setattr(call, INPUT_NAMES_ATTR, {c: v for c, v in to_vendor.items() if c != v})
    return call


def _name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
