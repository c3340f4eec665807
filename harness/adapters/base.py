"""What an adapter is, and how one is registered.

An adapter is split in two so that its argument mapping is testable without the package:
``discover()`` imports the vendor package and returns a namespace of its entry points
(raising if the package is absent); ``bind(api)`` turns such a namespace into harness-contract
functions. The stand-in tests hand ``bind`` a namespace of functions with the vendor's exact
call signatures.
"""

from __future__ import annotations

import dataclasses
import types
import contextlib
import logging
import warnings
from typing import Any, Callable

from harness.core.registry import Implementation, add, register_unavailable


@dataclasses.dataclass(frozen=True)
class Adapter:
    name: str
    package: str
    install_hint: str
    ops: dict[str, tuple[str, ...]]
    """Implementation name -> the ops it provides when the package has them."""
    discover: Callable[[], Any]
    bind: Callable[[Any], dict[str, dict[str, Callable | str]]]
    """api -> {implementation name: {op: harness-contract function, or why it cannot run here}};
    ops the api lacks may also be left out."""
    accumulation: dict[str, str] = dataclasses.field(default_factory=dict)
    """Implementation name -> declared accumulation class (see Implementation.accumulation)."""
    declared: dict[str, dict[str, dict[str, str]]] = dataclasses.field(default_factory=dict)
    """Implementation name -> op -> declared properties (see Implementation.declared); an
    ``accumulation`` here overrides the implementation-wide one for that op."""
    deviations: dict[str, dict[str, tuple]] = dataclasses.field(default_factory=dict)
    """Implementation name -> op -> KnownDeviation entries (documented upstream disagreements)."""
    triton: frozenset[str] = frozenset()
    """Implementation names whose entries launch Triton kernels (Implementation.triton)."""
    cost_limits: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Implementation name -> op -> CostLimit (Implementation.cost_limit)."""
    unsupported: dict[str, dict[str, tuple]] = dataclasses.field(default_factory=dict)
    """Implementation name -> op -> Unsupported entries (Implementation.unsupported)."""
    notice: Callable[[Any], str] = lambda api: ""
    """api -> one plain sentence a run prints once about this machine's package (e.g. vLLM's
    compiled extension absent), or ""."""
    distributions: tuple[str, ...] = ()
    """Distribution names providing ``package`` whose names differ from it (``amd-aiter`` for
    ``aiter``): the release a run records is read from them without scanning every
    installed distribution."""
    quiet_loggers: tuple[str, ...] = ()
    """Loggers of the package silenced below ERROR while it is imported: their start-up
    warnings are said once, in the harness's words, by ``notice``."""


NOTICES: list[str] = []
"""What the adapters had to say about this machine's packages (``Adapter.notice``), printed once
by a run."""

IMPORT_NOISE = (r"`torch\.jit\.script_method` is deprecated",)
"""DeprecationWarnings third-party packages raise through torch while they are imported (14 of
them when vLLM's sparse-MLA module loads): nothing the user can act on."""


@contextlib.contextmanager
def quiet_import(loggers: tuple[str, ...] = ()):
    """Import a vendor package without its known start-up noise: the IMPORT_NOISE warnings, and
    ``loggers`` below ERROR."""
    levels = {name: logging.getLogger(name).level for name in loggers}
    with warnings.catch_warnings():
        for message in IMPORT_NOISE:
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        for name in loggers:
            logging.getLogger(name).setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


NOT_THIS_CONTRACT = "not this contract: "
"""How the reason of an entry (or of a case, ``Unsupported``) that takes another contract begins:
a vendor op whose inputs or outputs the contract cannot be mapped onto by conventions alone
(AITER's dense top-k has no row windows). The conformance matrix shows it apart from what merely
cannot run on this machine (harness.reports.vendors)."""


def not_this_contract(reason: str) -> str:
    return NOT_THIS_CONTRACT + reason


TF32_GEMM = {"accumulation": "tf32"}
"""The declaration of an mHC implementation whose long GEMM runs on TF32 tensor cores (Triton's
``tl.dot`` default, TileLang's and AITER's kernels): judged by the TF32 bound
(the spec's tolerance table)."""
TF32_OPS = ("mhc_pre", "mhc_fused_post_pre")
"""The ops whose fp32 mix outputs the TF32 class widens: hc_head and mhc_post return bf16
alone, where a TF32 declaration changes nothing, so it is not made there (each declaration must
be needed: suites/test_declarations_are_needed.py; docs/kernels/mhc.md has vLLM's Triton
hc_head)."""


def triton_tf32_gemm() -> dict[str, str]:
    """TF32_GEMM for a Triton kernel where Triton compiles it for a GPU; under the CPU
    interpreter ``tl.dot`` runs in fp32 and the plain fp32 bound holds (each declaration must be
    needed where it is made: suites/test_declarations_are_needed.py)."""
    from harness.core.device import triton_interpreted

    return {} if triton_interpreted() else dict(TF32_GEMM)


def namespace(**entries: Any) -> types.SimpleNamespace:
    """An api namespace without the entries that are None (absent in this package version)."""
    return types.SimpleNamespace(**{k: v for k, v in entries.items() if v is not None})


def entry(module: Any, *path: str) -> Any:
    """``module.a.b`` or None when any part of the path is missing."""
    obj = module
    for part in path:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def register_adapter(adapter: Adapter, api: Any = None) -> str:
    """Register what the package provides; record everything else as unavailable, with why."""
    if api is None:
        try:
            with quiet_import(adapter.quiet_loggers):
                api = adapter.discover()
        except Exception as exc:  # ImportError, or a package that imports but cannot initialise
            reason = (f"{adapter.package} is not usable here ({type(exc).__name__}: {exc}); "
                      f"{adapter.install_hint}")
            for impl_name, ops in adapter.ops.items():
                for op in ops:
                    register_unavailable(op, impl_name, reason)
            return f"unavailable: {reason}"
    with quiet_import(adapter.quiet_loggers):
        bound = adapter.bind(api)
    said = adapter.notice(api)
    if said and said not in NOTICES:
        NOTICES.append(said)
    count = 0
    for impl_name, ops in adapter.ops.items():
        fns = bound.get(impl_name, {})
        for op in ops:
            if isinstance(fns.get(op), str):
                register_unavailable(op, impl_name, fns[op])
            elif op in fns:
                declared = dict(adapter.declared.get(impl_name, {}).get(op, {}))
                accumulation = declared.pop("accumulation",
                                            adapter.accumulation.get(impl_name, "fp32"))
                add(Implementation(op=op, name=impl_name, fn=fns[op],
                                   source=f"harness.adapters.{adapter.name}",
                                   accumulation=accumulation, declared=declared,
                                   triton=impl_name in adapter.triton,
                                   cost_limit=adapter.cost_limits.get(impl_name, {}).get(op),
                                   known_deviations=tuple(
                                       adapter.deviations.get(impl_name, {}).get(op, ())),
                                   unsupported=tuple(
                                       adapter.unsupported.get(impl_name, {}).get(op, ()))),
                    replace=True)
                count += 1
            else:
                register_unavailable(op, impl_name, f"{adapter.package} is installed but has no "
                                     f"entry point for {op} in this version")
    return f"registered {count} implementation(s)"
