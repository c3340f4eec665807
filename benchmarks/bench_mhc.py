"""Benchmark (prints a table, asserts nothing): Triton mHC kernels vs the torch reference.

    python benchmarks/bench_mhc.py [--hidden 7168] [--tokens 1 128 8192 65536]

GB/s counts the bytes an ideal kernel must move: every input read once, every output written
once (mhc_post: x, residual in + out; mhc_pre / hc_head: residual in + layer_input out).
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from harness.core.registry import implementations
from harness.core.cases import Case
from harness.core.specs import get_spec


def ideal_bytes(op: str, t: int, h: int, m: int = 4) -> int:
    n_mix = m * (m + 2) if op == "mhc_pre" else m
    if op == "mhc_post":
        return t * h * 2 + 2 * t * m * h * 2 + t * m * (m + 1) * 4
    return t * m * h * 2 + t * h * 2 + n_mix * m * h * 4


def bench(fn, args, warmup: int = 3, rep: int = 20) -> float:
    import triton.testing

    return triton.testing.do_bench(lambda: fn(*args), warmup=warmup, rep=rep)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 128, 8192, 65536])
    ap.add_argument("--ops", nargs="+", default=["mhc_post", "mhc_pre", "hc_head"])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_mhc needs a GPU: run it on a CUDA host (timings under the "
                         "Triton interpreter mean nothing)")
    rows = []
    for op in args.ops:
        spec = get_spec(op)
        impls = implementations(op)
        for t in args.tokens:
            inputs = spec.make_inputs(Case(op, tokens=t, hidden=args.hidden, device="cuda"))
            nbytes = ideal_bytes(op, t, args.hidden)
            times = {name: bench(impls[name], list(inputs.values())) for name in ("torch", "triton")}
            for name, ms in times.items():
                rows.append({"op": op, "T": t, "H": args.hidden, "impl": name, "ms": ms,
                             "GB/s": nbytes / ms / 1e6,
                             "speedup_vs_torch": times["torch"] / ms})
            del inputs
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return df


if __name__ == "__main__":
    main()
