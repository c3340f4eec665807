"""A launch that skips ``JITFunction.run`` (``kernels.runtime.launch_cache``) must run the kernel Triton
would have picked: one compiled for another pointer alignment, int range or dtype reads its
arguments wrongly, silently. The key it keeps kernels under must separate every pair of
arguments that Triton's own specialisation separates."""

import itertools

import pytest
import torch
import triton
import triton.language as tl

from kernels.runtime import launch_cache
from kernels.runtime.triton_utils import Launch

pytestmark = [pytest.mark.implementation("triton"), pytest.mark.machinery]


def _samples(device: str) -> list:
    base = torch.zeros(64, dtype=torch.float32, device=device)
    return [
        base, base[4:], base[1:], base[2:], base.to(torch.bfloat16), base.to(torch.bfloat16)[8:],
        base.to(torch.int32), base.view(torch.uint8)[1:],
        0, 1, 2, 3, 15, 16, 17, 32, -1, -16, 2**31 - 16, 2**31, 2**31 + 1, 2**32, 2**63 - 16,
        2**63, 2**64 - 16,
        0.0, 1.0, -2.5, 1e30, True, False, None,
    ]


def _tritons(value) -> tuple:
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    return tuple(native_specialize_impl(BaseBackend, value, False, True, True))


def test_key_separates_every_pair_triton_separates():
    samples = _samples("cpu")
    for a, b in itertools.combinations(samples, 2):
        key_a, key_b = launch_cache.specialisation_key((a,)), launch_cache.specialisation_key((b,))
        assert key_a is not None and key_b is not None
        if key_a == key_b:
            assert _tritons(a) == _tritons(b), (
                f"one launch-cache key for {_describe(a)} and {_describe(b)}, which Triton "
                f"specialises apart ({_tritons(a)} vs {_tritons(b)}): kernels.runtime.launch_cache."
                "specialisation_key must tell them apart")


def test_key_refuses_arguments_it_does_not_read():
    import numpy as np

    assert launch_cache.specialisation_key((np.float32(1.0),)) is None
    assert launch_cache.specialisation_key((torch.zeros(2), np.int64(3))) is None


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor at {value.data_ptr() % 16} bytes past 16"
    return f"{type(value).__name__} {value!r}"


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    y = tl.load(y_ptr + offs, mask=ok)
    tl.store(out_ptr + offs, x * alpha + y, mask=ok)


def test_interpreted_launches_go_through_jit():
    from harness.core.device import triton_interpreted

    if not triton_interpreted():
        pytest.skip("compiled here: the GPU test below covers this host")
    assert not launch_cache.usable()
    x = torch.arange(8, dtype=torch.float32)
    out = torch.empty_like(x)
    launch = Launch(_axpy, (1,), (8,), dict(BLOCK=8))
    launch(x, x, out, after=(2.0,))
    assert launch.compiled == {}
    torch.testing.assert_close(out, 3 * x, rtol=0, atol=0)


@pytest.mark.gpu
def test_a_kept_kernel_is_the_one_jit_picks_and_computes_the_same():
    if torch.version.hip is not None or not triton.__version__.startswith(launch_cache.TESTED_TRITON):
        pytest.skip(f"launches skip JITFunction.run only on NVIDIA with Triton "
                    f"{launch_cache.TESTED_TRITON} (here Triton {triton.__version__}, "
                    f"ROCm {torch.version.hip})")
    assert launch_cache.usable(), ("compiled on NVIDIA with a Triton this was read for, and no "
                                   "launch hook: kernels.runtime.launch_cache.usable() should say yes")
    gen = torch.Generator(device="cuda").manual_seed(0)
    buf = torch.randn(3, 4096 + 64, device="cuda", generator=gen)
    launches = {}
    for n, shift, alpha in itertools.product((1, 16, 17, 4096), (0, 1, 4), (0.5, -3.0)):
        x, y, out = (row[shift:shift + n] for row in buf)
        launch = launches.setdefault(n, Launch(_axpy, (triton.cdiv(n, 256),), (n,),
                                               dict(BLOCK=256)))
        with launch_cache.through_jit():
            launch(x, y, out, after=(alpha,))
        through_jit = out.clone()
        torch.testing.assert_close(through_jit, x * alpha + y)  # the kernel may fuse the multiply-add
        for _ in range(2):  # the first call keeps the kernel, the second skips JITFunction.run
            out.zero_()
            launch(x, y, out, after=(alpha,))
            assert torch.equal(out, through_jit), f"n={n}, shift {shift}: another result"
        kept = launch.compiled[launch_cache.call_key((x, y, out), (alpha,))].kernel
        with launch_cache.through_jit():
            picked = _axpy.run(x, y, out, n, alpha, grid=launch.grid, warmup=False, BLOCK=256)
        assert kept is picked, (f"n={n}, inputs {shift} floats past an aligned start: the launch "
                                "cache ran another kernel than JITFunction.run picks")


def test_a_profilers_launch_hook_sends_launches_through_jit(monkeypatch):
    """A hook (Triton's profilers) sees every launch only through ``JITFunction.run``."""
    from triton import knobs

    monkeypatch.setattr(launch_cache, "_possible", lambda: True)
    assert launch_cache.usable()
    knobs.runtime.launch_enter_hook.add(print)
    try:
        assert not launch_cache.usable()
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    with launch_cache.through_jit():
        assert not launch_cache.usable()
