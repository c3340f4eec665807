"""Benchmark (prints a table, asserts nothing): Triton indexer logits vs the torch reference,
with achieved TFLOP/s next to the measured tensor-core roofline.

    python benchmarks/bench_indexer.py [--tune]

FLOPs count the q.k dot products only (2 * queries * keys * heads * head_dim) over the
visible (query, key) pairs: the full window for ``full``, the causal triangle for ``causal``.
The roofline is measured here: an 8192^3 fp8 GEMM (``torch._scaled_mm``) and a bf16 one.
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch
import triton.testing

from harness.core.registry import implementations
from harness.core.cases import Case
from harness.core.specs import get_spec

HEADS, HEAD_DIM = 64, 128


def roofline() -> dict:
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    fp8 = triton.testing.do_bench(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16))
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = triton.testing.do_bench(lambda: x @ x)
    return {"fp8": 2 * n ** 3 / fp8 / 1e9, "bf16": 2 * n ** 3 / bf16 / 1e9}


def prefill_inputs(m: int, n: int, causal: bool) -> tuple[dict, float]:
    spec = get_spec("fp8_mqa_logits")
    inputs = spec.make_inputs(Case("fp8_mqa_logits", tokens=m, device="cuda", heads=HEADS, seqs=1, context=0))
    k = torch.randn(n, HEAD_DIM, device="cuda").to(torch.float8_e4m3fn)
    inputs["kv"] = (k, torch.rand(n, device="cuda") + 0.5)
    if causal:
        inputs["cu_seqlen_ks"] = torch.zeros(m, dtype=torch.int32, device="cuda")
        inputs["cu_seqlen_ke"] = (torch.arange(m, device="cuda") * n // m + 1).int()
        pairs = float(inputs["cu_seqlen_ke"].double().sum())
    else:
        inputs["cu_seqlen_ks"] = torch.zeros(m, dtype=torch.int32, device="cuda")
        inputs["cu_seqlen_ke"] = torch.full((m,), n, dtype=torch.int32, device="cuda")
        pairs = float(m * n)
    return inputs, 2 * pairs * HEADS * HEAD_DIM


def paged_inputs(batch: int, context: int) -> tuple[dict, float]:
    spec = get_spec("fp8_paged_mqa_logits")
    inputs = spec.make_inputs(Case("fp8_paged_mqa_logits", tokens=batch, device="cuda", heads=HEADS, context=context))
    inputs["context_lens"].fill_(context)
    pairs = float(batch * context)
    return inputs, 2 * pairs * HEADS * HEAD_DIM


def main() -> pd.DataFrame:
    if not torch.cuda.is_available():
        raise SystemExit("bench_indexer needs a GPU")
    roof = roofline()
    print(f"roofline: fp8 {roof['fp8']:.0f} TFLOP/s, bf16 {roof['bf16']:.0f} TFLOP/s (8192^3 GEMM)")
    rows = []
    cases = [("fp8_mqa_logits", "4096x4096 full", lambda: prefill_inputs(4096, 4096, False)),
             ("fp8_mqa_logits", "4096x4096 causal", lambda: prefill_inputs(4096, 4096, True)),
             ("fp8_mqa_logits", "16384x16384 causal", lambda: prefill_inputs(16384, 16384, True)),
             ("fp8_paged_mqa_logits", "64 rows x 65536 ctx", lambda: paged_inputs(64, 65536))]
    for op, label, make in cases:
        inputs, flops = make()
        for name, fn in sorted(implementations(op).items()):
            if name not in ("torch", "triton", "triton-bf16"):
                continue
            try:
                args = get_spec(op).arguments(inputs)
                ms = triton.testing.do_bench(lambda fn=fn, args=args: fn(*args), warmup=5, rep=30)
            except torch.OutOfMemoryError:
                rows.append({"op": op, "shape": label, "impl": name, "ms": float("nan"),
                             "TFLOP/s": float("nan"), "% fp8 roofline": "OOM"})
                torch.cuda.empty_cache()
                continue
            tflops = flops / ms / 1e9
            rows.append({"op": op, "shape": label, "impl": name, "ms": round(ms, 3),
                         "TFLOP/s": round(tflops, 1),
                         "% fp8 roofline": f"{100 * tflops / roof['fp8']:.0f}%",
                         "% bf16 roofline": f"{100 * tflops / roof['bf16']:.0f}%"})
        del inputs
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    print(df.to_string(index=False))
    return df


def tune() -> None:
    """Time the prefill kernel's tile shape and warps at 4096x4096 (full windows)."""
    import itertools

    from kernels.sparse_indexer import triton as tk

    inputs, flops = prefill_inputs(4096, 4096, False)
    q, (k, s), w = inputs["q"], inputs["kv"], inputs["weights"]
    ks, ke = inputs["cu_seqlen_ks"], inputs["cu_seqlen_ke"]
    out = torch.empty(4096, 4096, device="cuda")
    rows = []
    for bm, bn, warps, stages in itertools.product((64, 128), (64, 128, 256), (4, 8), (2, 3)):
        plan = tk.LaunchPlan(block_m=bm, block_n=bn, warps=warps, stages=stages)
        try:
            ms = triton.testing.do_bench(lambda plan=plan: tk.launch_mqa(
                q, k, s, w, ks, ke, out, False, plan), warmup=3, rep=20)
        except Exception as exc:  # a config that does not fit (shared memory, registers)
            rows.append({"BM": bm, "BN": bn, "warps": warps, "stages": stages, "ms": None,
                         "note": type(exc).__name__})
            continue
        rows.append({"BM": bm, "BN": bn, "warps": warps, "stages": stages, "ms": round(ms, 3),
                     "TFLOP/s": round(flops / ms / 1e9, 1)})
    print(pd.DataFrame(rows).sort_values("ms").to_string(index=False))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", action="store_true")
    tune() if ap.parse_args().tune else main()
