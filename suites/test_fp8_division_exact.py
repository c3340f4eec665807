"""The fp8 quantisers divide by a row's scale through its reciprocal and two FMAs
(``kernels.runtime.triton_utils.div_rn_by_reciprocal``); a quotient one ulp off would move a value across
an e4m3 rounding boundary and change the K cache. Here the GPU path is compared bitwise with
``div_rn`` on the quotients where that matters: random rows, values placed on and one to three
ulps around every e4m3 midpoint, and a wide sweep of exponents. The interpreter computes div_rn
itself (its FMA rounds twice), so this runs on a GPU only.

The quotient is then rounded to e4m3 by the GPU's cast where it rounds to nearest even
(``e4m3_cast_rounds``), else on the bits: every fp32 from -448 to 448 goes through that step
(``_to_e4m3`` with a scale of 1) and must give torch's byte."""

import pytest
import torch
import triton
import triton.language as tl

from kernels.sparse_indexer.compare import NEG_ZERO_FP8
from kernels.sparse_indexer.triton import _to_e4m3
from kernels.runtime.triton_utils import div_rn_by_reciprocal, e4m3_cast_rounds

pytestmark = [pytest.mark.gpu, pytest.mark.implementation("triton")]

BLOCK = 1024


@triton.jit
def _both_divisions(x_ptr, d_ptr, exact_ptr, fast_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    x = tl.load(x_ptr + i, mask=ok, other=1.0)
    d = tl.load(d_ptr + i, mask=ok, other=1.0)
    tl.store(exact_ptr + i, tl.math.div_rn(x, d), mask=ok)
    tl.store(fast_ptr + i, div_rn_by_reciprocal(x, d, tl.math.div_rn(1.0, d), False), mask=ok)


def _e4m3_midpoints() -> torch.Tensor:
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[torch.isfinite(grid) & (grid >= 0)].unique().sort().values
    mids = (grid[1:] + grid[:-1]) / 2
    return torch.cat([grid, mids, -grid, -mids])


def _around(q: torch.Tensor, ulps: int = 3) -> torch.Tensor:
    bits = q.view(torch.int32)
    return torch.cat([(bits + k).view(torch.float32) for k in range(-ulps, ulps + 1)])


def _cases(device) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator(device="cpu").manual_seed(0)
    rows = torch.randn(65536, 128, generator=g).to(torch.bfloat16).float()
    rows[::7] *= torch.rand(rows[::7].shape[0], 1, generator=g) * 1e3
    scale = rows.abs().amax(1, keepdim=True).clamp_min(1e-4) / 448.0
    random_rows = (rows, scale.expand_as(rows).contiguous())

    scales = torch.rand(4096, generator=g) * 2.0 ** torch.randint(-20, 20, (4096,), generator=g)
    targets = _around(_e4m3_midpoints())
    boundary_x = (targets[None, :] * scales[:, None]).flatten()
    boundary = (boundary_x, scales[:, None].expand(-1, targets.numel()).flatten().contiguous())
    boundary_nudged = (_around(boundary[0], 2), boundary[1].repeat(5))

    mant = torch.rand(1 << 22, generator=g) + 1.0
    exps = torch.randint(-60, 60, (1 << 22,), generator=g).float()
    wide_x = (mant * 2.0 ** exps) * torch.where(torch.rand(1 << 22, generator=g) < 0.5, -1.0, 1.0)
    wide_d = (torch.rand(1 << 22, generator=g) + 1.0) * 2.0 ** torch.randint(-60, 60, (1 << 22,),
                                                                              generator=g).float()
    cases = {"random K rows over their scale": random_rows,
             "e4m3 grid points and midpoints (+-3 ulps) times 4096 scales": boundary,
             "the same products nudged +-2 ulps": boundary_nudged,
             "4M quotients over 2^-120..2^120": (wide_x, wide_d)}
    return {name: (x.flatten().to(device), d.flatten().to(device)) for name, (x, d) in
            cases.items()}


@pytest.mark.parametrize("case", ["random K rows over their scale",
                                  "e4m3 grid points and midpoints (+-3 ulps) times 4096 scales",
                                  "the same products nudged +-2 ulps",
                                  "4M quotients over 2^-120..2^120"])
def test_division_by_reciprocal_is_div_rn_bit_for_bit(case):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the interpreter runs div_rn itself, there is nothing to compare")
    x, d = _cases("cuda")[case]
    exact, fast = torch.empty_like(x), torch.empty_like(x)
    _both_divisions[(triton.cdiv(x.numel(), BLOCK),)](x, d, exact, fast, x.numel(), BLOCK=BLOCK)
    normal = exact.abs() >= torch.finfo(torch.float32).tiny
    assert normal.float().mean() > 0.99, "the case should be normal quotients"
    differ = (exact.view(torch.int32) != fast.view(torch.int32)) & normal
    first = differ.nonzero()[:5].flatten().tolist()
    assert not differ.any(), (
        f"{int(differ.sum())} of {x.numel()} quotients differ from div_rn; first at {first}: "
        f"x={x[first].tolist()} d={d[first].tolist()} div_rn={exact[first].tolist()} "
        f"by reciprocal={fast[first].tolist()}")


@triton.jit
def _rounded_by_the_quantisers(x_ptr, out_ptr, n, CAST_E4M3: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    tl.store(out_ptr + i, _to_e4m3(tl.load(x_ptr + i, mask=ok, other=0.0), 1.0, False, CAST_E4M3),
             mask=ok)


E4M3_MAX_BITS = 0x43E00000
"""448.0 as fp32 bits: the quantisers clamp there, so every fp32 up to it is an input."""


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
def test_e4m3_rounding_is_torchs_for_every_fp32_up_to_448(sign):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the interpreter rounds on the bits, as the CPU suites check")
    cast = e4m3_cast_rounds(torch.device("cuda"))
    chunk, bad, first = 1 << 27, 0, []
    for start in range(0, E4M3_MAX_BITS + 1, chunk):
        x = torch.arange(start, min(start + chunk, E4M3_MAX_BITS + 1), dtype=torch.int32,
                         device="cuda").view(torch.float32) * sign
        ours = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device="cuda")
        _rounded_by_the_quantisers[(triton.cdiv(x.numel(), 4096),)](x, ours, x.numel(),
                                                                   CAST_E4M3=cast, BLOCK=4096)
        a, b = ours.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8)
        differ = (a.masked_fill(a == NEG_ZERO_FP8, 0) != b.masked_fill(b == NEG_ZERO_FP8, 0))
        bad += int(differ.sum())
        first += [(x[i].item(), int(a[i]), int(b[i])) for i in differ.nonzero()[:3].flatten()]
    assert bad == 0, (f"{bad} fp32 values round to another e4m3 byte than torch's (cast by the GPU: "
                      f"{cast}); first (x, ours, torch): {first[:5]}")
