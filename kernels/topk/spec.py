"""Op specs of top-k per row.

Inputs model the indexer: a ragged prefill batch (each query row sees its own sequence's cached
context plus its causal prefix: row_starts > 0, lengths from 1 to beyond top_k) or a decode batch
(``next_n`` draft rows per request, causal per draft). Case params:

- ``tokens``: the logits rows (query rows); a decode sweep may give ``batch`` requests instead
  (rows = ``batch`` x ``next_n``, set by the test);
- ``top_k``; ``context``: a decode row's maximum context (the logits' columns), or the
  cached-context budget shared by the prefill sequences (each gets up to context // seqs keys
  before its own tokens);
- ``seqs`` prefill sequences; ``next_n`` decode drafts per request; ``pad`` graph-padding rows
  the indices buffer has beyond num_rows (they must stay untouched); ``padded_requests``: the
  last requests of a decode batch keep seq_len 1 < next_n, as a draft-extend graph's padding
  does (SGLang #30378): rows whose causal end is <= 0, all -1;
- ``data``: ``random``, ``ties`` (top 22 bits shared, as vLLM's 10LSBits generator),
  ``negative-ties`` (the same values negated: their order keys are the complemented bits) or
  ``near-constant`` (one value, and one in a hundred elements one step above it: a radix select
  meets the same digit in nearly every element), ``near-equal`` (distinct values dense in
  [1.0, 1.245): thousands share the k-th value's leading bits, vLLM #51782), ``flood`` (top_k / 2
  values above a threshold value that every other element equals: > 1024 ties at k = 2048,
  SGLang #30645), ``zeros`` (+0.0 and -0.0 only), ``tiny`` (subnormal magnitudes), and any of
  them with ``-nan`` (NaN of every bit pattern and +-inf inside the windows, a row with fewer
  non-NaN values than top_k: vLLM #49896); DISTRIBUTIONS below, one entry each;
- ``seq_lens_2d`` (decode): ``seq_lens`` given as [batch, next_n], each row's own length;
- ``full_rows`` (decode): every request's length is ``context``, the logits' whole width;
- ``clean``: -inf outside each window, else the tails hold values *larger* than any in-window
  logit, so a kernel that reads past a window's end selects them and is caught;
- ``strided``: logits are a column slice of a wider buffer (stride0 > N);
- ``lengths``: ``random`` (the layouts above), or every window ``long``, ``short`` (at most
  top_k keys) or ``straddle`` (rows on both sides of top_k, 4096 and 32768 columns in every
  order: ``kernels/topk/batches.py``), each window at a random start of ``context`` columns
  in prefill;
- ``calls``: a run of calls with the same shapes (harness.core.call_sequences): short and long
  contexts in turn, decode requests turned into padding in the short calls.

The op writes into ``indices``, a view inside a sentinel-filled guard buffer: every run gets a
fresh copy, and cells outside ``indices[:num_rows, :top_k]`` must still hold the sentinel.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from kernels.topk.batches import LENGTHS, decode_seq_lens, ragged_prefill, window_lengths
from harness.core import call_sequences
from harness.core.call_sequences import Step
from harness.core.cases import Case, generator
from harness.core.fuzz_space import Choice, FuzzSpace, Sizes, context_holds_drafts, flag
from harness.core.input_space import (GPU_PROFILES, Cell, InputSpace, at_least, between,
                                      ends_with, one_of_base)
from harness.core.specs import Comparison, OpSpec, contract, register_spec
from kernels.topk.compare import compare_topk, fresh_copy, guard_violations, guarded_buffer
from kernels.topk.torch import select_into
from kernels.topk.validate import decode_row_ends


def _logits(spec: OpSpec, case: Case, rows: int, n: int, starts, ends) -> torch.Tensor:
    """Generated on the case's device: decode cases reach 8192 x 131072 logits."""
    dev = case.device
    g = generator(case, 1, dev)
    width = n + (17 if spec.param(case, "strided") else 0)
    data = spec.param(case, "data")
    base = "random" if data == "nan" else data.removesuffix("-nan")
    make = DISTRIBUTIONS.get(base)
    if make is None:
        raise ValueError(f"{case.id}: unknown top-k data {data!r}; choose one of "
                         f"{', '.join(DISTRIBUTIONS)} (or any of them with -nan)")
    buf = make.values(rows, width, spec.param(case, "top_k"), g, dev)
    if data.endswith("nan"):
        buf = _sprinkle_nan(buf, g)
    cols = torch.arange(width, device=dev)
    outside = ((cols[None, :] < starts.to(dev).long()[:, None])
               | (cols[None, :] >= ends.to(dev).long()[:, None]))
    buf.masked_fill_(outside, float("-inf") if spec.param(case, "clean") else 1e4)
    return buf[:, :n]


