"""What every benchmark shares: timing, the limits measured on this device in the same run, the
peers timed on the same inputs, and one output shape (a printed table; ``--json`` for the nightly
report, one flat record per row, so runs can be concatenated and plotted over time).

Every row carries its ``figure`` in its ``unit`` (GB/s or TFLOP/s), the ``limit`` of that unit
measured here, ``% of limit``, and one ``x vs PEER`` column per peer (peer time / this time:
above 1 is faster than the peer); GB/s rows also carry ``% of same-size copy``, the limit at
the call's own size. Rows of Triton kernels carry ``host us`` (per eager call on this host),
``bare us`` (the same kernels launched with the same arguments and nothing else, through
``JITFunction.run``), ``launcher us`` (the same through the compiled kernels' own launchers) and
``host / bare``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import time
from typing import Callable, NamedTuple

import pandas as pd
import torch
import triton
import triton.language as tl

PEERS = ("torch", "vllm-triton")
"""Peers of a shipped kernel, where registered and runnable: the torch reference and the
installed vLLM's own Triton kernel for the same op."""


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the rows to FILE (JSON)")
    return ap


def need_gpu(name: str) -> None:
    if not torch.cuda.is_available():
        raise SystemExit(f"{name} needs a CUDA GPU: timings under the Triton interpreter mean "
                         "nothing. Run it on a GPU host.")


FLUSH_BYTES = 256 * 2**20
"""Zeroed before every timed call, so each call starts with a cold L2 (50 MB on the H100)."""


class Timing(NamedTuple):
    ms: float
    """Median GPU time of one call, L2 flushed before each call."""
    timing: str
    """``graph``: captured once in a CUDA graph and replayed, as vLLM runs decode, so the host's
    cost of launching is not counted as GPU time; ``eager``: triton's do_bench, for a call that
    cannot be captured (it reads a value back to the host)."""
    host_us: float
    """Host time per eager call (launches queued, not waited for): what a caller outside a
    graph pays on this host, shown next to the GPU time instead of mixed into it."""
    bare_us: float
    """Host time of launching the same Triton kernels with the same arguments and nothing else
    (``bare_launches``): the floor ``host_us`` is held to. NaN for a call that launches none."""
    launcher_us: float
    """The same launches through the compiled kernels' own launchers (``launcher_launches``),
    which the registered ops use after a call's first launch: NaN where they cannot."""


def host_columns(timing: Timing) -> dict:
    """A row's host-time columns."""
    return {"host us": timing.host_us, "bare us": timing.bare_us,
            "launcher us": timing.launcher_us}


def timed(fn: Callable[[], object], warmup: int = 10, rep: int = 100) -> Timing:
    """Times one call of ``fn`` (``warmup`` and ``rep`` in milliseconds, as for do_bench).
    Eager timing of a small call measures the host whenever launching takes longer than the GPU
    work, and moves with the host from run to run; a graph replay does not, so a call that can be
    captured is replayed (docs/benchmarks.md has the measurements)."""
    from kernels.runtime import deferred
    from harness.detectors.cuda_graph import capture

    launches = _recorded_launches(fn)
    host_us, bare_us, launcher_us = _host_us_each(
        (fn, bare_launches(fn, launches), launcher_launches(launches)))
    graph = torch.cuda.CUDAGraph()
    try:
        capture(graph, fn)
    except Exception:
        deferred.forget_captured()
        return Timing(eager_ms(fn, warmup, rep), "eager", host_us, bare_us, launcher_us)
    try:
        return Timing(_replayed_median_ms(graph, warmup, rep), "graph", host_us, bare_us,
                      launcher_us)
    finally:
        deferred.forget_captured()


