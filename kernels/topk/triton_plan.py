"""Launch plans of the Triton top-k kernels, and the host arithmetic a call's shape and plan fix:
the coarse bin's width, columns per program, programs per long row, and the scratch layout that
every launch of a call shares.

Kept apart from the kernels (``triton_coarse``, ``triton_finish``) and the launch
(``kernels.topk.triton``) so that a plan reads, and is built and swept (``bench_topk.py``, the
config-invariance detector over PLANS), as plain Python.
"""

from __future__ import annotations

import dataclasses
import functools

from kernels.runtime.triton_utils import cdiv, next_power_of_2


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """The launch constants of one call. The output depends only on the row, whatever the plan
    (the kernels' claim; the config-invariance detector checks it over PLANS): ``coarse_bits``
    None picks by shape (``coarse_bits()``); long rows get ``finish_slices()`` programs each,
    from ``finish_programs`` and ``slice_min``. ``split_finish`` False finishes short rows in
    the filter launch instead of their own: one launch fewer, for eager callers bound by the
    host's cost per launch, but slower on the GPU: split, a lean filter kernel is not held back
    by the finishing select's registers, and the finish gets its own warps.
    ``radix``: bits per digit of the radix select (digits sit at multiples of it, so where it
    does not divide 32 the top digit is narrower). 5 gives 32 bins, one per lane in
    ``tl.histogram``'s ballot scheme, and fewer passes than 4: the fastest radix on every shape
    of ``bench_topk.py``. ``row_bits``: the histogram pass also folds which bits of every row's
    values differ from the row's first value (one LOP3 an element), so that a row
    held whole by its threshold bin (a tie-heavy row) gets its key range there and the filter
    launch has nothing to read for it; False leaves that pass to the filter. ``filter_regs``:
    registers per thread of the filter kernel (``maxnreg``; None or 0 leaves it to the compiler).
    64 holds twice the programs per SM, which makes random rows faster; the same cap on the
    long-row finish makes tie rows slower (docs/kernels/topk.md has the measurements of
    ``split_finish``, ``radix`` and ``filter_regs``)."""
    coarse_bits: int | None = None
    hist_tile: int = 2048
    hist_warps: int = 8
    filter_tile: int = 1024
    filter_warps: int = 4
    finish_tile: int = 1024
    small_tile: int = 1024
    reg_tile: int = 4096
    radix: int = 5
    split_finish: bool = True
    finish_warps: int = 8
    slot_block: int = 1024
    scan_splits: int = 64
    max_chunk: int = 16384
    target_programs: int = 1024
    candidate_budget: int = 1 << 23
    finish_programs: int = 512
    slice_min: int = 2048
    long_warps: int = 4
    row_bits: bool = True
    filter_regs: int | None = 64


DEFAULT_PLAN = LaunchPlan()
PLANS = (
    DEFAULT_PLAN,
    LaunchPlan(coarse_bits=8, small_tile=16, radix=4),
    LaunchPlan(coarse_bits=6, split_finish=False, small_tile=16, reg_tile=32, finish_tile=64,
               row_bits=False),
    LaunchPlan(candidate_budget=1, finish_tile=256, reg_tile=512,
               slice_min=512),
)
"""Plans that route small calls through every finishing path (registers with a small or a full
tile, the long-row stages on the candidate buffer with one program a row, and on the row itself
when the buffer overflows with several), in the filter launch and in their own, with a tie row's
key range found in the histogram pass or the filter: the knob ``plan`` of the registered ops."""


def coarse_bits(top_k: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Bits of the coarse bin: 64 bins (one per octave) when the k-th value sits in the sparse
    tail, 128 (half octaves) when k is a large share of the row, where a one-octave bin would
    hold too many candidates. No more bins than that, because tl.histogram's cost grows with the
    bin count (docs/kernels/topk.md has the measurements)."""
    if plan.coarse_bits is not None:
        return plan.coarse_bits
    return 7 if top_k * 16 > n_cols else 6


def chunk_size(num_rows: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Columns per program: enough programs to fill the GPU, at most ``max_chunk`` each."""
    want = cdiv(num_rows * max(n_cols, 1), plan.target_programs)
    return min(plan.max_chunk, max(plan.hist_tile, plan.filter_tile,
                                   next_power_of_2(want)))


MAX_SLICES = 64


def finish_slices(num_rows: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Programs per row in each stage of a long row's finish: about ``finish_programs`` in all,
    none with fewer than ``slice_min`` columns' worth of candidates, at most MAX_SLICES."""
    return max(1, min(MAX_SLICES, plan.finish_programs // num_rows, n_cols // plan.slice_min))


@functools.lru_cache(maxsize=1024)
def _layout(num_rows: int, n_cols: int, top_k: int, plan: LaunchPlan) -> tuple:
    """The launch geometry and the scratch layout of ``launch`` (see its docstring), computed
    once per shape and plan."""
    chunk = chunk_size(num_rows, n_cols, plan)
    n_chunks = max(1, cdiv(n_cols, chunk))
    cap = max(1, min(n_cols, plan.candidate_budget // num_rows))
    bits = coarse_bits(top_k, n_cols, plan)
    nbins = 1 << bits
    levels = cdiv(32, plan.radix)
    slices = finish_slices(num_rows, n_cols, plan)
    info_at = num_rows * n_chunks * nbins
    offs_at = info_at + num_rows * 4
    state_at = offs_at + num_rows * n_chunks * 2
    counts_at = state_at + num_rows * 4
    cand_at = counts_at + num_rows * slices * (2 + levels * (1 << plan.radix))
    fin_at = 2 * num_rows + num_rows * nbins
    fin_words = 4 + levels + 3 + levels * (1 << plan.radix)
    bits_at = fin_at + num_rows * fin_words
    return (chunk, n_chunks, cap, bits, slices, info_at, offs_at, state_at, counts_at, cand_at,
            cand_at + 2 * num_rows * cap, fin_at, fin_words, bits_at)


def _regs(cap: int | None) -> dict:
    """The launch option capping a kernel's registers per thread, when the plan sets one."""
    return {"maxnreg": cap} if cap else {}
