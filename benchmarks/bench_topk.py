"""Benchmark (prints a table, asserts nothing): Triton top-k per row vs torch.topk.

    python benchmarks/bench_topk.py [--json FILE]   # the issue's shapes, random and tie-heavy data
    python benchmarks/bench_topk.py --tune [NAME=v1,v2 ...]   # launch constants of
                                                             # kernels/topk/triton.py
    python benchmarks/bench_topk.py --breakdown [NAME=v ...]  # us per kernel, per shape

torch.topk runs on the full rows (what the issue measured); the Triton decode op gets every row
valid to its last column, so both select k of the same N values. Two Triton rows: ``triton op``
is the registered op (argument checks, a claimed error word, two or three launches; no host
synchronisation: the window check is read later, see ``kernels.runtime.deferred``); ``triton
kernels`` is the launches alone. Both are timed as CUDA-graph replays (``common.timed``); the
host time of an eager call is in ``host us``. ``ties`` data shares the top 22 bits of every
value (vLLM's 10LSBits generator), so the whole row lands in one coarse bin and the long-row finish
(``_finish_long``: one pass over the row per stage) does the selecting: the slow path, shown so
the fast one is not mistaken for the only one.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys

import pandas as pd
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import (Timing, copy_bandwidth, emit, host_columns, kernel_times, need_gpu,  # noqa: E402
                    parser, timed, with_ratios, with_same_size_copy)

from harness.core.registry import implementations  # noqa: E402
from kernels.topk import triton as tk  # noqa: E402

SHAPES = [(1, 131072, 2048), (64, 131072, 2048), (2048, 8192, 2048), (64, 300000, 2048)]


def _logits(rows: int, n: int, data: str) -> torch.Tensor:
    if data == "ties":
        bits = 0x3F900000 | torch.randint(0, 1024, (rows, n), dtype=torch.int32, device="cuda")
        return bits.view(torch.float32)
    return torch.randn(rows, n, device="cuda")


def _bench(fn) -> Timing:
    return timed(fn, rep=200)


def _kernels_only(logits, seq_lens, idx, r, n, k, plan=tk.DEFAULT_PLAN):
    return lambda: tk.launch(logits, None, seq_lens, 1, idx, r, n, 1, k, decode=True, plan=plan)


def main(argv=None) -> pd.DataFrame:
    args = parser(__doc__).parse_args(argv)
    need_gpu("bench_topk")
    copy = copy_bandwidth()
    triton_decode = implementations("top_k_per_row_decode")["triton"]
    rows = []
    for r, n, k, data, logits in _cases():
        seq_lens = torch.full((r,), n, dtype=torch.int32, device="cuda")
        idx = torch.empty(r, k, dtype=torch.int32, device="cuda")
        timings = {"torch": _bench(lambda: logits.topk(k, dim=1)),
                   "triton op": _bench(lambda: triton_decode(logits, 1, seq_lens, idx, r, n, 1, k)),
                   "triton kernels": _bench(_kernels_only(logits, seq_lens, idx, r, n, k))}
        for name, timing in timings.items():
            rows.append({"op": "top_k_per_row_decode", "shape": f"{r}x{n} k={k} {data}",
                         "impl": name, "ms": timing.ms, "figure": r * n * 4 / timing.ms / 1e6,
                         "unit": "GB/s", "timing": timing.timing, **host_columns(timing)})
    df = with_ratios(with_same_size_copy(pd.DataFrame(rows)), {"GB/s": copy}, peers=("torch",))
    emit("bench_topk", df, {"copy GB/s": copy}, args.json)
    return df


TUNE_GRID = {"finish_programs": (256, 512, 1024), "finish_tile": (512, 1024)}
"""LaunchPlan fields to sweep (kernels.topk.triton.LaunchPlan); the rest stay at their defaults."""


def _cases():
    """The shapes and data of ``main``: random rows, and tie-heavy rows up to 64 rows."""
    for (r, n, k), data in itertools.product(SHAPES, ("random", "ties")):
        if data == "ties" and r > 64:
            continue
        yield r, n, k, data, _logits(r, n, data)


def tune(grid: dict = TUNE_GRID) -> pd.DataFrame:
    """Times every combination of the given launch-plan fields on the shapes and data of
    ``main`` (random and tie-heavy rows)."""
    cases = []
    for r, n, k, data, logits in _cases():
        cases.append((r, n, k, data, logits, torch.full((r,), n, dtype=torch.int32, device="cuda"),
                      torch.empty(r, k, dtype=torch.int32, device="cuda"),
                      _bench(lambda: logits.topk(k, dim=1)).ms))
    rows = []
    for values in itertools.product(*grid.values()):
        config = dict(zip(grid, values))
        plan = dataclasses.replace(tk.DEFAULT_PLAN, **config)
        for r, n, k, data, logits, seq_lens, idx, t_torch in cases:
            ms = _bench(_kernels_only(logits, seq_lens, idx, r, n, k, plan)).ms
            rows.append({**config, "shape": f"{r}x{n} {data}", "speedup": t_torch / ms})
    df = pd.DataFrame(rows).pivot_table(index=list(grid), columns="shape", values="speedup")
    df["min"] = df.min(axis=1)
    print("speedup vs torch.topk (kernels only), per launch-constant combination")
    print(df.sort_values("min", ascending=False).to_string(float_format=lambda v: f"{v:.2f}"))
    return df


def breakdown(config: dict) -> pd.DataFrame:
    """Microseconds per call of each launch (``common.kernel_times``) on the shapes and data of
    ``main``, under the default plan with ``config``'s fields replaced."""
    plan = dataclasses.replace(tk.DEFAULT_PLAN, **config)
    frames = []
    for r, n, k, data, logits in _cases():
        seq_lens = torch.full((r,), n, dtype=torch.int32, device="cuda")
        idx = torch.empty(r, k, dtype=torch.int32, device="cuda")
        frames.append(kernel_times(_kernels_only(logits, seq_lens, idx, r, n, k, plan))
                      .rename(f"{r}x{n} {data}"))
    df = pd.concat(frames, axis=1).fillna(0.0)
    df.loc["all kernels"] = df.sum()
    print(f"us per call of each kernel (plan: {config or 'default'}), eager, L2 flushed")
    print(df.to_string(float_format=lambda v: f"{v:.1f}"))
    return df


def _grid_from_args(args: list[str]) -> dict:
    """``NAME=v1,v2 ...`` after --tune replaces the default grid."""
    pairs = [a.split("=", 1) for a in args if "=" in a]
    return {name: tuple(int(v) for v in values.split(",")) for name, values in pairs} or TUNE_GRID


if __name__ == "__main__":
    if "--tune" in sys.argv:
        tune(_grid_from_args(sys.argv[sys.argv.index("--tune") + 1:]))
    elif "--breakdown" in sys.argv:
        grid = _grid_from_args(sys.argv[sys.argv.index("--breakdown") + 1:])
        breakdown({} if grid is TUNE_GRID else {name: v[0] for name, v in grid.items()})
    else:
        main()
