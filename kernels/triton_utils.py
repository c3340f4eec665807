"""Small Triton helpers shared by the kernel families."""

import triton
import triton.language as tl


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
    """The device side of ``harness.core.deferred.pack``: ``code << 24 | row`` (row clamped to
    24 bits), so ``atomic_max`` keeps the worst code, then the last row."""
    return (code.to(tl.int32) << 24) | tl.minimum(row, 0xFFFFFF).to(tl.int32)
