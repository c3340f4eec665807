"""Small Triton helpers shared by the kernel families, and the host-side launch arithmetic."""

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from kernels.runtime import launch_cache

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # a Triton build without NVIDIA's extras: PDL is never asked for there
    gdc_launch_dependents = gdc_wait = None


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for launch shapes. ``triton.cdiv`` is a constexpr function in Triton
    3.6: called from the host it pays jit.py's constexpr unwrapping, microseconds a call, and a
    decode call computes a dozen launch shapes (docs/kernels/launches.md)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1), as ``triton.next_power_of_2`` without
    its host cost (see ``cdiv``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@dataclasses.dataclass(frozen=True, eq=False)
class Launch:
    """One kernel launch as a call's shapes fix it, built once per shape or call signature: the
    grid, the scalar arguments that follow the call's own arguments, and the constexprs and
    launch options. Calling it is ``kernel[grid](*args, *scalars, *after, **constexprs)``
    without rebuilding any of them (``JITFunction.run`` is what ``kernel[grid]`` calls). The
    kernels that call compiled are kept by what they were specialised on and launched again
    directly (``kernels.runtime.launch_cache``)."""
    kernel: object
    grid: tuple
    scalars: tuple
    constexprs: dict
    compiled: dict = dataclasses.field(default_factory=dict, repr=False)

    def __call__(self, *args, after: tuple = ()) -> None:
        values = (*args, *self.scalars, *after)
        key = launch_cache.call_key(args, after) if launch_cache.usable() else None
        if key is not None:
            found = self.compiled.get(key)
            if found is not None:
                return found(key[0], values)
        compiled = self.kernel.run(*values, grid=self.grid, warmup=False, **self.constexprs)
        if key is not None and launch_cache.specialisation_key(self.scalars) is not None:
            self.compiled[key] = launch_cache.CompiledLaunch(
                self.kernel, compiled, self.grid, len(values), self.constexprs)


def compiled_for_nvidia(device: torch.device, capability: tuple) -> bool:
    """Whether kernels on ``device`` are compiled by Triton's NVIDIA backend for a GPU of at least
    ``capability``: not the interpreter, not ROCm (whose MI300 reports capability 9.4)."""
    from kernels.runtime.device import triton_interpreted
    return (device.type == "cuda" and torch.version.hip is None and not triton_interpreted()
            and tuple(torch.cuda.get_device_capability(device)) >= capability)


@functools.lru_cache(maxsize=None)
def dependent_launch(device: torch.device, next_early: bool = False) -> dict:
    """Launch options of a kernel that begins with ``wait_for_previous_kernel`` and ends with
    ``release_next_kernel``: programmatic dependent launch (PDL) on NVIDIA GPUs from Hopper
    (SM90) on, compiled; off elsewhere (AMD, older GPUs, the interpreter, the CPU), where the
    same kernel is an ordinary launch. ``next_early``: release the next kernel at this one's
    start rather than its end (docs/kernels/mhc.md, "Dependent launches", says when it pays)."""
    if gdc_wait is None or not compiled_for_nvidia(device, (9, 0)):
        return {"PDL": False, "NEXT_EARLY": False}
    return {"PDL": True, "NEXT_EARLY": next_early, "launch_pdl": True}


@triton.jit
def wait_for_previous_kernel(PDL: tl.constexpr, NEXT_EARLY: tl.constexpr):
    """A kernel's first statement: under PDL, wait until the kernel before it in the stream has
    finished and its writes are visible, before this program reads or writes anything."""
    if PDL:
        gdc_wait()
        if NEXT_EARLY:
            gdc_launch_dependents()


@triton.jit
def release_next_kernel(PDL: tl.constexpr, NEXT_EARLY: tl.constexpr):
    """A kernel's last statement: under PDL, once every program of this kernel has got here (or
    to ``wait_for_previous_kernel`` with NEXT_EARLY), the next kernel's launch may begin; its
    programs then wait for this kernel to finish. Its launch and set-up overlap this kernel's
    run instead of following it; the arithmetic, and so every bit, is unchanged."""
    if PDL:
        if not NEXT_EARLY:
            gdc_launch_dependents()


@triton.jit
def to_bf16_rtne(x):
    """fp32 -> bf16 with round-to-nearest-even, identical on the GPU and in the interpreter.

    Triton 3.6's interpreter truncates fp32 -> bf16 casts (and its RTNE mode does not carry), which
    biases every bf16 output by up to 1 ulp; doing the rounding on the bits makes the final cast
    exact there and costs a few integer ops on the GPU.
    """
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def dot_bf16(a, b, acc, INTERPRETED: tl.constexpr):
    """``acc + a @ b`` for bf16 operands with fp32 accumulation.

    On the GPU this is one bf16 tensor-core MMA. Under the interpreter it is computed without
    ``tl.dot``, for two reasons: Triton 3.6's interpreter multiplies bf16 operands as their raw
    uint16 bit patterns, and its ``tl.dot`` is numpy's BLAS ``matmul``, whose summation order
    depends on the CPU's BLAS kernel (OpenBLAS's Haswell and Zen sgemm give a row different bits
    depending on its place in the tile, so bitwise batch invariance failed on those CPUs only).
    Here the products are exact in fp32 (bf16 x bf16) and summed in order along K, so a row's bits
    depend on nothing but the row, on every CPU.
    """
    if INTERPRETED:
        prod = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]
        return acc + tl.sum(prod, axis=1)
    return tl.dot(a, b, acc)