@dataclasses.dataclass(frozen=True)
class Distribution:
    """A way of filling logits rows (``values(rows, width, top_k, generator, device)``), what
    it is and the bug it stands for: one entry of DISTRIBUTIONS and of the ops' input space."""
    values: Callable[..., torch.Tensor]
    what: str


def _random(rows, width, top_k, g, dev):
    return torch.randn(rows, width, generator=g, device=dev)


def _ties(rows, width, top_k, g, dev, sign=1.0):
    bits = 0x3F900000 | torch.randint(0, 1024, (rows, width), generator=g, dtype=torch.int32,
                                      device=dev)
    return sign * bits.view(torch.float32)


def _near_constant(rows, width, top_k, g, dev):
    above = torch.rand(rows, width, generator=g, device=dev) < 0.01
    return (0x3F900000 | above.int()).view(torch.float32)


def _near_equal(rows, width, top_k, g, dev):
    return 1.0 + 0.245 * torch.rand(rows, width, generator=g, device=dev)


def _tie_flood(rows, width, top_k, g, dev) -> torch.Tensor:
    """Per row: top_k / 2 distinct values above 0.5, then every other value 0.5 itself (4096+
    of them in rows of 4096+ columns), a few below: the threshold value is flooded with ties,
    far more than any on-chip stash holds (SGLang #30645: > 1024 ties at k = 2048)."""
    buf = torch.full((rows, width), 0.5, device=dev)
    order = torch.rand(rows, width, generator=g, device=dev).argsort(dim=1)
    above = order < top_k // 2
    buf = torch.where(above, 1.0 + torch.rand(rows, width, generator=g, device=dev), buf)
    return torch.where(order >= width - 8, -1.0, buf)


def _zeros(rows, width, top_k, g, dev):
    """+0.0 and -0.0 only: every value ties, and a zero is a value, never "empty"."""
    sign = torch.rand(rows, width, generator=g, device=dev) < 0.5
    return torch.where(sign, -0.0, 0.0) * torch.ones(rows, width, device=dev)


def _tiny(rows, width, top_k, g, dev):
    """Distinct magnitudes around the fp32 subnormal range (1e-45 .. 1e-37): a kernel that
    flushes subnormals to zero sees ties where there are none."""
    return torch.randn(rows, width, generator=g, device=dev) * 1e-39


DISTRIBUTIONS: dict[str, Distribution] = {
    "random": Distribution(_random, "N(0, 1) logits"),
    "ties": Distribution(_ties, "values sharing their top 22 bits (vLLM's 10LSBits generator): "
                         "many exact ties"),
    "negative-ties": Distribution(lambda *a: _ties(*a, sign=-1.0), "the ties negated: their "
                                  "order keys are the complemented bits"),
    "near-constant": Distribution(_near_constant, "one value, one in a hundred one step above: "
                                  "a radix select meets the same digit in nearly every element"),
    "near-equal": Distribution(_near_equal, "distinct values dense in [1.0, 1.245): thousands "
                               "share the k-th value's leading bits (vLLM #51782, SGLang #36807)"),
    "flood": Distribution(_tie_flood, "> 4096 values equal to the k-th at k = 2048 (SGLang "
                          "#30645: -1 left inside the valid prefix)"),
    "zeros": Distribution(_zeros, "all-zero rows of +0.0 and -0.0: a zero logit is a value, "
                          "not an empty slot"),
    "tiny": Distribution(_tiny, "subnormal and tiny-normal magnitudes: flushing subnormals "
                         "(FTZ) makes distinct values tie"),
}
"""The value distributions of top-k rows, by the ``data`` name a case gives (any of them with
``-nan`` adds NaN and +-inf inside the windows)."""


