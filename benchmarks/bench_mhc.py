"""Benchmark (prints a table, asserts nothing): the Triton mHC kernels next to the torch reference
and vLLM's own Triton kernels, against the copy bandwidth measured in the same run.

    python benchmarks/bench_mhc.py [--hidden 7168] [--tokens 1 128 8192 65536] [--json FILE]
    python benchmarks/bench_mhc.py --decode     # T = 1, 4, 16, 64, 128, 256, with each kernel's us
                                                # and the time per call inside a captured step

GB/s counts the bytes an ideal kernel must move: every input read once, every output written
once (mhc_post: x, residual in + out; mhc_pre / hc_head: residual in + layer_input out;
mhc_fused_post_pre: x, residual in, new residual and layer_input out). The row
``triton post, then pre`` is the two separate Triton ops back to back, the fused op's baseline.

``ms`` replays a graph holding one call, so it includes the graph's launch latency (the meta
line ``one-kernel graph us`` gives it for a graph of one fill kernel). ``--decode`` adds
``in step us``: the time per call of STEP_CALLS calls captured back to back in one graph, each
on inputs and weights of its own, as a captured decode step runs them. ``between others us``
is the same with a cuBLAS GEMM (``OTHER_KERNEL``) after each call, less those GEMMs alone: a
call between foreign kernels, as the fused op and mhc_post run in DeepSeek-V4 (mhc_pre and
hc_head follow mhc_post there). docs/kernels/mhc.md, "Between other kernels", says how the two
columns differ and why. ``copy in step us`` is their limit: a copy of the row's ideal bytes,
per call among STEP_CALLS captured back to back, each on buffers of its own.
"""

from __future__ import annotations

import pathlib
import sys

import pandas as pd
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import (PEERS, copy_bandwidth, copy_per_call_in_step, emit, host_columns,  # noqa: E402
                    kernel_times, need_gpu, parser, per_call_in_step, runnable, timed, with_ratios,
                    with_same_size_copy)

from harness.core.cases import Case  # noqa: E402
from harness.core.registry import records  # noqa: E402
from harness.core.specs import get_spec  # noqa: E402

OPS = ("mhc_post", "mhc_pre", "mhc_fused_post_pre", "hc_head")
STREAMS = 4
DECODE_TOKENS = (1, 4, 16, 64, 128, 256)
"""A decode step's batch sizes: where a call's time is its launches and its longest chain."""
STEP_CALLS = 16
"""Calls per captured graph in ``--decode``'s ``in step us`` column, each on its own inputs and
weights (DeepSeek-V4 makes 122 mHC calls per decode step, in one graph)."""

OTHER_KERNEL = 512
"""``between others us``: each call is followed by ``[T, H] @ [H, OTHER_KERNEL]`` in bf16 on a
weight of its own, a stand-in for the attention and expert GEMMs between a model's mHC calls."""


def ideal_bytes(op: str, t: int, h: int, m: int = STREAMS) -> int:
    weights = {"mhc_pre": m * (m + 2), "hc_head": m}.get(op, m * (m + 2)) * m * h * 4
    gates = t * m * (m + 1) * 4
    if op == "mhc_post":
        return t * h * 2 + 2 * t * m * h * 2 + gates
    if op == "mhc_fused_post_pre":
        return t * h * 2 + 2 * t * m * h * 2 + t * h * 2 + weights + 2 * gates
    return t * m * h * 2 + t * h * 2 + weights


def _short(kernel: str) -> str:
    """A profiler kernel name without its template arguments and parameters."""
    return kernel.removeprefix("void ").split("<")[0].split("(")[0][-32:]


def _post_then_pre(inputs: dict):
    post, pre = records("mhc_post")["triton"].fn, records("mhc_pre")["triton"].fn
    post_args = get_spec("mhc_post").arguments(get_spec("mhc_post").own_inputs(inputs))
    pre_inputs = get_spec("mhc_pre").own_inputs(inputs)

    def run():
        pre_inputs["residual"] = post(*post_args)
        return pre(*get_spec("mhc_pre").arguments(pre_inputs))
    return run