def _replayed_median_ms(graph: torch.cuda.CUDAGraph, warmup: float, rep: float) -> float:
    """Median time of a replay of ``graph``, L2 flushed before each (``warmup`` and ``rep`` in
    milliseconds, as for do_bench)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    estimate = statistics.mean(_replays_ms(graph, flush, 5))
    _replays_ms(graph, flush, max(1, int(warmup / max(estimate, 1e-3))))
    reps = min(1000, max(5, int(rep / max(estimate, 1e-3))))
    return statistics.median(_replays_ms(graph, flush, reps))


def per_call_in_step(calls: list[Callable[[], object]], warmup: int = 10,
                     rep: int = 100) -> float:
    """Median GPU time per call, in ms, of ``calls`` captured back to back in one CUDA graph
    and replayed as ``timed`` replays one: the cost of a call inside a captured decode step, where
    the graph's own launch latency (paid once per step) is shared by all of them. Give each call
    its own inputs and weights, so that none of them finds another's bytes in L2. NaN when the
    calls cannot be captured (``timed`` then times them eagerly); a failing replay raises."""
    from kernels.runtime import deferred
    from harness.detectors.cuda_graph import capture

    graph = torch.cuda.CUDAGraph()
    try:
        try:
            capture(graph, lambda: [call() for call in calls])
        except Exception:
            return float("nan")
        return _replayed_median_ms(graph, warmup, rep) / len(calls)
    finally:
        deferred.forget_captured()


def _recorded_launches(fn: Callable[[], object]) -> list:
    """(kernel, arguments, grid, options, compiled kernel) of each Triton launch one call of
    ``fn`` makes, every one through ``JITFunction.run``."""
    from triton.runtime.jit import JITFunction

    from kernels.runtime import launch_cache

    launches = []
    run = JITFunction.run

    def recording(self, *args, grid, warmup, **kwargs):
        compiled = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        launches.append((self, args, grid, kwargs, compiled))
        return compiled

    JITFunction.run = recording
    try:
        with launch_cache.through_jit():
            fn()
    finally:
        JITFunction.run = run
    torch.cuda.synchronize()
    return launches


def bare_launches(fn: Callable[[], object], launches: list | None = None) -> Callable[[], None] | None:
    """The Triton launches one call of ``fn`` makes, recorded (kernel, grid, arguments) and
    replayed through ``JITFunction.run`` with nothing around them: no argument checks, no output
    allocation, no launch-plan work. None when ``fn`` launches no Triton kernel."""
    from triton.runtime.jit import JITFunction

    launches = _recorded_launches(fn) if launches is None else launches
    if not launches:
        return None
    run = JITFunction.run

    def replay():
        for kernel, args, grid, kwargs, _ in launches:
            run(kernel, *args, grid=grid, warmup=False, **kwargs)
    return replay


def launcher_launches(launches: list) -> Callable[[], None] | None:
    """The same launches through the compiled kernels' own launchers, arguments bound once: the
    floor of any launch from Python (``kernels.runtime.launch_cache``). None where that module does not
    launch so (another Triton, ROCm) or a grid is a function."""
    from kernels.runtime import launch_cache

    if not launches or not launch_cache.usable() or any(callable(g) for _, _, g, _, _ in launches):
        return None
    direct = [(launch_cache.CompiledLaunch(kernel, compiled, grid, len(args), kwargs), args)
              for kernel, args, grid, kwargs, compiled in launches]

    def replay():
        device = launch_cache.current_device()
        for launch, args in direct:
            launch(device, args)
    return replay


def _host_us_each(fns: tuple, rounds: int = 5) -> list[float]:
    """Host time per eager call of each of ``fns`` (NaN for None), after one call that compiles:
    the best of ``rounds`` rounds of about 10 ms of calls (2 to 200), the GPU drained between
    rounds (one round of a few calls reads too far apart between runs: docs/benchmarks.md). The
    rounds take turns across ``fns``, so that the host's drift (its clock, other processes)
    weighs on each alike and the ratios of their times compare like with like."""
    live = [(i, fn, _calls_in_10_ms(fn)) for i, fn in enumerate(fns) if fn is not None]
    best = [float("nan") if fn is None else float("inf") for fn in fns]
    for _ in range(rounds):
        for i, fn, calls in live:
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return best


def _calls_in_10_ms(fn: Callable[[], object]) -> int:
    """How many eager calls of ``fn`` take about 10 ms (2 to 200), after one that compiles."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    return max(2, min(200, int(0.01 / max(time.perf_counter() - start, 1e-6))))


def _replays_ms(graph: torch.cuda.CUDAGraph, flush: torch.Tensor, n: int) -> list[float]:
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    for start, end in events:
        flush.zero_()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def time_ms(fn: Callable[[], object], warmup: int = 10, rep: int = 100) -> float:
    """``timed``'s milliseconds alone."""
    return timed(fn, warmup, rep).ms


def eager_ms(fn: Callable[[], object], warmup: int = 10, rep: int = 100) -> float:
    """Median time of eager calls (triton's do_bench, L2 flushed between calls): the limits,
    whose calls are long enough for the host not to matter, and which a graph could change
    (torch's 1 GiB ``copy_`` replayed from a graph runs on the copy engines, slower than called
    eagerly: docs/benchmarks.md)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def kernel_times(fn: Callable[[], object], calls: int = 20) -> pd.Series:
    """Microseconds per call of each kernel ``fn`` launches (torch.profiler over ``calls`` eager
    calls, L2 flushed before each), by kernel name, slowest first: where a call's time goes."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.bitwise_not_()
            fn()
        torch.cuda.synchronize()
    per_call = {e.key: e.device_time_total / calls for e in prof.key_averages()
                if e.device_time_total > 0 and "bitwise_not" not in e.key}
    return pd.Series(per_call, name="us per call").sort_values(ascending=False)


