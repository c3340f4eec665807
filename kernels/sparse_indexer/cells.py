"""The input space and fuzz spaces of the sparse-attention indexer's specs: the cells the ops
name (value distributions, sizes, ue8m0 scales, head dims, K-cache block sizes: which are judged
and why, docs/spec/indexer_block_sizes.md), what ``harness fuzz`` may draw for a case parameter,
and the call sequences the specs run.
"""

from __future__ import annotations

from harness.core import call_sequences
from harness.core.fuzz_space import Choice, Sizes, context_holds_drafts
from harness.core.input_space import Cell, at_least, between
from kernels.sparse_indexer.inputs import BLOCK_SIZE, DISTRIBUTIONS, HEAD_DIM


VALUE_CELLS = tuple(Cell("values", name, what, {"data": name})
                    for name, (_, what) in DISTRIBUTIONS.items())
QUANT_SIZES = (
    Cell("sizes", "T = 1..4", "single tokens (decode)", {"tokens": between(1, 4)}),
    Cell("sizes", "T = 5..4096", "partial and whole blocks of 64 slots", {"tokens": between(5, 4096)}),
    Cell("sizes", "T > 4096", "prefill chunks (4099, 65536)", {"tokens": at_least(4097)}),
)
UE8M0 = Cell("metadata", "ue8m0 scales", "scales rounded up to a power of two",
             {"scale_fmt": "ue8m0"})
NIGHTLY_PROFILES = ("nightly", "full")
OUTPUT_PAST_2_31_ELSEWHERE = ("an output of more than 2^31 elements (8.6 GB fp32, twice with "
                              "the copy judged) needs a GPU to itself: nightly and full only")
HEAD_DIMS = (32, 64, HEAD_DIM)
"""Head dims judged: vLLM 0.33.0's DeepseekV32IndexerBackend declares 32, 64 and 128."""
HEAD_DIM_CELLS = (
    Cell("metadata", "head_dim 32", "the smallest indexer head vLLM declares: one fp8 MMA "
         "deep, 36 bytes a slot", {"head_dim": 32}),
    Cell("metadata", "head_dim 64", "a narrower indexer head than DeepSeek-V3.2's 128: every "
         "offset that hard-codes 128 values (or 132 bytes a slot) lands elsewhere",
         {"head_dim": 64}),
)
"""Head dims other than 128, on every op; an implementation that does not take one declares it
(``Unsupported``) and refuses it with a clear error (the shipped kernels: triton.HEAD_DIMS)."""
BLOCK_SIZES = (1, 16, 48, 64, 128)
"""K-cache block sizes judged (docs/spec/indexer_block_sizes.md has why): the ones vLLM 0.33.0's
indexer backends accept (DeepSeek-V3.2: 64 off ROCm, 1 or a multiple of 16 on ROCm; V4.1: 64 or
128). 64 is the contract's (DeepGEMM's); 1 ROCm's per-token cache, AITER's paged Triton
reader's, whose block bases are not 16-byte aligned; 16 one SHUFFLE tile; 48 a multiple of 16
that is not a power of two; 128 a block of two 64-key tiles."""
BLOCK_SIZE_CELLS = (
    Cell("metadata", "block size 1", "ROCm's per-token K cache: each slot head_dim fp8 values, "
         "then its 4 scale bytes; block bases at (head_dim + 4) * b bytes, not 16-byte aligned",
         {"block_size": 1}),
    Cell("metadata", "block size 16", "blocks of 16 slots: one SHUFFLE tile, fewer slots than a "
         "64-key MMA tile", {"block_size": 16}),
    Cell("metadata", "block size 48", "blocks of 48 slots: a multiple of 16 (ROCm accepts any) "
         "that is not a power of two, so no power-of-two tile covers a block", {"block_size": 48}),
    Cell("metadata", "block size 64", "the contract's (DeepGEMM's) blocks of 64 slots",
         {"block_size": 64}),
    Cell("metadata", "block size 128", "blocks of 128 slots (vLLM's DeepSeek-V4.1 indexer off "
         "Hopper): two 64-key tiles a block", {"block_size": 128}),
)


FUZZ_TOKENS = Sizes(1, 65536, edges=(1, 2, 3, 4, 5, 63, 64, 65, 127, 129, 4097))
FUZZ_DATA = Choice(tuple(DISTRIBUTIONS))
FUZZ_HEADS = Sizes(1, 64, edges=(1, 4, 64))
FUZZ_CONTEXT = Sizes(1, 131072, edges=(1, 63, 64, 65, 128, 4096, 4097, 8192, 65536, 131072))
FUZZ_BLOCK_SIZE = Choice((BLOCK_SIZE,) + tuple(b for b in BLOCK_SIZES if b != BLOCK_SIZE))
FUZZ_HEAD_DIM = Choice(tuple(sorted(HEAD_DIMS, key=lambda d: d != HEAD_DIM)))
"""The contract's block size and DeepSeek-V3.2's head dim first: the values a shrunk case keeps."""


ONE = call_sequences.ONE
CALLS = Choice((ONE,) + call_sequences.names())
ORDERS = ("short-first", "long-first")
PADDED_ZERO = ("the second call's K and Q tokens every fourth one zero, as a graph batch's "
               "padding tokens")
LENGTHS = ("random", "long", "short")
"""``lengths`` of the logits ops: ``random`` (the batch layouts), ``long`` (every context at
least half the budget), ``short`` (every context at most one block); with long or short the
key arrays keep one size whatever the lengths, as a run of calls needs."""


def _logits_x_heads(values: dict) -> int:
    """The work of a logits case: every logit sums ``heads`` dot products."""
    return values["tokens"] * values["context"] * values["heads"]


def _decode_batch(values: dict) -> dict:
    """No more empty requests than requests; every context holds its drafts."""
    values = context_holds_drafts(values)
    return {**values, "empty_requests": min(values["empty_requests"], values["batch"])}
