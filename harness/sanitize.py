"""Run one case of one implementation (for ``compute-sanitizer``), exit 1 if it is wrong.

    python -m harness.sanitize OP IMPL TOKENS k=2048,next_n=2,pad=3
"""

from __future__ import annotations

import sys

from harness.evaluate import evaluate
from harness.registry import get
from harness.specs import Case, get_spec


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def main(argv=None) -> int:
    op, impl, tokens, params = (argv or sys.argv[1:]) + [""] * (4 - len(argv or sys.argv[1:]))
    pairs = tuple((k, _value(v)) for k, v in (p.split("=", 1) for p in params.split(",") if p))
    spec = get_spec(op)
    if op == "top_k_per_row_decode":
        pairs = tuple(p for p in pairs if p[0] != "seqs")
    else:
        pairs = tuple(p for p in pairs if p[0] not in ("next_n", "pad"))
    ev = evaluate(spec, get(op, impl), Case(op, int(tokens), 0, 0, "cuda", pairs))
    print(f"{ev.case.id} [{impl}]: {'pass' if ev.passed else 'FAIL ' + ev.failures()}")
    return 0 if ev.passed else 1


if __name__ == "__main__":
    sys.exit(main())
