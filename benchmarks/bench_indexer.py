"""Benchmark (prints a table, asserts nothing): the Triton indexer kernels next to the torch
reference and vLLM's own Triton kernels, each against its limit measured in the same run.

    python benchmarks/bench_indexer.py [--json FILE]
    python benchmarks/bench_indexer.py --tune     # tiles of the prefill logits kernel
    python benchmarks/bench_indexer.py --tune-paged   # launch plan of the paged logits op

- Prefill logits (``fp8_mqa_logits``): TFLOP/s against the fp8 tensor-core roofline (an 8192^3
  ``torch._scaled_mm``). FLOPs count the q.k dot products only (2 * queries * keys * heads *
  head_dim) over the visible (query, key) pairs: the full window for ``full``, the causal
  triangle for ``causal``.
- Paged logits (``fp8_paged_mqa_logits``, the issue's shapes) and the K-cache write: GB/s of the
  bytes an ideal kernel moves (the visible keys' cache bytes, q, weights and the [rows,
  max_model_len] fp32 logits; for the cache write: k in, slot mapping, the written slots) against
  the copy bandwidth. vLLM's paged kernel takes its output from vLLM's workspace manager, which a
  model runner allocates once: here too it is allocated once, outside the timed region.
"""

from __future__ import annotations

import pathlib
import sys

import pandas as pd
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import (PEERS, copy_bandwidth, emit, host_columns, mma_roofline, need_gpu, parser,  # noqa: E402
                    runnable, time_ms, timed, with_ratios, with_same_size_copy)

from harness.core.cases import Case  # noqa: E402
from harness.core.registry import records  # noqa: E402
from harness.core.specs import get_spec  # noqa: E402

HEADS, HEAD_DIM = 64, 128
PREFILL = ((4096, 4096, False), (4096, 4096, True), (16384, 16384, True))
PAGED = ((64, 65536), (64, 8192), (256, 4096), (1, 131072))
K_CACHE_TOKENS = (64, 4096, 65536)
SHIPPED = ("triton", "triton-bf16")


