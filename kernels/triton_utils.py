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
