"""Op names: each kernel family declares its ops (:func:`declare`, the names of
``../shared/spec/ops.md``) before registering specs and implementations under them; the registry
accepts no other name. The core names no op itself."""

from __future__ import annotations

from typing import Callable, Sequence

_DECLARED: dict[str, str] = {}
"""op -> the family that declared it, in declaration order."""
_LOADER: Callable[[], object] | None = None
_LOADING = False


class UnknownOpError(KeyError):
    pass


def declare(family: str, ops: Sequence[str]) -> tuple[str, ...]:
    """Declare ``family``'s ops; an op another family declared is an error."""
    for op in ops:
        owner = _DECLARED.setdefault(op, family)
        if owner != family:
            raise UnknownOpError(f"op {op!r} is declared by family {owner!r} and again by "
                                 f"{family!r}; an op belongs to one family")
    return tuple(ops)


def use_loader(load: Callable[[], object]) -> None:
    """What declares the ops on first use (``harness.families.load``, via the registry)."""
    global _LOADER
    _LOADER = load


def _load() -> None:
    global _LOADING
    if _LOADER is None or _LOADING:
        return
    _LOADING = True
    try:
        _LOADER()
    finally:
        _LOADING = False


def op_names() -> tuple[str, ...]:
    """Every declared op, the kernel families loaded first."""
    _load()
    return tuple(_DECLARED)


def family_ops(family: str) -> tuple[str, ...]:
    _load()
    return tuple(op for op, owner in _DECLARED.items() if owner == family)


def check_op(op: str) -> str:
    if op not in _DECLARED:
        _load()
    if op not in _DECLARED:
        raise UnknownOpError(
            f"unknown op {op!r}; the harness knows {', '.join(_DECLARED) or 'none yet'}. "
            "Check the spelling against ../shared/spec/ops.md.")
    return op