def prefill_inputs(m: int, n: int, causal: bool) -> tuple[dict, float]:
    spec = get_spec("fp8_mqa_logits")
    inputs = spec.make_inputs(Case("fp8_mqa_logits", tokens=m, device="cuda", heads=HEADS,
                                   seqs=1, context=0))
    k = torch.randn(n, HEAD_DIM, device="cuda").to(torch.float8_e4m3fn)
    inputs["kv"] = (k, torch.rand(n, device="cuda") + 0.5)
    inputs["cu_seqlen_ks"] = torch.zeros(m, dtype=torch.int32, device="cuda")
    if causal:
        inputs["cu_seqlen_ke"] = (torch.arange(m, device="cuda") * n // m + 1).int()
        pairs = float(inputs["cu_seqlen_ke"].double().sum())
    else:
        inputs["cu_seqlen_ke"] = torch.full((m,), n, dtype=torch.int32, device="cuda")
        pairs = float(m * n)
    return inputs, 2 * pairs * HEADS * HEAD_DIM


def paged_inputs(batch: int, context: int) -> tuple[dict, float]:
    """Inputs with every row's context ``context``, and the bytes an ideal kernel moves."""
    inputs = get_spec("fp8_paged_mqa_logits").make_inputs(Case(
        "fp8_paged_mqa_logits", tokens=batch, device="cuda", heads=HEADS, context=context))
    inputs["context_lens"].fill_(context)
    logits = batch * inputs["q"].shape[1] * inputs["max_model_len"] * 4
    return inputs, (batch * context * (HEAD_DIM + 4) + inputs["q"].numel()
                    + inputs["weights"].numel() * 4 + logits)


def k_cache_inputs(t: int) -> tuple[dict, float]:
    inputs = get_spec("indexer_k_quant_and_cache").make_inputs(
        Case("indexer_k_quant_and_cache", tokens=t, device="cuda", scale_fmt=None))
    written = int((inputs["slot_mapping"] >= 0).sum())
    return inputs, t * HEAD_DIM * 2 + t * 8 + written * (HEAD_DIM + 4)


def _reuse_vllm_workspace() -> None:
    """vLLM's workspace buffers allocated once per shape, as a model runner's are."""
    try:
        from harness.adapters import vllm_sparse
    except ImportError:
        return
    cache: dict = {}

    def get_simultaneous(self, *shapes_and_dtypes):
        return [cache.setdefault((tuple(s), d, str(self.device)),
                                 torch.empty(s, dtype=d, device=self.device))
                for s, d in shapes_and_dtypes]

    if hasattr(vllm_sparse, "Workspace"):
        vllm_sparse.Workspace.get_simultaneous = get_simultaneous


def cases():
    """(op, shape label, make inputs -> (inputs, work), unit of work per second)."""
    for m, n, causal in PREFILL:
        yield ("fp8_mqa_logits", f"{m}x{n} {'causal' if causal else 'full'}",
               lambda m=m, n=n, c=causal: prefill_inputs(m, n, c), "TFLOP/s")
    for rows, context in PAGED:
        yield ("fp8_paged_mqa_logits", f"{rows} rows x {context}",
               lambda r=rows, c=context: paged_inputs(r, c), "GB/s")
    for t in K_CACHE_TOKENS:
        yield "indexer_k_quant_and_cache", f"T={t}", lambda t=t: k_cache_inputs(t), "GB/s"


def _time_all(op: str, label: str, inputs: dict, work: float, unit: str) -> list[dict]:
    rows = []
    args = get_spec(op).arguments(inputs)
    for name, impl in runnable(records(op), (*SHIPPED, *PEERS)).items():
        try:
            timing = timed(lambda fn=impl.fn: fn(*args), rep=50)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            rows.append({"op": op, "shape": label, "impl": name, "note": "OOM"})
            continue
        rows.append({"op": op, "shape": label, "impl": name, "ms": timing.ms,
                     "figure": work / timing.ms / (1e9 if unit == "TFLOP/s" else 1e6),
                     "unit": unit, "timing": timing.timing, **host_columns(timing)})
    return rows


def main(argv=None) -> pd.DataFrame:
    ap = parser(__doc__)
    ap.add_argument("--ops", nargs="+", help="only these ops (default: all)")
    args = ap.parse_args(argv)
    need_gpu("bench_indexer")
    _reuse_vllm_workspace()
    limits = {"copy GB/s": copy_bandwidth(), **mma_roofline()}
    rows = []
    for op, label, make, unit in cases():
        if args.ops and op not in args.ops:
            continue
        inputs, work = make()
        rows += _time_all(op, label, inputs, work, unit)
        del inputs
        torch.cuda.empty_cache()
    df = with_ratios(with_same_size_copy(pd.DataFrame(rows)), {"TFLOP/s": limits["fp8 TFLOP/s"],
                                          "GB/s": limits["copy GB/s"]})
    emit("bench_indexer", df, limits, args.json)
    return df


def tune() -> None:
    """Time the prefill kernel's tile shape, key halves and warps at 4096x4096 (full and causal
    windows)."""
    import itertools

    from kernels.sparse_indexer import triton as tk

    rows = []
    for causal in (False, True):
        inputs, flops = prefill_inputs(4096, 4096, causal)
        q, (k, s), w = inputs["q"], inputs["kv"], inputs["weights"]
        ks, ke = inputs["cu_seqlen_ks"], inputs["cu_seqlen_ke"]
        out = torch.empty(4096, 4096, device="cuda")
        for bm, bn, halves, warps, stages in itertools.product((64, 128), (64, 128, 256), (1, 2),
                                                               (4, 8), (2, 3, 4)):
            plan = tk.LaunchPlan(block_m=bm, block_n=bn, warps=warps, stages=stages,
                                 key_halves=halves)
            row = {"causal": causal, "BM": bm, "BN": bn, "halves": halves, "warps": warps,
                   "stages": stages}
            try:
                ms = time_ms(lambda plan=plan: tk.launch_mqa(q, k, s, w, ks, ke, out, False, plan),
                             warmup=3, rep=20)
            except Exception as exc:  # a config that does not fit (shared memory, registers)
                rows.append({**row, "ms": None, "note": type(exc).__name__})
                continue
            rows.append({**row, "ms": round(ms, 4), "TFLOP/s": round(flops / ms / 1e9, 1)})
    print(pd.DataFrame(rows).sort_values(["causal", "ms"]).to_string(index=False))


PAGED_TUNE = {"paged_programs": (512, 660, 1024, 2048), "paged_warps": (4, 8),
              "paged_stages": (3, 4, 5)}
"""The grid of ``--tune-paged``; on the H100 (2026-11-24) 512 programs, 4 warps, 5 stages was
fastest: 64x65536 in 196 us against 240 for the former 1024 programs with 3 stages."""


def tune_paged(grid: dict = PAGED_TUNE) -> None:
    """Time the paged logits op under launch plans on the issue's shapes, and the host cost of
    one call (what small calls are bound by)."""
    import dataclasses
    import itertools
    import time

    from kernels.sparse_indexer import triton as tk

    op = records("fp8_paged_mqa_logits")["triton"].fn
    shapes = {f"{r}x{c}": get_spec("fp8_paged_mqa_logits").arguments(paged_inputs(r, c)[0])
              for r, c in PAGED}
    rows = []
    for values in itertools.product(*grid.values()):
        plan = dataclasses.replace(tk.DEFAULT_PLAN, **dict(zip(grid, values)))
        row = dict(zip(grid, values))
        for label, args in shapes.items():
            row[label] = round(time_ms(lambda a=args, p=plan: op(*a, plan=p), rep=50) * 1e3, 1)
        rows.append(row)
    print("paged logits op, us per call")
    print(pd.DataFrame(rows).sort_values(list(shapes)[0]).to_string(index=False))
    args = shapes[f"{PAGED[-1][0]}x{PAGED[-1][1]}"]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(200):
        op(*args)
    host = (time.perf_counter() - start) / 200 * 1e6
    torch.cuda.synchronize()
    print(f"host time per call of the op ({list(shapes)[-1]}): {host:.1f} us")


if __name__ == "__main__":
    if "--tune" in sys.argv:
        tune()
    elif "--tune-paged" in sys.argv:
        tune_paged()
    else:
        main()
