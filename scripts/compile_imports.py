"""Byte-compile what the harness's processes import, once, at the end of the install.

scripts/install.sh installs with ``pip --no-compile``: byte-compiling every file of transformers,
vLLM, SGLang and torch is most of an install's time on 2 cores, and a run imports a small part of
them. This imports that part once with bytecode writing on (PYTHONDONTWRITEBYTECODE, set on some
machines, would otherwise make every later process compile it again); whatever a run imports
beyond it is compiled on first use. A module that fails to import here is left to the run, which
reports it where it matters.
"""

from __future__ import annotations

import importlib
import sys

MODULES = (
    "torch", "triton", "numpy", "pandas", "matplotlib.pyplot", "jinja2", "hypothesis", "pytest",
    "xdist", "lm_eval", "lm_eval.evaluator", "lm_eval.tasks", "llama_cpp", "llama_cpp.server.app",
)


def main() -> int:
    sys.dont_write_bytecode = False
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing extra (HARNESS_E2E=0) is fine here
            pass
    try:
        from harness import families

        families.load()  # the kernels and every vendor adapter with the vendor modules they load
    except Exception as exc:  # noqa: BLE001
        print(f"install: byte-compiling the harness's imports stopped at {exc!r}; a run "
              "compiles the rest on first use", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