NAN_PATTERNS = (0x7FC00000, -0x400000, 0x7F800001, -1)
"""Quiet NaN of both signs, a signalling NaN, and the all-ones pattern (int32 views)."""


def _sprinkle_nan(buf: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """10% NaN of every bit pattern, 2% each of +inf and -inf, and the first row 95% NaN (fewer
    non-NaN values than top_k: the rest of its slots must be -1)."""
    u = torch.rand(buf.shape, generator=g, device=buf.device)
    nan = u < 0.10
    nan[0] = u[0] < 0.95
    bits = buf.clone().view(torch.int32)
    which = torch.randint(0, len(NAN_PATTERNS), buf.shape, generator=g, device=buf.device)
    patterns = torch.tensor(NAN_PATTERNS, dtype=torch.int32, device=buf.device)[which]
    bits = torch.where(nan, patterns, bits)
    out = bits.view(torch.float32)
    out = torch.where((u >= 0.10) & (u < 0.12), float("inf"), out)
    return torch.where((u >= 0.12) & (u < 0.14), float("-inf"), out)


INTERPRETED_ROWS = ("the Triton interpreter takes minutes on such rows: the CPU profile runs them "
                    "through torch paths and user modules, Triton kernels on a GPU")


def _value_cells() -> tuple[Cell, ...]:
    cells = [Cell("values", name, d.what, {"data": one_of_base(name)})
             for name, d in DISTRIBUTIONS.items()]
    return tuple(cells) + (Cell("values", "nan", "NaN of every bit pattern and +-inf inside the "
                                "windows; a row with fewer non-NaN values than top_k (vLLM #49896)",
                                {"data": ends_with("nan")}),)


_ROW_SIZES = (
    Cell("sizes", "k <= 64", "small top_k: one register tile", {"top_k": between(1, 64)}),
    Cell("sizes", "k = 512..1024", "production top_k", {"top_k": between(512, 1024)}),
    Cell("sizes", "k = 2048", "DeepSeek-V3.2's top_k, where the on-chip stashes overflow",
         {"top_k": 2048}),
    Cell("sizes", "k > 2048", "top_k past 2048 (vLLM's tests use 3000)", {"top_k": at_least(2049)},
         profiles=("nightly", "full"), elsewhere="a top_k nobody serves: nightly only"),
    Cell("sizes", "<= 4096 columns", "rows of at most 4096 logits", {"context": between(1, 4096)}),
    Cell("sizes", "4097..16384 columns", "past the 4096-candidate on-chip buffer",
         {"context": between(4097, 16384)}),
    Cell("sizes", "16385..65536 columns", "past 16384 columns (vLLM #51782 used 16385)",
         {"context": between(16385, 65536)}),
    Cell("sizes", "> 65536 columns", "past 65536 columns, up to 300K (131072-token contexts)",
         {"context": at_least(65537)}),
)


_STRADDLE = (
    Cell("sizes", "rows straddling top_k", "one batch of rows shorter and longer than top_k in "
         "every order (long, short, long; short, long, short)", {"lengths": "straddle"}),
    Cell("sizes", "rows straddling 4096", "rows on both sides of 4096 columns in every order: "
         "the shipped Triton kernel's register tile, past which a row takes the multi-program "
         "finish (state a long row leaves must not reach the next rows)",
         {"lengths": "straddle", "context": at_least(4097)}),
    Cell("sizes", "rows straddling 32768", "rows on both sides of 32768 columns in every order "
         "(vLLM #49139: a row longer than 32768, a short one, another long one: a stale "
         "histogram); Triton under the CPU interpreter skips its 36 x 32769 logits",
         {"lengths": "straddle", "context": at_least(32769)}),
)
ORDERS = ("short-first", "long-first")
DIRTY = "indices keeps the rows the previous call wrote"


FUZZ_DATA = tuple(DISTRIBUTIONS) + tuple(f"{name}-nan" for name in DISTRIBUTIONS)
"""Every distribution, then every one with NaN: shrinking goes to ``random``."""
FUZZ_COMMON = {
    "top_k": Sizes(1, 4096, edges=(1, 2, 16, 64, 65, 512, 1024, 2048, 2049)),
    "context": Sizes(1, 300_000, edges=(1, 4096, 4097, 16384, 16385, 65536, 65537, 300_000)),
    "pad": Sizes(0, 4),
    "data": Choice(FUZZ_DATA),
    "clean": Choice((True, False)),
    "strided": flag(),
    "lengths": Choice(LENGTHS),
    "calls": Choice((call_sequences.ONE,) + call_sequences.names(ORDERS)),
}


def _past_2_31(values) -> bool:
    rows = values.get("tokens") or (values.get("batch") or 0) * (values.get("next_n") or 1)
    return rows * (values.get("context") or 0) > 2 ** 31


class _TopKSpec(OpSpec):
    outputs = ("indices",)
    output_dtypes = {"indices": torch.int32}
    case_params = {"top_k": 512, "context": 4096, "pad": 0, "data": "random", "clean": True,
                   "strided": False, "lengths": "random", "calls": call_sequences.ONE}
    call_orders = ORDERS
    small_params = (("top_k", 16), ("context", 300))

    def call_step(self, case: Case, step: Step) -> Case:
        case = super().call_step(case, step)
        return dataclasses.replace(case, params=tuple(
            {**dict(case.params), "lengths": step.lengths or self.param(case, "lengths")}.items()))

    written_args = ("indices",)

    def case_elements(self, case: Case) -> int | None:
        rows = self.rows(case)
        return rows * max(self.param(case, "context"), 1) if rows else None

    def rows(self, case: Case) -> int:
        return case.tokens

    def _windows(self, case: Case) -> tuple[torch.Tensor, torch.Tensor, int]:
        raise NotImplementedError

    def token_count(self, inputs) -> int:
        return int(inputs["num_rows"])

    def _make(self, case: Case, head: dict) -> dict:
        k = self.param(case, "top_k")
        buf = guarded_buffer(case.tokens, k, self.param(case, "pad"), case.device)
        return {**head, "indices": buf, "num_rows": case.tokens,
                "stride0": head["logits"].stride(0), "stride1": head["logits"].stride(1),
                "top_k": k}

    def after_layout(self, inputs: dict) -> dict:
        """The call's strides are the laid-out logits' own."""
        return {**inputs, "stride0": inputs["logits"].stride(0),
                "stride1": inputs["logits"].stride(1)}

    def prepare(self, inputs: dict) -> dict:
        return {**inputs, "indices": fresh_copy(inputs["indices"])}

    def collect(self, call: dict, result) -> dict:
        rows, k = int(call["num_rows"]), int(call["top_k"])
        return {"indices": call["indices"][:rows, :k].clone()}

    def extra_checks(self, call: dict) -> list[dict]:
        """The guard band: cells of the buffer outside ``indices[:num_rows, :top_k]``."""
        guard = guard_violations(call["indices"], int(call["num_rows"]), int(call["top_k"]))
        return [{"output": "guard", "passed": guard == 0, "guard_violations": guard,
                 "detail": f"{guard} cells outside indices[:num_rows, :top_k] were written "
                           "(out-of-bounds write / padding rows touched)" if guard else ""}]

    def reference(self, inputs: dict) -> dict:
        starts, ends = self.row_windows(inputs)
        rows, k = int(inputs["num_rows"]), int(inputs["top_k"])
        view = inputs["logits"][:rows]
        out = torch.empty((rows, k), dtype=torch.int32, device=view.device)
        select_into(view, starts, ends, out, k)
        return {"indices": out}

    def canonical(self, output: str, value: torch.Tensor) -> torch.Tensor:
        """The order of a row's k indices is free."""
        return value.sort(dim=-1).values if output == "indices" else value

    def compare(self, c: Comparison) -> list[dict]:
        """Tie-aware: a row passes when its index set selects the same values as the
        reference's (kernels/topk/compare.py)."""
        starts, ends = self.row_windows(c.inputs)
        rows, k = int(c.inputs["num_rows"]), int(c.inputs["top_k"])
        row = compare_topk(c.outputs["indices"], c.expected["indices"], c.inputs["logits"][:rows],
                           starts, ends, k)
        return [{"output": "indices", **row}]


class TopKPrefillSpec(_TopKSpec):
    op = "top_k_per_row_prefill"
    signature = contract("logits", "row_starts", "row_ends", "indices", "num_rows", "stride0",
                         "stride1", "top_k")
    token_args = ("logits", "row_starts", "row_ends")
    case_params = {**_TopKSpec.case_params, "seqs": 1}
    layout_probe = (3, (("top_k", 16), ("context", 60), ("seqs", 2)))
    input_space = InputSpace(_value_cells() + _ROW_SIZES + (
        Cell("sizes", "> 2048 rows", "a prefill chunk of thousands of query rows",
             {"tokens": at_least(2049)}, profiles=GPU_PROFILES,
             elsewhere="thousands of rows under the CPU interpreter take minutes"),
        Cell("metadata", "ragged batch", "several sequences: row_starts > 0, each row its own "
             "window (local offsets, PR 42810)", {"seqs": at_least(2)}),
        Cell("metadata", "uncleaned tails", "values larger than any in-window logit past each "
             "window's end (a read past the end selects them)", {"clean": False}),
        Cell("metadata", "strided logits", "logits a column slice of a wider buffer "
             "(stride0 > N)", {"strided": True}),
    ) + _STRADDLE + call_sequences.cells(ORDERS, dirty=DIRTY))
    fuzz_space = FuzzSpace({**FUZZ_COMMON, "tokens": Sizes(1, 8192, edges=(1, 2, 127, 129, 2049)),
                            "seqs": Sizes(1, 8)}, shrink_to_fit=("tokens", "context"))

    def _make_inputs(self, case: Case) -> dict:
        rows = case.tokens
        if self.param(case, "lengths") != "random":
            return self._windows_of(case, self.param(case, "lengths"))
        batch = ragged_prefill(rows, self.param(case, "seqs"), self.param(case, "context"),
                               generator(case, 2))
        starts, ends, key_start = batch.starts, batch.ends, batch.num_keys
        logits = _logits(self, case, rows, max(key_start, 1), starts, ends)
        return self._make(case, {"logits": logits, "row_starts": starts.to(case.device),
                                 "row_ends": ends.to(case.device)})

    def _windows_of(self, case: Case, lengths: str) -> dict:
        """Windows of ``lengths`` (LENGTHS) at random starts in ``context`` columns: the same
        shapes whatever the lengths, as a run of calls needs."""
        n, g = self.param(case, "context"), generator(case, 2)
        size = window_lengths(lengths, case.tokens, n, self.param(case, "top_k"), g)
        starts = (torch.rand(case.tokens, generator=g) * (n - size + 1)).long()
        starts, ends = starts.int(), (starts + size).int()
        logits = _logits(self, case, case.tokens, n, starts, ends)
        return self._make(case, {"logits": logits, "row_starts": starts.to(case.device),
                                 "row_ends": ends.to(case.device)})

    def row_windows(self, inputs):
        rows = int(inputs["num_rows"])
        return inputs["row_starts"][:rows], inputs["row_ends"][:rows]


class TopKDecodeSpec(_TopKSpec):
    op = "top_k_per_row_decode"
    signature = contract("logits", "next_n", "seq_lens", "indices", "num_rows", "stride0",
                         "stride1", "top_k")
    token_args = ("logits",)
    layout_probe = (4, (("top_k", 16), ("context", 60), ("next_n", 2)))
    case_params = {**_TopKSpec.case_params, "next_n": 1, "batch": 0, "padded_requests": 0,
                   "seq_lens_2d": False, "full_rows": False}
    input_space = InputSpace(_value_cells() + _ROW_SIZES + (
        Cell("sizes", "batch >= 64", "decode batches of 64 to 2048 requests",
             {"batch": at_least(64)}, profiles=GPU_PROFILES,
             elsewhere="large batches of long rows under the CPU interpreter take minutes"),
        Cell("sizes", "rows x columns > 2^31", "a logits tensor of more than 2^31 elements (2048 x "
             "4 rows of 300000 columns, 9.8 GB): 32-bit row offsets wrap", where=_past_2_31,
             profiles=("nightly", "full"), elsewhere="a 10 GB logits tensor: the GPU nightly"),
        Cell("metadata", "next_n > 1", "speculative drafts: each draft row sees one more key",
             {"next_n": at_least(2)}),
        Cell("metadata", "graph padding rows", "the indices buffer has rows past num_rows that "
             "must stay untouched", {"pad": at_least(1)}),
        Cell("metadata", "causal end <= 0", "padded draft requests with seq_len 1 < next_n: "
             "all -1 (SGLang #30378)", {"padded_requests": at_least(1)}),
        Cell("metadata", "2-D seq_lens", "seq_lens as [batch, next_n], each row's own length",
             {"seq_lens_2d": True}),
        Cell("metadata", "rows as long as the buffer", "every request at the logits' full width: "
             "the last draft row's window ends at the last column", {"full_rows": True}),
        Cell("metadata", "uncleaned tails", "values larger than any in-window logit past each "
             "window's end", {"clean": False}),
        Cell("metadata", "strided logits", "logits a column slice of a wider buffer",
             {"strided": True}),
    ) + _STRADDLE + call_sequences.cells(
        ORDERS, padding="the short calls turn half the requests into padding (seq_len 1: rows "
        "that were valid end at <= 0 when next_n > 1)", dirty=DIRTY))
    fuzz_space = FuzzSpace({**FUZZ_COMMON, "batch": Sizes(1, 2048, edges=(1, 2, 63, 64, 65, 2048)),
                            "next_n": Sizes(1, 4, edges=(1, 2, 4)), "padded_requests": Sizes(0, 3),
                            "seq_lens_2d": flag(), "full_rows": flag()},
                           requests="batch", shrink_to_fit=("batch", "context"),
                           adjust=context_holds_drafts)

    def rows(self, case: Case) -> int:
        """A decode sweep by requests: ``batch`` x ``next_n`` rows."""
        return case.tokens or self.param(case, "batch") * self.param(case, "next_n")

    def _make_inputs(self, case: Case) -> dict:
        next_n = self.param(case, "next_n")
        if case.tokens % next_n:
            raise ValueError(f"{case.id}: decode rows {case.tokens} must be a multiple of "
                             f"next_n={next_n}")
        batch, n = case.tokens // next_n, self.param(case, "context")
        seq_lens = decode_seq_lens(batch, next_n, n, generator(case, 3),
                                   self.param(case, "lengths"), self.param(case, "top_k"))
        if self.param(case, "full_rows"):  # the last draft row of each request spans all n
            seq_lens[:] = n
        padded = min(self.param(case, "padded_requests"), batch)
        if padded:  # graph padding: seq_len 1 < next_n, so a row's causal end is <= 0
            seq_lens[batch - padded:] = 1
        ends = decode_row_ends(seq_lens, next_n, case.tokens).int()
        if self.param(case, "seq_lens_2d"):  # each row's own length: [batch, next_n]
            seq_lens = ends.view(batch, next_n).clone()
        logits = _logits(self, case, case.tokens, n, torch.zeros_like(ends), ends)
        return self._make(case, {"logits": logits, "next_n": next_n,
                                 "seq_lens": seq_lens.to(case.device)})

    def call_step(self, case: Case, step: Step) -> Case:
        """Half the requests are padding (seq_len 1) in the padded calls, none in the others."""
        case = super().call_step(case, step)
        batch = self.rows(case) // self.param(case, "next_n")
        return dataclasses.replace(case, params=tuple({**dict(case.params), "padded_requests":
                                                       max(1, batch // 2) if step.padded else 0}.items()))

    def row_windows(self, inputs):
        ends = decode_row_ends(inputs["seq_lens"], int(inputs["next_n"]), int(inputs["num_rows"]))
        return torch.zeros_like(ends), ends


register_spec(TopKPrefillSpec())
register_spec(TopKDecodeSpec())
