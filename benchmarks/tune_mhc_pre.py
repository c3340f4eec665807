"""Tuning sweep (prints a table): the two mhc_pre kernels timed separately under candidate
launch plans (``kernels.mhc.triton.LaunchPlan``).

The shipped plan is one constant for all T (its K split sets a token's bits; only the token
tile and the second kernel's spread over H follow T, see ``kernels.mhc.triton``), so this times
each candidate at T=8192 and T=65536 and the choice goes into ``DEFAULT_PLAN`` by hand (at
T=8192 on the H100 a candidate's 128-row tile runs as 64 rows: ``_gemm_block_t``). Each kernel is
timed as the benchmarks time a call (``common.timed``: a CUDA-graph replay with L2 flushed), so
small T measures the GPU rather than the host's launch. On the H100 (2026-11-24, then timed
eagerly) both kernels of the shipped plan sit near the copy bandwidth at T=65536 (GEMM
2581 GB/s, epilogue 2884 GB/s); no plan was more than 9% faster at T=8192 (split_k_size=1024:
GEMM 0.210 ms against 0.230), so the default stayed.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys

import pandas as pd
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import need_gpu, time_ms  # noqa: E402

from harness.core.cases import Case  # noqa: E402
from harness.core.specs import get_spec  # noqa: E402
from kernels.mhc import triton as k  # noqa: E402


def gemm_time(x, fn, plan: k.LaunchPlan) -> float:
    return time_ms(lambda: k._rms_gemm(x, fn, None, plan), warmup=5, rep=30)


def epilogue_rows(spec, t, h=7168, m=4):
    inp = spec.make_inputs(Case("mhc_pre", tokens=t, hidden=h, device="cuda"))
    res = inp["residual"]
    mix, gemm = k._rms_gemm(res.view(t, -1), inp["fn"], None)
    post = torch.empty((t, m, 1), device="cuda")
    comb = torch.empty((t, m, m), device="cuda")
    out = torch.empty((t, h), dtype=torch.bfloat16, device="cuda")
    rows = []
    for bh, w in itertools.product((512, 1024), (2, 4)):
        plan = dataclasses.replace(k.DEFAULT_PLAN, block_h=bh, epilogue_warps=w)
        ms = time_ms(lambda plan=plan: k._gates(
            mix, gemm, res, inp["hc_scale"], inp["hc_base"], out, post, comb,
            (1e-6, 1e-6, 1e-6), 2.0, 20, head=False, plan=plan), warmup=5, rep=30)
        rows.append({"T": t, "n_mix": "epilogue", "plan": plan, "ms": ms,
                     "GB/s": (res.numel() + out.numel()) * 2 / ms / 1e6})
    return rows


def _short(plan: k.LaunchPlan) -> str:
    """The fields of ``plan`` that differ from the default (pandas cannot sort the dataclass)."""
    diff = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)
            if getattr(plan, f.name) != getattr(k.DEFAULT_PLAN, f.name)}
    return " ".join(f"{name}={value}" for name, value in diff.items()) or "default"


def main():
    need_gpu("tune_mhc_pre")
    rows = []
    spec = get_spec("mhc_pre")
    for t in (8192, 65536):
        inp = spec.make_inputs(Case("mhc_pre", tokens=t, hidden=7168, device="cuda"))
        x = inp["residual"].view(t, -1)
        for fn in (inp["fn"], inp["fn"][:4].contiguous()):
            for bt, bk, w, st, prec, split in itertools.product(
                    (64, 128), (64,), (4, 8), (3, 4, 5), ("bf16x3", "tf32x3"),
                    (1024, 2048, 4096)):
                if prec == "tf32x3" and (bt, bk, w, st, split) != (128, 64, 4, 3, 2048):
                    continue
                plan = dataclasses.replace(k.DEFAULT_PLAN, block_t=bt, block_k=bk, gemm_warps=w,
                                           gemm_stages=st, precision=prec, split_k_size=split)
                try:
                    ms = gemm_time(x, fn, plan)
                except Exception:  # noqa: BLE001 - report configs that do not compile
                    ms = float("nan")
                rows.append({"T": t, "n_mix": fn.shape[0], "plan": plan, "ms": ms,
                             "GB/s": x.numel() * 2 / ms / 1e6})
        del inp, x
        rows += epilogue_rows(spec, t)
    df = pd.DataFrame(rows)
    df["n_mix"] = df["n_mix"].astype(str)
    df["plan"] = df["plan"].map(_short)
    best = df.sort_values("ms").groupby(["T", "n_mix"]).head(5)
    print(best.to_string(index=False))
    df.to_csv("/tmp/tune.csv", index=False)
    shipped = df[(df.n_mix != "epilogue") & (df.plan == _short(k.DEFAULT_PLAN))]
    print("shipped:\n", shipped.to_string(index=False))
    # candidate plans' time summed over T, per n_mix
    agg = df[df.n_mix != "epilogue"].groupby(["n_mix", "plan"])["ms"].sum()
    print(agg.sort_values().groupby(level=0).head(5).to_string())


if __name__ == "__main__":
    main()
