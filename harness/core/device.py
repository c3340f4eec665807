"""Device discovery and the Triton interpreter switch.

Triton picks between compiling a kernel and interpreting it when ``@triton.jit`` runs, i.e. when
a kernel module is imported. So the choice has to be made before ``kernels`` is imported:
:func:`configure_triton` does that once, and every entry point (conftest, CLI) calls it first.
"""

from __future__ import annotations

import functools
import os

import torch

from kernels.runtime.device import (has_gpu, multiprocessors, triton_interpreted,  # noqa: F401
                                    triton_unavailable_reason)


def default_device() -> str:
    return "cuda" if has_gpu() else "cpu"


interpreter_turned_on_here = False
"""Whether ``configure_triton`` set TRITON_INTERPRET in this process (the user did not): child
processes are then not handed it (:func:`harness.subprocess_env.child_env`), and decide from
their own device, as this process did."""


kernels_imported = False
"""Set by ``harness.families.load`` once the kernels and the vendors' Triton kernels are imported.
Triton made each compiled or interpreted when it was decorated, so from then on
``configure_triton`` turns the interpreter on no more: it would change no kernel and mislead
every later check of TRITON_INTERPRET in the process (a GPU pytest worker that ran a CPU-tensor
``harness fuzz`` in-process kept AITER's AMD-only launch options and skipped large Triton
cases as if interpreted)."""


@functools.cache
def configure_triton(cpu_tensors: bool = False) -> None:
    """Turn on the Triton interpreter when there is no GPU, or when the run asks for CPU
    tensors (``--device cpu`` on a GPU host: compiled kernels cannot read host memory), unless
    the user opted out. Call it before the kernels are imported.

    Set ``HARNESS_NO_TRITON_INTERPRET=1`` to keep it off; Triton kernels then report
    themselves unavailable on a machine with no GPU instead of running slowly on CPU. When the
    interpreter is on, its fp32 -> bf16 casts are made to round as the GPU's do
    (:mod:`harness.core.interpreter_rounding`), and its helper calls stop re-patching the
    language (:mod:`kernels.runtime.interpreter_speed`).
    """
    global interpreter_turned_on_here
    if (cpu_tensors or not has_gpu()) and "TRITON_INTERPRET" not in os.environ \
            and not kernels_imported:
        if os.environ.get("HARNESS_NO_TRITON_INTERPRET", "0") in ("", "0"):
            os.environ["TRITON_INTERPRET"] = "1"
            interpreter_turned_on_here = True
    if triton_interpreted():
        from harness.core import interpreter_rounding
        from kernels.runtime import interpreter_speed

        interpreter_rounding.install()
        interpreter_speed.install()


def triton_compiles_for_nvidia() -> bool:
    """Whether Triton kernels imported now are compiled for an NVIDIA GPU (not interpreted, not
    ROCm): what the vendors' declarations of fp8 tensor-core arithmetic depend on."""
    return has_gpu() and not triton_interpreted() and torch.version.hip is None


def describe() -> dict[str, str]:
    """Versions and hardware, for reports."""
    info = {"torch": torch.__version__, "device": default_device(),
            "triton_interpret": str(triton_interpreted())}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "absent"
    if has_gpu():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = str(torch.version.cuda or torch.version.hip)
    return info
