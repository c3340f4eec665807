"""Inputs of the sparse-attention indexer's specs: K and Q activations drawn as the case
parameter ``data`` says (``DISTRIBUTIONS``), quantised Q with its folded head weights, K caches
full of garbage bytes (fp8 NaN patterns included, which a correct kernel never lets into a
visible logit), and the windows of a batch whose rows mostly see no key (``sparse_rows``).

The default shapes are DeepSeek-V3.2's indexer's: head_dim 128, 64 heads, blocks of 64 slots.
"""

from __future__ import annotations

import torch

from harness.core.cases import Case, generator
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.validate import SCALE_BYTES


HEAD_DIM = 128
HEADS = 64
BLOCK_SIZE = 64
TIES = (448.0, 1.0625, 1.1875, 17.0, -1.0625, 0.001953125, 0.0029296875, 304.0, -0.0048828125)
"""A row whose scale is exactly 1 (amax 448): values halfway between two e4m3 neighbours, the
smallest subnormal and a subnormal tie, so round-half-even is checked, not just rounding."""


def _activations(case: Case, salt: int, *shape: int) -> torch.Tensor:
    """K or Q activations [..., HEAD_DIM] in bf16, drawn as the case's ``data`` says."""
    g = generator(case, salt, case.device)
    x = torch.randn(*shape, generator=g, device=case.device)
    x = x * torch.exp(torch.randn(*shape[:-1], 1, generator=g, device=case.device))
    x[..., :3] *= 8.0
    data = case.param("data", "random")
    if data not in DISTRIBUTIONS:
        raise ValueError(f"{case.id}: unknown indexer data {data!r}; choose one of "
                         f"{', '.join(DISTRIBUTIONS)}")
    return DISTRIBUTIONS[data][0](x, g).to(torch.bfloat16)


def _zero_rows(x: torch.Tensor, g) -> torch.Tensor:
    """Every fourth token all zero (from the second): amax 0, so the scale is the floor's."""
    x[1::4] = 0
    return x


def _fp8_max_rows(x: torch.Tensor, g) -> torch.Tensor:
    """Every row's amax exactly 448 * 2^e (e in [-6, 6]) and a quarter of its values at +-amax:
    power-of-two scales are exact, so those values land on the e4m3 maximum (code 0x7E)."""
    rows = x.reshape(-1, x.shape[-1])
    e = torch.randint(-6, 7, (rows.shape[0], 1), generator=g, device=x.device).float()
    top = 448.0 * torch.exp2(e)
    rows = rows / rows.abs().amax(-1, keepdim=True).clamp_min(1e-30) * top * 0.9
    at_max = torch.rand(rows.shape, generator=g, device=x.device) < 0.25
    at_max[:, 0] = True
    rows = torch.where(at_max, torch.sign(rows).clamp_min(0) * 2 - 1, rows / top) * top
    return rows.reshape(x.shape)


DISTRIBUTIONS = {
    "random": (lambda x, g: x, "N(0, 1) activations, per-token scales over ~e^{+-1}, three "
               "outlier channels"),
    "zero-tokens": (_zero_rows, "all-zero K and Q tokens (padding): the 1e-4 amax floor keeps "
                    "the scale finite"),
    "fp8-max": (_fp8_max_rows, "rows whose amax is exactly 448 * 2^e: power-of-two scales are "
                "exact and many values land on the e4m3 maximum"),
}
"""How K and Q activations are drawn (``data``): name -> (transform, what it stands for)."""


def quantized_q(case: Case, rows: int, heads: int, head_dim: int = HEAD_DIM):
    q = _activations(case, 6, rows, heads, head_dim)
    w = torch.randn(rows, heads, generator=generator(case, 7, case.device), device=case.device)
    values, scale = ref.quantize_rows(q, "ue8m0")
    return values, w * scale * (head_dim ** -0.5 * heads ** -0.5)


BLOCK_BYTES = BLOCK_SIZE * (HEAD_DIM + SCALE_BYTES)


def far_block(block_size: int, head_dim: int) -> int:
    """The first block whose bytes lie past 2^31 from the cache's start (``far_blocks``)."""
    return 2 ** 31 // (block_size * (head_dim + SCALE_BYTES)) + 1


def _garbage_cache(case: Case, num_blocks: int, block_size: int, head_dim: int) -> torch.Tensor:
    g = generator(case, 9, case.device)
    return torch.randint(0, 256, (num_blocks, block_size, 1, head_dim + SCALE_BYTES),
                         generator=g, device=case.device, dtype=torch.uint8)


def _sparse_windows(rows: int, context: int):
    """(ks, ke, keys) of one causal sequence of ``rows`` queries after ``context`` cached keys,
    in which only the first and last two queries see keys (the rest: empty windows)."""
    ks = torch.zeros(rows, dtype=torch.int32)
    ke = torch.zeros(rows, dtype=torch.int32)
    live = torch.tensor(sorted({0, 1, rows - 2, rows - 1} & set(range(rows))), dtype=torch.long)
    ke[live] = (context + live + 1).int()
    return ks, ke, context + rows
