"""Argument checks (and the launches they imply) run once per call signature: the shipped
kernels' host cost per call.

A check that reads only its arguments' metadata (each tensor's shape, strides, dtype and device;
every other argument's value; a frozen dataclass, such as a launch plan, by its fields) gives the
same answer for the same signature, so its result is kept and a later call with that signature
pays one dictionary lookup. A failing check raises and keeps nothing, so a bad call is reported
every time. Checks that read tensor values (a host sync) must not be wrapped, and nothing kept may
be derived from a tensor's values; a 0-d tensor, which a caller may pass for a number, makes the
call unkeyed (checked every time).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

_PLAIN = frozenset((int, float, bool, str, bytes, type(None), torch.dtype, torch.device))
_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))
_LIMIT = 4096
"""Signatures kept per check; past it the cache starts again (a caller sweeping shapes)."""


class _Unkeyed(Exception):
    """An argument whose signature is not known (a tensor subclass, an arbitrary object)."""


def _key(value, out: list) -> None:
    kind = type(value)  # exact types: a subclass (a tensor subclass, an IntEnum) is not keyed
    if kind in _TENSORS:
        shape = value.shape
        if not shape:  # a 0-d tensor stands for a number, which a check may read
            raise _Unkeyed
        out += (shape, value.stride(), value.dtype, value.device)
    elif kind in _PLAIN:
        out += (kind, value)
    elif kind is tuple or kind is list:
        out.append((kind, len(value)))
        for item in value:
            _key(item, out)
    elif _frozen_dataclass(kind):
        out += (kind, value)
    else:
        raise _Unkeyed


@functools.cache
def _frozen_dataclass(kind: type) -> bool:
    return dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen


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
        except TypeError:  # a part that cannot be hashed
            return check(*args, **kwargs)
        result = check(*args, **kwargs)
        if len(seen) >= _LIMIT:
            seen.clear()
        seen[key] = result
        return result

    checked.cache_clear = seen.clear
    return checked
