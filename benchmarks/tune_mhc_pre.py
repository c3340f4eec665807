"""Tuning sweep (prints a table): the two mhc_pre kernels timed separately under fixed configs.

The shipped config must be one constant for all T (batch invariance), so this times each
candidate at small and large T and the choice goes into kernels/mhc/triton.py by hand.
"""

from __future__ import annotations

import itertools

import pandas as pd
import torch
import triton
import triton.testing

from kernels.mhc import triton as k
from harness.core.cases import Case
from harness.core.specs import get_spec


def gemm_time(x, fn, block_t, block_k, warps, stages, prec, split):
    t, kk = x.shape
    n_splits = triton.cdiv(kk, split)
    k_per = triton.cdiv(triton.cdiv(kk, n_splits), block_k) * block_k
    n_splits = triton.cdiv(kk, k_per)
    n_pad = k._n_pad(fn.shape[0])
    mix = torch.empty((n_splits, t, n_pad), device=x.device)
    sq = torch.empty((n_splits, t), device=x.device)

    def go():
        k._rms_gemm_partial[(triton.cdiv(t, block_t), n_splits)](
            x, fn, mix, sq, t, kk, k_per, N_MIX=fn.shape[0], N_PAD=n_pad, BLOCK_T=block_t,
            BLOCK_K=block_k, PRECISION=prec, INTERPRETED=False, num_warps=warps,
            num_stages=stages)
    return triton.testing.do_bench(go, warmup=5, rep=30)


def epilogue_rows(spec, t, h=7168, m=4):
    inp = spec.make_inputs(Case("mhc_pre", tokens=t, hidden=h, device="cuda"))
    res = inp["residual"]
    mix, sq, splits, n_pad = k._rms_gemm(res.view(t, -1), inp["fn"], None)
    post = torch.empty((t, m, 1), device="cuda")
    comb = torch.empty((t, m, m), device="cuda")
    out = torch.empty((t, h), dtype=torch.bfloat16, device="cuda")
    rows = []
    for bh, w in itertools.product((512, 1024), (2, 4)):
        def go():
            k._gates_and_mix[(t,)](mix, sq, res, inp["hc_scale"], inp["hc_base"], out, post, comb,
                                   t, h, splits, 1e-6, 1e-6, 1e-6, 2.0, 20, M=m, M_PAD=m,
                                   N_PAD=n_pad, HEAD=False, BLOCK_H=bh, num_warps=w)
        ms = triton.testing.do_bench(go, warmup=5, rep=30)
        rows.append({"T": t, "n_mix": "epilogue", "BT": 0, "BK": bh, "warps": w, "stages": 0,
                     "prec": "", "split": 0, "ms": ms, "GB/s": (res.numel() + out.numel()) * 2 / ms / 1e6})
    return rows


def main():
    rows = []
    spec = get_spec("mhc_pre")
    for t in (128, 8192, 65536):
        inp = spec.make_inputs(Case("mhc_pre", tokens=t, hidden=7168, device="cuda"))
        x = inp["residual"].view(t, -1)
        for fn in (inp["fn"], inp["fn"][:4].contiguous()):
            for bt, bk, w, st, prec, split in itertools.product(
                    (64, 128), (64, 128, 256), (4, 8), (3, 4), ("bf16x3", "tf32x3"), (2048,)):
                if prec == "tf32x3" and (bt, bk, w, st) != (128, 64, 4, 3):
                    continue
                try:
                    ms = gemm_time(x, fn, bt, bk, w, st, prec, split)
                except Exception:  # noqa: BLE001 - report configs that do not compile
                    ms = float("nan")
                rows.append({"T": t, "n_mix": fn.shape[0], "BT": bt, "BK": bk, "warps": w,
                             "stages": st, "prec": prec, "split": split, "ms": ms,
                             "GB/s": x.numel() * 2 / ms / 1e6})
        del inp, x
        rows += epilogue_rows(spec, t)
    df = pd.DataFrame(rows)
    df["n_mix"] = df["n_mix"].astype(str)
    best = df.sort_values("ms").groupby(["T", "n_mix"]).head(5)
    print(best.to_string(index=False))
    df.to_csv("/tmp/tune.csv", index=False)
    shipped = df[(df.n_mix != "epilogue") & (df.BT == k.BLOCK_T) & (df.BK == k.BLOCK_K) & (df.warps == k.GEMM_WARPS)
                 & (df.stages == k.GEMM_STAGES) & (df.prec == k.PRECISION) & (df.split == k.SPLIT_K_SIZE)]
    print("shipped:\n", shipped.to_string(index=False))
    # candidate configs' time summed over T, per n_mix
    agg = df[df.n_mix != "epilogue"].groupby(["n_mix", "BT", "BK", "warps", "stages", "prec", "split"])["ms"].sum()
    print(agg.sort_values().groupby(level=0).head(5).to_string())


if __name__ == "__main__":
    main()