def _step_calls(op: str, impl: str, t: int, hidden: int) -> list:
    """STEP_CALLS calls of one implementation, each on inputs and weights of its own."""
    spec = get_spec(op)
    calls = []
    for seed in range(STEP_CALLS):
        inputs = spec.make_inputs(Case(op, tokens=t, hidden=hidden, device="cuda", seed=seed))
        if impl == "triton post, then pre":
            calls.append(_post_then_pre(inputs))
        else:
            fn, args_ = records(op)[impl].fn, spec.arguments(inputs)
            calls.append(lambda fn=fn, args_=args_: fn(*args_))
    return calls


def _other_kernels(t: int, hidden: int) -> list:
    """STEP_CALLS of ``OTHER_KERNEL``'s GEMMs, each on operands of its own, each run once
    eagerly: cuBLAS sets up its handle and workspace outside a capture, not inside one."""
    def gemm(seed: int):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(t, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(hidden, OTHER_KERNEL, device="cuda", dtype=torch.bfloat16, generator=gen)
        return lambda: torch.mm(a, w)
    others = [gemm(seed) for seed in range(STEP_CALLS)]
    for other in others:
        other()
    return others


def per_call_between_others(calls: list, others: list) -> float:
    """Per-call ms of ``calls`` each followed by one of ``others`` in one graph, less ``others``
    alone in one graph."""
    pairs = [lambda call=call, other=other: (call(), other()) for call, other in zip(calls, others)]
    return per_call_in_step(pairs) - per_call_in_step(others)


def main(argv=None) -> pd.DataFrame:
    ap = parser(__doc__)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 128, 8192, 65536])
    ap.add_argument("--ops", nargs="+", default=list(OPS))
    ap.add_argument("--decode", action="store_true", help=f"tokens {DECODE_TOKENS} and each "
                    "kernel's time (torch.profiler) beside the call's")
    args = ap.parse_args(argv)
    if args.decode:
        args.tokens = list(DECODE_TOKENS)
    need_gpu("bench_mhc")
    copy = copy_bandwidth()
    rows, step_copies = [], {}
    for op in args.ops:
        spec = get_spec(op)
        impls = runnable(records(op), ("triton", *PEERS))
        for t in args.tokens:
            inputs = spec.make_inputs(Case(op, tokens=t, hidden=args.hidden, device="cuda"))
            args_ = spec.arguments(inputs)
            call = {name: (lambda fn=impl.fn: fn(*args_)) for name, impl in impls.items()}
            if op == "mhc_fused_post_pre" and "triton" in impls:
                call["triton post, then pre"] = _post_then_pre(inputs)
            nbytes = ideal_bytes(op, t, args.hidden)
            for name, fn in call.items():
                try:
                    timing = timed(fn)
                except torch.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    rows.append({"op": op, "shape": f"T={t}", "impl": name, "note": "OOM"})
                    continue
                row = {"op": op, "shape": f"T={t}", "impl": name, "ms": timing.ms,
                       "figure": nbytes / timing.ms / 1e6, "unit": "GB/s", "timing": timing.timing,
                       **host_columns(timing)}
                if args.decode:
                    calls = _step_calls(op, name, t, args.hidden)
                    row["in step us"] = 1e3 * per_call_in_step(calls)
                    if nbytes not in step_copies:
                        step_copies[nbytes] = 1e3 * copy_per_call_in_step(nbytes, STEP_CALLS)
                    row["copy in step us"] = step_copies[nbytes]
                    row["between others us"] = 1e3 * per_call_between_others(
                        calls, _other_kernels(t, args.hidden))
                    row["kernels (us)"] = ", ".join(f"{_short(k)} {v:.1f}" for k, v in
                                                    kernel_times(fn).head(3).items())
                rows.append(row)
            inputs = args_ = call = None
            torch.cuda.empty_cache()
    df = with_ratios(with_same_size_copy(pd.DataFrame(rows)), {"GB/s": copy})
    one = torch.zeros(1, device="cuda")
    meta = {"copy GB/s": copy, "one-kernel graph us": 1e3 * timed(one.zero_).ms}
    emit("bench_mhc", df, meta, args.json)
    return df


if __name__ == "__main__":
    main()
