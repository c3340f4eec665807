"""Benchmark (prints a table, asserts nothing): Triton top-k per row vs torch.topk.

    python benchmarks/bench_topk.py

torch.topk runs on the full rows (what the issue measured); the Triton decode op gets every row
valid to its last column, so both select k of the same N values.
"""

from __future__ import annotations

import pandas as pd
import torch
import triton.testing

from harness.registry import implementations

SHAPES = [(1, 131072, 2048), (64, 131072, 2048), (2048, 8192, 2048), (64, 300000, 2048)]


def tune() -> None:
    """Time the kernel's launch constants (BLOCK, RADIX, warps) on the benchmark shapes."""
    import itertools

    from kernels.topk import triton as tk

    rows = []
    for (r, n, k), block, radix, warps in itertools.product(SHAPES[:3], (2048, 4096, 8192),
                                                              (4, 8), (4, 8, 16)):
        logits = torch.randn(r, n, device="cuda")
        ends = torch.full((r,), n, dtype=torch.int32, device="cuda")
        starts = torch.zeros_like(ends)
        idx = torch.empty(r, k, dtype=torch.int32, device="cuda")
        ms = triton.testing.do_bench(lambda: tk._topk_rows[(r,)](
            logits, starts, ends, idx, n, 1, k, 1, k, BLOCK=block, SLOT_BLOCK=1024, RADIX=radix,
            num_warps=warps), warmup=3, rep=20)
        rows.append({"rows": r, "cols": n, "BLOCK": block, "RADIX": radix, "warps": warps,
                     "ms": ms})
    df = pd.DataFrame(rows)
    print(df.sort_values("ms").groupby(["rows", "cols"]).head(4).to_string(index=False))
    print(df.groupby(["BLOCK", "RADIX", "warps"])["ms"].sum().sort_values().head(6).to_string())


def main() -> pd.DataFrame:
    if not torch.cuda.is_available():
        raise SystemExit("bench_topk needs a GPU")
    triton_decode = implementations("top_k_per_row_decode")["triton"]
    rows = []
    for r, n, k in SHAPES:
        logits = torch.randn(r, n, device="cuda")
        seq_lens = torch.full((r,), n, dtype=torch.int32, device="cuda")
        idx = torch.empty(r, k, dtype=torch.int32, device="cuda")
        t_torch = triton.testing.do_bench(lambda: logits.topk(k, dim=1), warmup=5, rep=50)
        t_triton = triton.testing.do_bench(
            lambda: triton_decode(logits, 1, seq_lens, idx, r, n, 1, k), warmup=5, rep=50)
        for name, ms in (("torch.topk", t_torch), ("triton", t_triton)):
            rows.append({"rows": r, "cols": n, "k": k, "impl": name, "ms": ms,
                         "GB/s (logits once)": r * n * 4 / ms / 1e6,
                         "speedup_vs_torch": t_torch / ms})
    df = pd.DataFrame(rows)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return df


if __name__ == "__main__":
    import sys

    tune() if "--tune" in sys.argv else main()
