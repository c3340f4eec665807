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

    Triton 3.6's interpreter multiplies bf16 operands as their raw uint16 bit patterns, so there
    the operands go through fp32 (exact: every bf16 value is an fp32 value, and the products are
    the same); on the GPU this is one bf16 tensor-core MMA.
    """
    if INTERPRETED:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)