@triton.jit
def div_rn_by_reciprocal(x, d, d_rcp, INTERPRETED: tl.constexpr):
    """``x / d`` rounded to nearest, as ``tl.math.div_rn`` gives it, from ``d_rcp``, the
    correctly rounded ``1 / d``: ``q = x * d_rcp`` is within an ulp, ``x - q * d`` is exact in one
    FMA, and one more FMA corrects ``q`` (Markstein's theorem; exact for normal results, which a
    quotient on the e4m3 grid's range always is). Two multiplies and two FMAs instead of a
    division per element: the K-cache write was held by its divisions. Bitwise against div_rn on
    the GPU: ``suites/test_indexer_quant_exact.py``. The interpreter's FMA rounds twice, so there
    the division is div_rn itself."""
    if INTERPRETED:
        return tl.math.div_rn(x, d)
    q = x * d_rcp
    return tl.math.fma(tl.math.fma(-q, d, x), d_rcp, q)


@functools.lru_cache(maxsize=None)
def e4m3_cast_rounds(device: torch.device) -> bool:
    """Whether Triton's fp32 -> float8e4nv cast on ``device`` is one correctly rounded
    instruction: compiled for NVIDIA from SM89 (``cvt.rn.satfinite.e4m3x2.f32``;
    ``suites/test_fp8_division_exact.py`` checks torch's byte for every fp32 in [-448, 448]).
    Elsewhere a kernel rounds on the bits first (``round_to_e4m3``): the interpreter rounds ties
    away from zero, and other targets' conversions are not checked here."""
    return compiled_for_nvidia(device, (8, 9))


@triton.jit
def round_to_e4m3(x):
    """fp32 -> the nearest float8 e4m3fn value (ties to even), still as fp32, for |x| <= 448.

    The interpreter's fp8 cast rounds ties away from zero (1.0625 -> 1.125); this rounds on the
    exponent and an exact power-of-two rescale instead, identical on GPU and CPU, so the final
    ``.to(tl.float8e4nv)`` only ever sees representable values.
    """
    bits = x.to(tl.int32, bitcast=True)
    exp = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    quantum = ((exp - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv_quantum = ((3 - exp + 127) << 23).to(tl.float32, bitcast=True)
    y = tl.abs(x) * inv_quantum
    r = (y + 12582912.0) - 12582912.0
    return tl.where(x < 0, -r, r) * quantum


@triton.jit
def pow2_ceil(x):
    """2**ceil(log2(x)) for positive normal fp32 ``x``, exactly."""
    bits = x.to(tl.int32, bitcast=True)
    exp = (bits >> 23) & 0xFF
    exp = tl.where((bits & 0x7FFFFF) != 0, exp + 1, exp)
    return (exp << 23).to(tl.float32, bitcast=True)


@triton.jit
def error_word(code, row):
    """The device side of ``kernels.runtime.deferred.pack``: ``code << 24 | row`` (row clamped to
    24 bits), so ``atomic_max`` keeps the worst code, then the last row."""
    return (code.to(tl.int32) << 24) | tl.minimum(row, 0xFFFFFF).to(tl.int32)