def copy_bandwidth(gib: float = 1.0) -> float:
    """Device-to-device copy, bytes read + written per second (GB/s): the memory limit."""
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = eager_ms(lambda: dst.copy_(src), warmup=5, rep=50)
    return 2 * n / ms / 1e6


def with_same_size_copy(df: pd.DataFrame) -> pd.DataFrame:
    """Adds ``% of same-size copy`` to every GB/s row: the time of a copy kernel moving the
    row's bytes (half read, half written), timed as the row is (``timed``), over the row's time.
    The 1 GiB copy is what long streams reach; a short call also pays the launch and the ramp up
    and down, which no kernel avoids (docs/benchmarks.md has that floor's size). This column
    tells that floor apart from a kernel's own shortfall."""
    df = df.copy()
    copies: dict[int, float] = {}

    def copy_ms(nbytes: int) -> float:
        if nbytes not in copies:
            copies[nbytes] = time_ms(_same_size_copy(nbytes))
        return copies[nbytes]

    df["% of same-size copy"] = [
        round(100 * copy_ms(round(figure * ms * 1e6)) / ms, 1) if unit == "GB/s" and ms > 0 else None
        for figure, ms, unit in zip(df["figure"], df["ms"], df["unit"])]
    return df


def copy_per_call_in_step(nbytes: int, calls: int) -> float:
    """ms per copy of ``nbytes`` among ``calls`` copies captured back to back, each on buffers
    of its own: the memory floor of a call that must move ``nbytes`` inside a captured step,
    where ``per_call_in_step`` times the call itself."""
    return per_call_in_step([_same_size_copy(nbytes) for _ in range(calls)])


def _same_size_copy(nbytes: int) -> Callable[[], None]:
    """A launch of the copy kernel moving ``nbytes`` (half read, half written) between buffers
    of its own."""
    words = max(1, nbytes // 8)
    src = torch.empty(words, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    grid = (triton.cdiv(words, _COPY_BLOCK),)
    return lambda: _copy_kernel[grid](src, dst, words, BLOCK=_COPY_BLOCK, num_warps=4)


_COPY_BLOCK = 4096


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    """The same-size copy: an SM kernel, because torch's ``copy_`` captured in a CUDA graph
    becomes a memcpy node on the copy engines, slower than this kernel replayed or ``copy_``
    called eagerly (docs/benchmarks.md has the figures)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


def mma_roofline(n: int = 8192) -> dict[str, float]:
    """TFLOP/s of an n^3 GEMM on fp8 (``torch._scaled_mm``) and bf16 tensor cores: the compute
    limits."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    fp8 = eager_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), rep=50)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = eager_ms(lambda: x @ x, rep=50)
    return {"fp8 TFLOP/s": 2 * n ** 3 / fp8 / 1e9, "bf16 TFLOP/s": 2 * n ** 3 / bf16 / 1e9}


def runnable(records: dict, names) -> dict:
    """The implementations among ``names`` that are registered and can run here."""
    return {n: records[n] for n in names if n in records and records[n].available}


def with_ratios(df: pd.DataFrame, limits: dict[str, float], peers=PEERS,
                keys=("op", "shape")) -> pd.DataFrame:
    """Adds the ``limit`` of each row's ``unit`` (``limits[unit]``), ``% of limit`` (figure /
    limit) and ``x vs PEER`` for each peer timed on the same (op, shape)."""
    df = df.copy()
    limit = df["unit"].map(limits)
    df["limit"] = limit.round()
    df["% of limit"] = (100 * df["figure"] / limit).round(1)
    for peer in peers:
        ref = df[df["impl"] == peer].set_index(list(keys))["ms"]
        if ref.empty:
            continue
        peer_ms = df.set_index(list(keys)).index.map(ref.to_dict().get)
        df[f"x vs {peer}"] = (pd.Series(peer_ms, index=df.index, dtype=float) / df["ms"]).round(2)
    if {"host us", "bare us"} <= set(df.columns):
        df["host / bare"] = (df["host us"] / df["bare us"]).round(2)
    return df


def emit(name: str, df: pd.DataFrame, limits: dict, json_path: str | None) -> None:
    """Prints the device, the limits and the table; writes the --json file."""
    device = torch.cuda.get_device_name()
    print(f"{name} on {device}; limits measured in this run: "
          + ", ".join(f"{k} {v:.4g}" for k, v in limits.items()))
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(document(name, df, limits, device), indent=1))


def document(name: str, df: pd.DataFrame, limits: dict, device: str) -> dict:
    """What ``--json`` writes (``harness speed`` reads it): the run's benchmark, time, device,
    torch and limits, and one flat record per row carrying the first three again, so the rows
    of many runs can be concatenated as they are."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    return {"benchmark": name, "time": stamp, "device": device, "torch": torch.__version__,
            "limits": limits, "rows": [{"benchmark": name, "time": stamp, "device": device, **r}
                                       for r in records]}
