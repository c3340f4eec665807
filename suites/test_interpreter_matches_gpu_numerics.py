"""Where the CPU interpreter's arithmetic would differ from the GPU's and turn into false alarms:
fp32 -> bf16 rounding (Triton 3.6's interpreter truncates; the GPU rounds to nearest even), and
dots whose summation order comes from the CPU's BLAS kernel (bitwise batch invariance failed on
CPUs where OpenBLAS picks its Haswell or Zen sgemm)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from harness.core.device import has_gpu, triton_interpreted
from harness.core.interpreter_rounding import fp32_to_bf16_bits, fp32_to_e4m3_bits
from harness.subprocess_env import child_env

# the interpreter runs the Triton kernels
pytestmark = [pytest.mark.implementation("triton"), pytest.mark.machinery]

EDGES = [0.0, -0.0, 1.0, 1.00390625, 1.005859375, 1.0078125 + 2 ** -9, 3.3895314e38, 3.4e38,
         float("inf"), float("-inf"), 1e-40, -1e-40, 2 ** -133]


def test_fp32_to_bf16_rounds_like_torch():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(100_000).astype(np.float32) * 1e3,
                             rng.integers(0, 2 ** 32, 100_000, dtype=np.uint64)
                             .astype(np.uint32).view(np.float32), np.float32(EDGES)])
    finite = np.isfinite(values) | np.isinf(values)
    got = fp32_to_bf16_bits(values)
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.uint16).numpy().view(np.uint16)
    assert np.array_equal(got[finite], want[finite])
    nan = np.isnan(values)
    assert torch.from_numpy(got[nan].view(np.int16)).view(torch.bfloat16).isnan().all()


def test_fp32_to_e4m3_rounds_to_nearest_even_and_saturates():
    rng = np.random.default_rng(1)
    values = np.concatenate([(rng.standard_normal(100_000) * 50).astype(np.float32),
                             np.float32([1.9375 + 2 ** -6, 1.0625, 1.1875, 447.9, 448.0, 1e3, -1e6,
                                         2 ** -9, 2 ** -10])])
    want = torch.from_numpy(values).clamp(-448, 448).to(torch.float8_e4m3fn)
    got = torch.from_numpy(fp32_to_e4m3_bits(values)).view(torch.float8_e4m3fn)
    assert torch.equal(got.float(), want.float())
    assert got.float()[-4:-2].tolist() == [448.0, -448.0], "saturates like the GPU's satfinite"


@pytest.mark.skipif(has_gpu() or not triton_interpreted(), reason="checks the CPU interpreter")
def test_interpreted_store_of_fp32_into_bf16_rounds_to_nearest_even():
    import triton
    import triton.language as tl

    @triton.jit
    def store(src, dst, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)

    x = torch.tensor([9.921, 4.0 + 3 * 2 ** -8, 1.0 + 2 ** -8, -2.71828], dtype=torch.float32)
    out = torch.empty(4, dtype=torch.bfloat16)
    store[(1,)](x, out, 4, BLOCK=4)
    assert torch.equal(out, x.to(torch.bfloat16)), (out, x.to(torch.bfloat16))


@pytest.mark.skipif(has_gpu(), reason="OpenBLAS kernels only matter for the CPU interpreter")
@pytest.mark.parametrize("coretype", ["Haswell", "Zen"])
def test_batch_invariance_holds_whatever_blas_kernel_the_cpu_gets(tmp_path, coretype):
    """The CPUs where the interpreter's BLAS dot broke bitwise batch invariance of mhc_pre."""
    env = child_env(OPENBLAS_CORETYPE=coretype)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/test_mhc_batch_invariance.py",
                           "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "--impl", "triton",
                           "-k", "mhc_pre and H64"], cwd=os.fspath(_root()), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def _root():
    import pathlib

    return pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not triton_interpreted(), reason="the interpreter's speed-up applies only "
                    "where Triton kernels run under TRITON_INTERPRET=1 (a CPU host)")
@pytest.mark.parametrize("op,case", [
    ("mhc_pre", dict(tokens=33, hidden=200)),
    ("hc_head", dict(tokens=7, hidden=64)),
    ("top_k_per_row_prefill", dict(tokens=9, top_k=16, context=4096, seqs=2)),
], ids=["mhc_pre", "hc_head", "top_k_per_row_prefill"])
def test_interpreter_speed_up_changes_no_bit(op, case):
    """kernels.runtime.interpreter_speed (one language patch a grid, numpy reductions for declared
    combine functions) against the interpreter as Triton ships it: the same outputs, bitwise."""
    from harness.core.cases import Case
    from kernels.runtime.interpreter_speed import install, interpreter_as_shipped
    from harness.core.registry import records
    from harness.core.specs import get_spec

    assert install(), "the interpreter is not shaped as kernels.runtime.interpreter_speed expects"
    spec = get_spec(op)
    params = tuple((k, v) for k, v in case.items() if k not in ("tokens", "hidden"))
    inputs = spec.make_inputs(Case(op, tokens=case["tokens"], hidden=case.get("hidden", 0),
                                   device="cpu", params=params))
    run = records(op)["triton"].fn

    def outputs():
        fresh = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        out = run(*spec.arguments(fresh))
        return [t for t in (out if isinstance(out, tuple) else (out,)) if t is not None] + \
            [v for v in fresh.values() if isinstance(v, torch.Tensor)]

    fast = outputs()
    with interpreter_as_shipped():
        shipped = outputs()
    for a, b in zip(fast, shipped, strict=True):
        assert torch.equal(a.view(torch.uint8) if a.dtype.is_floating_point else a,
                           b.view(torch.uint8) if b.dtype.is_floating_point else b)


@pytest.mark.parametrize("hip, capability, interpreted, want", [
    (None, (9, 0), False, True),     # Hopper, compiled: one cvt.rn.satfinite.e4m3x2.f32
    (None, (8, 9), False, True),     # Ada
    (None, (8, 0), False, False),    # Ampere: no e4m3 conversion instruction
    ("6.4", (9, 4), False, False),   # ROCm (MI300 reads as 9.4): its conversion is not checked
    (None, (9, 0), True, False),     # the interpreter rounds ties away from zero
], ids=["sm90", "sm89", "sm80", "rocm", "interpreter"])
def test_e4m3_cast_trusted_only_where_it_rounds_to_nearest_even(hip, capability, interpreted, want,
                                                                 monkeypatch):
    """The fp8 quantisers skip their bit-level rounding only where Triton's cast is the GPU's
    round-to-nearest-even instruction (``kernels.runtime.triton_utils.e4m3_cast_rounds``); anywhere else a
    value on a rounding boundary would land on the other e4m3 neighbour."""
    from kernels.runtime import device as core_device
    from kernels.runtime import triton_utils

    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(core_device, "triton_interpreted", lambda: interpreted)
    triton_utils.e4m3_cast_rounds.cache_clear()
    try:
        assert triton_utils.e4m3_cast_rounds(torch.device("cuda", 0)) is want
        assert triton_utils.e4m3_cast_rounds(torch.device("cpu")) is False
    finally:
        triton_utils.e4m3_cast_rounds.cache_clear()
