"""One case of one implementation under ``compute-sanitizer`` memcheck: writes (and reads) past
the tensors an op is given or allocates itself, which no comparison of outputs can see.

    python -m harness.sanitize OP IMPL TOKENS [hidden=4096,top_k=2048,...]   # exit 1 if wrong

``memcheck`` runs that in a child process with PyTorch's caching allocator off: with it on, a
tensor is a slice of a larger cached segment, and a write just past its end lands inside that
segment, where memcheck sees nothing wrong. Implementations from ``HARNESS_IMPL_MODULES`` are
loaded, so a user's branch (or a seeded fault) can be checked the same way.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys

MEMCHECK_CLEAN = "ERROR SUMMARY: 0 errors"


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def main(argv=None) -> int:
    from harness.evaluate import evaluate
    from harness.impl_modules import load_impl_modules
    from harness.core.registry import get
    from harness.core.cases import Case
    from harness.core.specs import get_spec

    args = list(argv if argv is not None else sys.argv[1:])
    op, impl, tokens, params = args + [""] * (4 - len(args))
    pairs = dict((k, _value(v)) for k, v in (p.split("=", 1) for p in params.split(",") if p))
    hidden = int(pairs.pop("hidden", 0))
    load_impl_modules([])
    ev = evaluate(get_spec(op), get(op, impl),
                  Case(op, tokens=int(tokens), hidden=hidden, device="cuda", params=tuple(pairs.items())))
    print(f"{ev.case.id} [{impl}]: {'pass' if ev.passed else 'FAIL ' + ev.failures()}")
    return 0 if ev.passed else 1


@dataclasses.dataclass(frozen=True)
class Memcheck:
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and MEMCHECK_CLEAN in self.output


def memcheck_tool() -> str | None:
    return shutil.which("compute-sanitizer")


def memcheck(op: str, impl: str, tokens: int, params: str, impl_modules: str = "") -> Memcheck:
    """``main`` for this case under memcheck (``compute-sanitizer`` must be on PATH)."""
    from harness.subprocess_env import child_env

    cmd = [memcheck_tool(), "--tool", "memcheck", "--error-exitcode", "99", sys.executable,
           "-m", "harness.sanitize", op, impl, str(tokens), params]
    env = child_env(PYTHONUNBUFFERED="1", PYTORCH_NO_CUDA_MEMORY_CACHING="1",
                    HARNESS_IMPL_MODULES=impl_modules)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    return Memcheck(proc.returncode, proc.stdout + proc.stderr)


if __name__ == "__main__":
    sys.exit(main())
