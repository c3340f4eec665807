"""Poisoned outputs: every element of every mHC output is written, at token counts that leave
partial tiles; and on a GPU, nothing is read or written past the tensors an op is given or
allocates (compute-sanitizer memcheck, which must flag a seeded kernel that does)."""

import pytest

from harness.detectors import poison
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden", tokens=[7, 33])
def test_every_output_element_written(target, record):
    finding = poison.check(target.spec, target.impl, target.case)
    record(finding.rows)
    finding.assert_passed()


@pytest.mark.machinery
def test_a_flood_that_another_process_outran_is_halved_not_out_of_memory(monkeypatch):
    """On a shared GPU the free memory the flood measured can be taken before it allocates
    (16 xdist workers on one H200: 4.18 GiB asked, 4.18 GiB free, out of memory): the flood
    halves and goes on, never failing the case."""
    import torch

    asked = []

    def full(shape, *args, **kwargs):
        asked.append(shape[0] * 4)
        if len(asked) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (taken by another process)")
        return torch.empty(0)

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (16 << 30, 140 << 30))
    monkeypatch.setattr(torch, "full", full)
    flooded = poison._flood_cuda_cache(torch.device("cuda"))
    assert asked == [4 << 30, 2 << 30] and flooded == 2 << 30


WRITES_PAST_OUTPUT = '''
import torch
import triton
import triton.language as tl

from harness.core.registry import register
from kernels.mhc.torch import mhc_post_compute


@triton.jit
def _copy_and_one_more(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n, other=0.0), mask=offs <= n)


@register("mhc_post", "writes-past-output", triton=True)
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    exact = mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)
    out = torch.empty_like(exact)
    _copy_and_one_more[(triton.cdiv(exact.numel() + 1, 1024),)](exact, out, exact.numel(), BLOCK=1024)
    return out
'''
"""A kernel whose outputs are exact but whose last store lands one element past the output it
allocated: only memcheck (with the caching allocator off) can see it."""


def _memcheck_or_skip():
    from harness import sanitize

    if sanitize.memcheck_tool() is None:
        pytest.skip("compute-sanitizer is not on PATH; install the CUDA toolkit to run memcheck")
    return sanitize


@pytest.mark.gpu
@pytest.mark.sweep(hidden="smallest", tokens=[33])
def test_memcheck_clean(target):
    """Partial tiles under compute-sanitizer memcheck: no read or write outside the tensors the
    op was given or allocated (any report fails). Triton implementations only: the torch ones
    run PyTorch's own kernels."""
    if not target.impl.triton:
        pytest.skip(f"{target.impl.name} launches no kernels of its own")
    sanitize = _memcheck_or_skip()
    run = sanitize.memcheck(target.spec.op, target.impl.name, target.case.tokens,
                            f"hidden={target.case.hidden}")
    assert run.clean, f"memcheck exit {run.returncode}:\n{run.output[-4000:]}"


@pytest.mark.gpu
@pytest.mark.implementation()
def test_memcheck_flags_a_write_past_an_output(tmp_path):
    sanitize = _memcheck_or_skip()
    module = tmp_path / "writes_past_output.py"
    module.write_text(WRITES_PAST_OUTPUT)
    run = sanitize.memcheck("mhc_post", "writes-past-output", 33, "hidden=4096", str(module))
    assert not run.clean and "Invalid __global__ write" in run.output, run.output[-4000:]
