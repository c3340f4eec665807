"""CUDA-graph safety: an op captured once and replayed on new inputs must give what an eager
call on those inputs gives.

vLLM captures decode in full CUDA graphs (PR 42604 turned it on for DeepSeek-V4 Pro). A graph
replays the kernels it recorded with the buffers and scalars of the capture: an op that reads
a value back to the host (a sync is illegal while capturing), that bakes a host-side value
derived from its inputs into the launch, or that allocates where the graph cannot see it, is
wrong or unusable there. The detector captures ``spec.launch`` on static copies of one case's
inputs, then for new inputs of the same shapes (other seeds: new values and new metadata such
as sequence lengths) copies them into the static buffers, replays, and compares with an eager
call bitwise (through the spec's canonical view) and with the reference, as any call is judged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings

import torch

from kernels.runtime import deferred
from harness.core.results import Finding, result_row
from harness.core.metrics import differing_tokens
from harness.evaluate import kept, tensors_of, written_cells
from harness.core.cases import Case
from harness.core.specs import Comparison, OpSpec


def _refill(static: dict, new: dict) -> str | None:
    """Copy ``new``'s tensors into ``static``'s; why not, when the two calls differ in shape or
    in a non-tensor argument (a graph cannot follow those)."""
    for name in static:
        a, b = static[name], new[name]
        if not isinstance(a, (torch.Tensor, tuple, list)) and a != b:
            return f"argument {name} is {b!r} instead of the captured {a!r}"
    pairs = [(n, t, tensors_of(new)[n]) for n, t in tensors_of(static).items()]
    for name, a, b in pairs:
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{name} has shape {tuple(b.shape)} instead of the captured {tuple(a.shape)}"
    for _, a, b in pairs:
        a.copy_(b)
    return None


def check(spec: OpSpec, impl, case: Case, replays: int = 2) -> Finding:
    if not str(case.device).startswith("cuda"):
        raise ValueError("the CUDA-graph detector needs a CUDA device (--device cuda)")
    case = dataclasses.replace(case, params=tuple({**dict(spec.replay_params),
                                                   **dict(case.params)}.items()))
    static = spec.prepare(spec.make_inputs(case))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and autotune outside the capture
        spec.launch(impl.fn, spec.prepare(spec.make_inputs(case)))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        try:
            result = capture(graph, lambda: spec.launch(impl.fn, static))
        except Exception as exc:  # what the capture refused is the finding
            message = (f"cannot be captured in a CUDA graph: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''} (a host read or sync on "
                       "the hot path; vLLM's decode runs in full CUDA graphs)")
            return Finding("cuda_graph", spec.op, impl.name, False, message,
                           [_row(case, impl, "*", "fail", message)])
        return _replay(spec, impl, case, graph, static, result, replays)
    finally:
        deferred.forget_captured()


def _replay(spec: OpSpec, impl, case: Case, graph, static: dict, result, replays: int) -> Finding:
    """Replays on new inputs, each compared with an eager call bitwise and with the reference.
    Cells an implementation declares it leaves unwritten (``OpSpec.unwritten``) hold whatever
    its buffers held, in a replay as in an eager call: the bitwise comparison skips them, and
    the outputs whose unwritten cells the spec cannot locate (``OpSpec.bitwise_outputs``: judged
    against the reference alone)."""
    rows, problems = [], []
    for i in range(1, replays + 1):
        new_case = dataclasses.replace(case, seed=case.seed + i)
        new = spec.make_inputs(new_case)
        why = _refill(static, spec.prepare(new))
        if why:
            rows.append(_row(new_case, impl, "*", "not run", f"replay {i} not run: {why}"))
            continue
        graph.replay()
        torch.cuda.synchronize()
        got = kept(spec.collect(static, result))  # before the eager call can overwrite it
        want = spec.run(impl.fn, new)
        comparison = _comparison(spec, impl, new, got)
        unwritten = spec.unwritten(comparison)
        for name in spec.bitwise_outputs(comparison, unwritten):
            tokens = differing_tokens(*written_cells(spec, name, got[name], want[name], unwritten))
            detail = (f"replay {i} (seed {new_case.seed}) differs from an eager call in "
                      f"{len(tokens)} tokens (first: {', '.join(map(str, tokens[:8]))})"
                      if tokens else "")
            problems += [detail] if tokens else []
            rows.append(_row(new_case, impl, name, "fail" if tokens else "pass", detail))
        for judged in spec.compare(comparison):
            detail = (f"replay {i} (seed {new_case.seed}) against the reference: "
                      f"{judged['detail']}" if not judged["passed"] else "")
            problems += [detail] if detail else []
            rows.append(_row(new_case, impl, f"{judged['output']}/reference",
                             "pass" if judged["passed"] else "fail", detail))
    replayed = sum(r["verdict"] != "not run" for r in rows)
    if not replayed:
        return Finding("cuda_graph", spec.op, impl.name, False,
                       "captured but never replayed: " + "; ".join(r["detail"] for r in rows), rows)
    return Finding("cuda_graph", spec.op, impl.name, not problems,
                   "; ".join(problems[:3]) or f"captured once, {replays} replays on new inputs "
                   "equal eager calls bitwise", rows)


def _comparison(spec: OpSpec, impl, inputs: dict, outputs: dict) -> Comparison:
    """A replay's outputs against the reference, judged like any call's: an op that bakes a
    value of the capture into its launch (a host-side maximum, a first call's length) and uses
    it in eager calls too is wrong in both, which a comparison with an eager call alone cannot
    see."""
    ref = spec.reference(inputs)
    return Comparison(inputs, outputs, spec.refine_reference(inputs, outputs, ref), impl)



def capture(graph: torch.cuda.CUDAGraph, launch):
    """``launch()`` captured into ``graph``, on a stream and a memory pool of its own that a
    failed capture gives back. ``torch.cuda.graph`` does not: after a host sync invalidates the
    capture, its ``__exit__`` raises before leaving the capture stream and the allocator keeps
    recording into the graph's pool, so the process never returns memory again (an H100 worker
    grew to 72 GiB and starved the others; reproduced with a 2 GiB allocation, which stays
    reserved after ``empty_cache``, and returned with this function)."""
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=pool)
        try:
            result = launch()
            graph.capture_end()
        except BaseException:
            _abandon(graph, pool)
            raise
    torch.cuda.current_stream().wait_stream(stream)
    return result


def _abandon(graph: torch.cuda.CUDAGraph, pool) -> None:
    """End a capture that ``launch`` broke and free its pool (PyTorch's own bindings, which
    ``torch.cuda.graph`` lacks a public form of)."""
    with contextlib.suppress(Exception):
        graph.capture_end()
    device = torch.cuda.current_device()
    with contextlib.suppress(Exception):
        torch._C._cuda_endAllocateToPool(device, pool)
        torch._C._cuda_releasePool(device, pool)
    _end_rng_capture()


def _end_rng_capture() -> None:
    """Take PyTorch's CUDA generator out of capture mode. A capture whose end fails leaves it
    there (the generators' epilogue runs only after a successful end), and every later random op
    of the process then fails ("Offset increment outside graph capture encountered
    unexpectedly": on the H100, in whatever test the worker ran next). An empty capture that ends
    normally runs the epilogue."""
    empty = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(), contextlib.suppress(Exception), \
            torch.cuda.stream(torch.cuda.Stream()):
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty": it is meant to be
        empty.capture_begin()
        empty.capture_end()


def _row(case: Case, impl, output: str, verdict: str, detail: str) -> dict:
    return result_row(case, impl.name, "cuda_graph", output, verdict=verdict, detail=detail)
