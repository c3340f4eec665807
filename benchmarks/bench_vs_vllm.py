"""Benchmark (prints a table, asserts nothing): the shipped Triton kernels next to the installed
vLLM release's own Triton kernels for the same op, same inputs, one run.

    PYTHONPATH=. python benchmarks/bench_vs_vllm.py [--json out.json]

| op | shipped | vLLM |
| --- | --- | --- |
| indexer_k_quant_and_cache | ``triton`` | ``indexer_k_quant_and_cache_triton`` (``vllm-triton``) |
| fp8_paged_mqa_logits | ``triton`` | ``rocm_fp8_paged_mqa_logits_triton`` (``vllm-triton``) |
| hc_head | ``triton`` | ``hc_head_reduce_triton_kernel`` (``vllm-triton``) |

plus the torch reference as a third peer. GB/s counts the bytes an ideal kernel moves (inputs read
once, outputs written once; for the paged logits: the K cache of the visible keys, q, weights and
the [rows, max_model_len] fp32 logits), shown against the device copy bandwidth measured in the
same run. vLLM's paged-logits kernel takes its output from vLLM's workspace manager, which a model
runner allocates once: here too the buffer is allocated once, outside the timed region.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import pandas as pd
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bandwidth import main as copy_bandwidth  # noqa: E402
from bench_indexer import paged_inputs  # noqa: E402
from bench_mhc import ideal_bytes  # noqa: E402

from harness.core.registry import records  # noqa: E402
from harness.core.cases import Case
from harness.core.specs import get_spec  # noqa: E402

IMPLS = ("triton", "vllm-triton", "torch")
K_CACHE_TOKENS = (64, 4096, 65536)
PAGED = ((64, 65536), (64, 8192), (256, 4096), (1, 131072))
HC_HEAD = ((8192, 7168), (65536, 4096))
HEAD_DIM = 128


def _reuse_workspace() -> None:
    """vLLM's workspace buffers allocated once per shape, as a model runner's are."""
    from harness.adapters import vllm_sparse

    cache: dict = {}

    def get_simultaneous(self, *shapes_and_dtypes):
        return [cache.setdefault((tuple(s), d, str(self.device)),
                                 torch.empty(s, dtype=d, device=self.device))
                for s, d in shapes_and_dtypes]

    vllm_sparse.Workspace.get_simultaneous = get_simultaneous


def k_cache_case(t: int):
    inputs = get_spec("indexer_k_quant_and_cache").make_inputs(
        Case("indexer_k_quant_and_cache", tokens=t, device="cuda", scale_fmt=None))
    written = int((inputs["slot_mapping"] >= 0).sum())
    return inputs, t * HEAD_DIM * 2 + t * 8 + written * (HEAD_DIM + 4)


def paged_case(rows: int, context: int):
    inputs, _ = paged_inputs(rows, context)
    logits = rows * inputs["max_model_len"] * 4
    return inputs, rows * context * (HEAD_DIM + 4) + inputs["q"].numel() + \
        inputs["weights"].numel() * 4 + logits


def hc_head_case(t: int, h: int):
    inputs = get_spec("hc_head").make_inputs(Case("hc_head", tokens=t, hidden=h, device="cuda"))
    return inputs, ideal_bytes("hc_head", t, h)


def cases():
    for t in K_CACHE_TOKENS:
        yield "indexer_k_quant_and_cache", f"T={t}", lambda t=t: k_cache_case(t)
    for rows, context in PAGED:
        yield "fp8_paged_mqa_logits", f"{rows} rows x {context}", \
            lambda r=rows, c=context: paged_case(r, c)
    for t, h in HC_HEAD:
        yield "hc_head", f"T={t} H={h}", lambda t=t, h=h: hc_head_case(t, h)


def time_ms(op: str, fn, inputs) -> float:
    import triton.testing

    args = get_spec(op).arguments(inputs)
    return triton.testing.do_bench(lambda: fn(*args), warmup=5, rep=30)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_vs_vllm needs a GPU: timings under the Triton interpreter mean "
                         "nothing")
    _reuse_workspace()
    copy = copy_bandwidth()
    rows = []
    for op, label, make in cases():
        impls = records(op)
        inputs, nbytes = make()
        times = {}
        for name in IMPLS:
            impl = impls.get(name)
            if impl is None or not impl.available:
                rows.append({"op": op, "shape": label, "impl": name, "ms": None,
                             "note": f"not run: {impl.reason if impl else 'not registered'}"[:90]})
                continue
            try:
                times[name] = time_ms(op, impl.fn, inputs)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                rows.append({"op": op, "shape": label, "impl": name, "ms": None, "note": "OOM"})
                continue
        for name, ms in times.items():
            gbs = nbytes / ms / 1e6
            rows.append({"op": op, "shape": label, "impl": name, "ms": round(ms, 4),
                         "GB/s": round(gbs), "% of copy": f"{100 * gbs / copy:.0f}%",
                         "x vs vllm-triton": round(times["vllm-triton"] / ms, 2)
                         if "vllm-triton" in times else None, "note": ""})
        del inputs
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    print(f"device: {torch.cuda.get_device_name()}, copy bandwidth {copy:.0f} GB/s")
    print(df.to_string(index=False))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "copy_GBps": copy,
             "rows": df.where(df.notna(), None).to_dict("records")}, indent=1))
    return df


if __name__ == "__main__":
    main()
