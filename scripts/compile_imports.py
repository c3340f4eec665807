"""Byte-compile what the harness's processes import, once, at the end of the install.

scripts/install.sh installs with ``pip --no-compile``: byte-compiling every file of transformers,
vLLM, SGLang and torch is most of an install's time on 2 cores, and a run imports a small part of
them. This imports that part once with bytecode writing on (PYTHONDONTWRITEBYTECODE, set on some
machines, would otherwise make every later process compile it again); whatever a run imports
beyond it is compiled on first use. A module that fails to import here is left to the run, which
reports it where it matters.

The imports run as two processes at once, one per group below, so that a 2-core machine
compiles on both cores: the kernels with vLLM's Python (the largest), and the report, test and
E2E stack with the other vendors' (each group loads the adapters it names).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

GROUPS = {
    "kernels": (("torch", "triton", "numpy"), "vllm,tilelang"),
    "reports": (("pandas", "matplotlib.pyplot", "jinja2", "hypothesis", "pytest", "xdist",
                 "llama_cpp", "llama_cpp.server.app", "lm_eval", "lm_eval.evaluator",
                 "lm_eval.tasks"), "aiter,aiter_triton,sglang,liger,deepgemm"),
}
"""Group -> (modules imported first, the adapters it loads: HARNESS_ADAPTERS)."""


def compile_group(name: str) -> int:
    sys.dont_write_bytecode = False
    modules, adapters = GROUPS[name]
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a missing extra (HARNESS_E2E=0) is fine here
            pass
    os.environ["HARNESS_ADAPTERS"] = adapters
    try:
        from harness import families

        families.load()  # the kernels, and these adapters with the vendor modules they load
    except Exception as exc:  # noqa: BLE001
        print(f"install: byte-compiling the harness's imports stopped at {exc!r}; a run "
              "compiles the rest on first use", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv:
        return compile_group(argv[0])
    children = [subprocess.Popen([sys.executable, __file__, name]) for name in GROUPS]
    return max(child.wait() for child in children)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
