"""Adapters: vendor kernels registered under the spec's op names.

One module per vendor package; each maps the package's own calling convention onto the
contract of ``shared/spec/ops.md`` and nothing else (no casts that would change the precision
the kernel computes in). ``load_all`` is called with the built-in kernels, so every backend the
machine has is compared; a package that is missing is recorded as unavailable with the reason
and the install hint, and the run summary lists it.
"""

from __future__ import annotations

import os

from harness.adapters.base import Adapter, register_adapter
from harness.core.registry import register_unavailable
from harness.core.registries import Registry


def _built_in() -> None:
    from harness.adapters import aiter, aiter_triton, deepgemm, liger, sglang, tilelang, vllm

    for name, module in (("vllm", vllm), ("aiter", aiter), ("aiter_triton", aiter_triton),
                         ("tilelang", tilelang), ("deepgemm", deepgemm), ("liger", liger),
                         ("sglang", sglang)):
        ADAPTERS.add(name, module.ADAPTER, replace=True)


ADAPTERS: Registry[Adapter] = Registry("adapter", on_first_use=_built_in)
"""The vendor adapters by name (one module each), imported on first use."""
ADAPTER_MODULES = ("vllm", "aiter", "aiter_triton", "tilelang", "deepgemm", "liger", "sglang")


def selected() -> tuple[str, ...]:
    """Adapter names to load: all, or those named in ``HARNESS_ADAPTERS`` (``none`` for none)."""
    wanted = os.environ.get("HARNESS_ADAPTERS", "").strip()
    if not wanted:
        return ADAPTER_MODULES
    names = tuple(n.strip() for n in wanted.split(",") if n.strip() and n.strip() != "none")
    unknown = sorted(set(names) - set(ADAPTER_MODULES))
    if unknown:
        raise ValueError(f"HARNESS_ADAPTERS names unknown adapter(s) {unknown}; "
                         f"choose from {', '.join(ADAPTER_MODULES)} or 'none'")
    return names


def adapters() -> list[Adapter]:
    return [ADAPTERS.get(name) for name in selected()]


_SCOPE: frozenset[str] | None = None


def scope_to(implementations) -> None:
    """Import only the adapters that provide one of ``implementations`` (a run's ``--impl``):
    the others' packages stay unimported (vLLM's take ~8 s of a run's start-up) and their
    implementations are registered as not loaded, with the reason, so their names stay known.
    Takes effect at the next ``load_all``; an empty selection means every adapter."""
    global _SCOPE
    _SCOPE = frozenset(implementations) or None


def _out_of_scope(adapter: Adapter) -> str:
    reason = (f"not loaded: this run's --impl ({', '.join(sorted(_SCOPE or ()))}) names none of "
              f"{adapter.package}'s implementations")
    for impl_name, ops in adapter.ops.items():
        for op in ops:
            register_unavailable(op, impl_name, reason)
    return reason


def load_all() -> dict[str, str]:
    """Register every adapter (those in scope, see ``scope_to``); returns adapter name -> status
    line."""
    return {a.name: register_adapter(a) if _SCOPE is None or _SCOPE & set(a.ops)
            else _out_of_scope(a) for a in adapters()}


__all__ = ["Adapter", "ADAPTERS", "ADAPTER_MODULES", "adapters", "load_all", "register_adapter",
           "scope_to"]
