"""Environment for child processes that run ``python -m harness`` from another directory: the
checkout that holds this package goes first on PYTHONPATH, so it works installed or not."""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """This environment, minus a TRITON_INTERPRET the harness turned on in this process (for CPU
    tensors: an in-process ``--device cpu`` call on a GPU host made every later child of a
    pytest worker interpret its Triton kernels, compute-sanitizer's GPU case among them)."""
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    if getattr(sys.modules.get("harness.core.device"), "interpreter_turned_on_here", False):
        env.pop("TRITON_INTERPRET", None)
    return {**env, **extra}
