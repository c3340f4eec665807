"""Argument checks run once per call signature: the shipped kernels' host cost per call.

A check that reads only its arguments' metadata (each tensor's shape, strides, dtype and device;
every other argument's value) gives the same answer for the same signature, so its result is kept
and a later call with that signature pays one dictionary lookup. A failing check raises and keeps
nothing, so a bad call is reported every time. Checks that read tensor values (a host sync) must
not be wrapped.
"""

from __future__ import annotations

import functools

import torch

_PLAIN = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device)
_LIMIT = 4096
"""Signatures kept per check; past it the cache starts again (a caller sweeping shapes)."""


class _Unkeyed(Exception):
    """An argument whose signature is not known (a tensor subclass, an arbitrary object)."""


def _key(value, out: list) -> None:
    if type(value) is torch.Tensor or type(value) is torch.nn.Parameter:
        out += (value.shape, value.stride(), value.dtype, value.device)
    elif isinstance(value, _PLAIN):
        out += (type(value), value)
    elif isinstance(value, (tuple, list)):
        out.append((type(value), len(value)))
        for item in value:
            _key(item, out)
    else:
        raise _Unkeyed


def per_signature(check):
    """``check`` memoised on its arguments' signature (see the module docstring). Arguments of
    any other kind (a tensor subclass, an arbitrary object) run the check every time."""
    seen: dict = {}

    @functools.wraps(check)
    def checked(*args, **kwargs):
        parts: list = []
        try:
            for value in args:
                _key(value, parts)
            for name in kwargs:
                parts.append(name)
                _key(kwargs[name], parts)
        except _Unkeyed:
            return check(*args, **kwargs)
        key = tuple(parts)
        try:
            return seen[key]
        except KeyError:
            pass
        result = check(*args, **kwargs)
        if len(seen) >= _LIMIT:
            seen.clear()
        seen[key] = result
        return result

    checked.cache_clear = seen.clear
    return checked
