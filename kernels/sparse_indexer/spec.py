"""Op specs of the sparse-attention indexer: fp8 quantisation, the K cache, MQA logits.

One ``OpSpec`` per op (case parameters, inputs, float64 truth, comparison, input and fuzz
space) and their registration. The pieces they share sit beside this module, one job each:
``inputs`` (how activations, quantised Q and garbage-filled caches are drawn), ``cells`` (the
input-space cells and fuzz spaces) and ``compare`` (the rows that judge outputs, and their
bounds).

Inputs model DeepSeek-V3.2's indexer: head_dim 128, 64 heads (case parameter ``heads``), K and
Q activations ~ N(0, 1) with per-token scales spread over ~e^{+-1} and a few outlier channels,
mixed-sign head weights (so relu-before-the-head-sum matters), a ragged prefill batch (``seqs``
sequences sharing a cached ``context`` budget, as for top-k; ``tokens`` query rows) and a paged
decode batch (``tokens`` = requests x ``next_n`` query rows, or ``batch`` requests; ``context``
the maximum context; ``shuffled`` block tables, unused cache slots and spare blocks full of
garbage bytes, including fp8 NaN patterns, which a correct kernel never lets into a visible
logit). ``scale_fmt``: None or ``ue8m0`` (power-of-two scales). ``head_dim`` (default 128)
and, for the K cache, ``block_size`` slots a block (default 64, the contract's; 1 is ROCm's
per-token cache, whose blocks start at ``(head_dim + 4) * block`` bytes, not 16-byte aligned):
``cells.BLOCK_SIZES`` and ``cells.HEAD_DIM_CELLS`` say which are judged and why
(docs/spec/indexer_block_sizes.md).
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.topk.batches import decode_seq_lens, ragged_prefill
from harness.core import call_sequences
from harness.core.call_sequences import Step
from harness.core.cases import Case, generator
from harness.core.errors import ContractViolation
from harness.core.fuzz_space import Choice, FuzzSpace, Sizes, flag
from harness.core.input_space import GPU_PROFILES, Cell, InputSpace, at_least, between
from harness.core.specs import Comparison, OpSpec, contract, register_spec
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.cells import (BLOCK_SIZE_CELLS, CALLS, FUZZ_BLOCK_SIZE, FUZZ_CONTEXT,
                                          FUZZ_DATA, FUZZ_HEAD_DIM, FUZZ_HEADS, FUZZ_TOKENS,
                                          HEAD_DIM_CELLS, LENGTHS, NIGHTLY_PROFILES, ONE, ORDERS,
                                          OUTPUT_PAST_2_31_ELSEWHERE, PADDED_ZERO, QUANT_SIZES, UE8M0,
                                          VALUE_CELLS, _decode_batch, _logits_x_heads)
from kernels.sparse_indexer.cells import BLOCK_SIZES  # noqa: F401  (the suites read spec.BLOCK_SIZES)
from kernels.sparse_indexer.compare import _exact_row, _sparse_logits_row, cache_row, logits_row
from kernels.sparse_indexer.inputs import (BLOCK_SIZE, HEAD_DIM, HEADS, TIES, _activations,
                                           _garbage_cache, _sparse_windows, far_block, quantized_q)
from kernels.sparse_indexer.validate import FP8


def _with(case: Case, **params) -> Case:
    return dataclasses.replace(case, params=tuple({**dict(case.params), **params}.items()))


def _lengths(spec: OpSpec, case: Case) -> str:
    lengths = spec.param(case, "lengths")
    if lengths not in LENGTHS:
        raise ValueError(f"{case.id}: unknown lengths {lengths!r}; choose one of "
                         f"{', '.join(LENGTHS)}")
    return lengths


class QuantizeKSpec(OpSpec):
    op = "fp8_quantize_k"
    signature = contract("k", scale_fmt=None)
    outputs = ("values", "scale")
    output_dtypes = {"values": FP8, "scale": torch.float32}
    token_args = ("k",)
    case_params = {"scale_fmt": None, "data": "random", "head_dim": HEAD_DIM, "calls": ONE}
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (UE8M0,) + HEAD_DIM_CELLS
                             + call_sequences.cells(padding=PADDED_ZERO))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "scale_fmt": Choice((None, "ue8m0")),
                            "data": FUZZ_DATA, "head_dim": FUZZ_HEAD_DIM, "calls": CALLS})

    def call_step(self, case: Case, step: Step) -> Case:
        """The padded call's tokens are ``zero-tokens`` (padding rows of a graph batch)."""
        case = super().call_step(case, step)
        return _with(case, data="zero-tokens") if step.padded else case

    def _make_inputs(self, case: Case) -> dict:
        k = _activations(case, 1, case.tokens, self.param(case, "head_dim"))
        if case.tokens >= 4 and self.param(case, "data") == "random":
            k[0] = 0
            k[1] *= 1e4
            k[2] *= 1e-5
            k[3] = 0
            k[3, :len(TIES)] = torch.tensor(TIES, device=k.device)
        return {"k": k, "scale_fmt": self.param(case, "scale_fmt")}

    def _reference(self, inputs):
        values, scale = ref.quantize_rows(inputs["k"], inputs["scale_fmt"])
        return {"values": values, "scale": scale}

    def compare(self, c: Comparison):
        return [_exact_row(n, c.outputs[n], c.expected[n], self.output_dtypes[n],
                           -1 if self.output_dtypes[n] == FP8 else None) for n in self.outputs]


class QuantizeQSpec(QuantizeKSpec):
    op = "fp8_quantize_q"
    signature = contract("q", "weights", "softmax_scale")
    outputs = ("values", "weights")
    output_dtypes = {"values": FP8, "weights": torch.float32}
    token_args = ("q", "weights")
    case_params = {"heads": HEADS, "data": "random", "head_dim": HEAD_DIM, "calls": ONE}
    layout_probe = (3, (("heads", 4),))
    small_params = (("heads", 4),)
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (
        Cell("sizes", "64 heads", "DeepSeek-V3.2's indexer heads", {"heads": 64},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs 4 heads"),) + HEAD_DIM_CELLS
        + call_sequences.cells(padding=PADDED_ZERO))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "heads": FUZZ_HEADS, "data": FUZZ_DATA,
                            "head_dim": FUZZ_HEAD_DIM, "calls": CALLS})

    def case_elements(self, case: Case) -> int | None:
        return (case.tokens * self.param(case, "heads") * self.param(case, "head_dim")
                if case.tokens else None)

    def _make_inputs(self, case: Case) -> dict:
        heads, d = self.param(case, "heads"), self.param(case, "head_dim")
        q = _activations(case, 2, case.tokens, heads, d)
        w = torch.randn(case.tokens, heads, generator=generator(case, 3, case.device),
                        device=case.device)
        return {"q": q, "weights": w, "softmax_scale": d ** -0.5}

    def _reference(self, inputs):
        values, scale = ref.quantize_rows(inputs["q"], "ue8m0")
        c = float(inputs["softmax_scale"]) * inputs["q"].shape[1] ** -0.5
        return {"values": values, "weights": inputs["weights"] * scale * c}


class QuantAndCacheSpec(OpSpec):
    """Writes through ``slot_mapping`` into a cache of garbage bytes: the whole cache must equal
    the reference's, so a write to a wrong slot, a -1 slot, or the wrong half of a block fails."""
    op = "indexer_k_quant_and_cache"
    signature = contract("k", "kv_cache", "slot_mapping", "quant_block_size", "scale_fmt")
    outputs = ("kv_cache",)
    output_dtypes = {"kv_cache": torch.uint8}
    token_args = ("k", "slot_mapping")
    written_args = ("kv_cache",)
    case_params = {"scale_fmt": None, "data": "random", "slots": "scattered",
                   "block_size": BLOCK_SIZE, "head_dim": HEAD_DIM, "calls": ONE}
    """``slots``: ``scattered`` (one token in eight unused, -1, anywhere) or ``runs`` (the first
    and last quarter of the batch -1: the padding tokens of a graph batch write nothing)."""
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (
        UE8M0,
        Cell("metadata", "-1 runs", "the first and last quarter of slot_mapping -1 (graph "
             "padding)", {"slots": "runs"}),
    ) + BLOCK_SIZE_CELLS + HEAD_DIM_CELLS + call_sequences.cells(
        padding="the second call's first and last quarter of slot_mapping -1 (tokens that "
        "wrote in the first call are padding)",
        dirty="the cache keeps what the previous calls wrote, and the reference starts there",
        reshuffled="slot_mapping redrawn every call"))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "scale_fmt": Choice((None, "ue8m0")),
                            "data": FUZZ_DATA, "slots": Choice(("scattered", "runs")),
                            "block_size": FUZZ_BLOCK_SIZE, "head_dim": FUZZ_HEAD_DIM,
                            "calls": CALLS})

    def call_step(self, case: Case, step: Step) -> Case:
        case = super().call_step(case, step)
        return _with(case, slots="runs") if step.padded else case
    reference_extras = ref.KV_LAYOUTS
    """The cache as each layout an implementation may declare (``kv_layout``) writes it."""

    def _make_inputs(self, case: Case) -> dict:
        t, bs, d = case.tokens, self.param(case, "block_size"), self.param(case, "head_dim")
        num_blocks = t // bs + 3
        g = generator(case, 4, case.device)
        slots = torch.randperm(num_blocks * bs, generator=g, device=case.device)[:t]
        if self.param(case, "slots") == "runs":
            slots[:max(1, t // 4)] = -1
            slots[t - t // 4:] = -1
        elif t >= 4:
            slots[torch.randperm(t, generator=g, device=case.device)[:max(1, t // 8)]] = -1
        return {"k": _activations(case, 5, t, d), "kv_cache": _garbage_cache(case, num_blocks, bs, d),
                "slot_mapping": slots.long(), "quant_block_size": d,
                "scale_fmt": self.param(case, "scale_fmt")}

    def prepare(self, inputs):
        return {**inputs, "kv_cache": inputs["kv_cache"].clone()}

    def collect(self, call, result):
        if result is not None and not isinstance(result, torch.Tensor):
            raise ContractViolation(f"{self.op} writes in place and returns None, got {type(result)}")
        return {"kv_cache": call["kv_cache"]}

    def reference(self, inputs):
        caches = {}
        for layout in ref.KV_LAYOUTS:
            caches[layout] = inputs["kv_cache"].clone()
            ref.write_cache(inputs["k"], caches[layout], inputs["slot_mapping"],
                            inputs["scale_fmt"], layout)
        return {"kv_cache": caches["normal"], **caches}

    def compare(self, c: Comparison):
        """A writer that declares ``kv_layout`` is judged on that layout's bytes; one that
        declares ``fp32_division: approximate`` by APPROXIMATE_DIVISION."""
        layout = c.declared("kv_layout", "normal")
        if layout not in ref.KV_LAYOUTS:
            return [{"output": "kv_cache", "passed": False, "detail": f"declared K-cache layout "
                     f"{layout!r} is unknown; the harness knows {', '.join(ref.KV_LAYOUTS)}"}]
        cache = c.inputs["kv_cache"]
        row = cache_row(c.outputs["kv_cache"], c.expected[layout],
                        cache.shape[1] * c.inputs["k"].shape[1], c.declared("fp32_division", "exact"))
        return [{**row, "layout": layout}]


class MqaLogitsSpec(OpSpec):
    op = "fp8_mqa_logits"
    signature = contract("q", "kv", "weights", "cu_seqlen_ks", "cu_seqlen_ke")
    outputs = ("logits",)
    output_dtypes = {"logits": torch.float32}
    token_args = ("q", "weights", "cu_seqlen_ks", "cu_seqlen_ke")
    case_params = {"heads": HEADS, "seqs": 1, "context": 1024, "data": "random",
                   "head_dim": HEAD_DIM, "sparse_rows": False, "lengths": "random",
                   "calls": ONE}
    call_orders = ORDERS
    small_params = (("heads", 4), ("context", 300))
    """``sparse_rows``: one sequence with exactly ``context`` cached keys, of whose query rows only
    the first and last two see keys (the others' windows are empty, every logit -inf): a logits
    tensor past 2^31 elements whose float64 truth stays a few rows (SPARSE_TRUTH_FROM)."""
    layout_probe = (3, (("heads", 4), ("seqs", 2), ("context", 100)))
    input_space = InputSpace(VALUE_CELLS + (
        Cell("sizes", "<= 64 query rows", "small prefill chunks", {"tokens": between(1, 64)}),
        Cell("sizes", "> 64 query rows", "prefill chunks of hundreds to 16384 queries",
             {"tokens": at_least(65)}),
        Cell("sizes", "> 4096 keys", "past 4096 keys, ending in a partial block of 128",
             {"context": at_least(4097)}),
        Cell("sizes", "64 heads", "DeepSeek-V3.2's indexer heads", {"heads": 64},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs 4 heads"),
        Cell("metadata", "ragged batch", "several sequences, each query seeing its own "
             "sequence's keys", {"seqs": at_least(2)}),
        Cell("sizes", "logits past 2^31 elements", "M x N > 2^31 logits (32769 queries x 65537 "
             "keys, 8.6 GB): a 32-bit output offset (row * N) wraps in the last rows",
             where=lambda v: (v.get("tokens") or 0) * (v.get("context", 0) + (v.get("tokens") or 0))
             > 2 ** 31 and v.get("sparse_rows"), profiles=NIGHTLY_PROFILES,
             elsewhere=OUTPUT_PAST_2_31_ELSEWHERE),
    ) + HEAD_DIM_CELLS + call_sequences.cells(ORDERS))
    fuzz_space = FuzzSpace({"tokens": Sizes(1, 16384, edges=(1, 2, 63, 64, 65, 129, 16384)),
                            "heads": FUZZ_HEADS, "seqs": Sizes(1, 8), "context": FUZZ_CONTEXT,
                            "data": FUZZ_DATA, "head_dim": FUZZ_HEAD_DIM,
                            "sparse_rows": flag(on_cpu=False), "lengths": Choice(LENGTHS),
                            "calls": Choice((ONE,) + call_sequences.names(ORDERS))},
                           shrink_to_fit=("tokens", "context"),
                           cost=_logits_x_heads)

    def call_step(self, case: Case, step: Step) -> Case:
        return _with(super().call_step(case, step), lengths=step.lengths)

    def case_elements(self, case: Case) -> int | None:
        """Query rows x context: the logits (and a torch implementation's per-head scores,
        heads times that) are what fill the memory (``sparse_rows``: x context + rows keys)."""
        keys = self.param(case, "context") + (case.tokens if self.param(case, "sparse_rows") else 0)
        return case.tokens * max(keys, 1) if case.tokens else None
    reference_extras = ("bound", "live_rows")
    """``bound``: ``sum_h |w| sum_d |q k| * k_scale`` per logit (float64), the scale of its
    rounding. ``live_rows``: where the logits have SPARSE_TRUTH_FROM elements or more, the rows
    that see any key; ``logits`` and ``bound`` then hold those rows only, and every other row
    must be all -inf."""

    def _make_inputs(self, case: Case) -> dict:
        heads, d = self.param(case, "heads"), self.param(case, "head_dim")
        if self.param(case, "sparse_rows"):
            starts, ends, num_keys = _sparse_windows(case.tokens, self.param(case, "context"))
        else:
            seqs, n, lengths = self.param(case, "seqs"), self.param(case, "context"), _lengths(self, case)
            budget = n // max(1, min(seqs, case.tokens))
            contexts = None if lengths == "random" else (budget if lengths == "long" else 0)
            batch = ragged_prefill(case.tokens, seqs, n, generator(case, 8), contexts)
            starts, ends, num_keys = batch.starts, batch.ends, batch.num_keys
            if contexts is not None:  # one key array for long and short: the same shapes
                num_keys = budget * min(seqs, case.tokens) + case.tokens
        k = _activations(case, 10, max(num_keys, 1), d)
        k_fp8, k_scale = ref.quantize_rows(k, None)
        q, w = quantized_q(case, case.tokens, heads, d)
        return {"q": q, "kv": (k_fp8, k_scale), "weights": w,
                "cu_seqlen_ks": starts.to(case.device), "cu_seqlen_ke": ends.to(case.device)}


    def reference(self, inputs):
        args = (inputs["q"], inputs["kv"][0], inputs["kv"][1], inputs["weights"],
                inputs["cu_seqlen_ks"], inputs["cu_seqlen_ke"])
        if args[0].shape[0] * args[1].shape[0] < SPARSE_TRUTH_FROM:
            return {"logits": _f64_logits(*args), "bound": ref.mqa_bound(*args)}
        live = (args[5] > args[4]).nonzero().reshape(-1)
        args = (args[0][live], *args[1:3], args[3][live], args[4][live], args[5][live])
        return {"logits": _f64_logits(*args), "bound": ref.mqa_bound(*args), "live_rows": live}

    def unwritten(self, c: Comparison) -> dict[str, torch.Tensor]:
        """Outside the windows, for an implementation that declares ``outside_window:
        unwritten`` (where the truth is dense: -inf there)."""
        expect = c.expected.get("logits")
        if c.declared("outside_window", "-inf") != "unwritten" or "live_rows" in c.expected \
                or expect is None or expect.shape != c.outputs["logits"].shape:
            return {}
        return {"logits": torch.isneginf(expect).to(c.outputs["logits"].device)}

    def bitwise_outputs(self, c: Comparison, unwritten: dict) -> tuple[str, ...]:
        """Declared ``outside_window: unwritten`` and the cells not located (a sparse truth):
        the logits cannot be compared bitwise."""
        if c.declared("outside_window", "-inf") != "unwritten":
            return self.outputs
        return tuple(name for name in self.outputs if name in unwritten)

    def compare(self, c: Comparison):
        """Within the declared accumulation class's bound; an implementation that declares
        ``outside_window: unwritten`` is not judged outside the windows."""
        logits, expect = c.outputs["logits"], c.expected
        outside = c.declared("outside_window", "-inf")
        if outside not in ("-inf", "unwritten"):
            return [{"output": "logits", "passed": False, "detail": f"unknown declared "
                     f"outside_window {outside!r}; declare '-inf' or 'unwritten'"}]
        if "live_rows" in expect:
            return [_sparse_logits_row(c, outside)]
        if outside == "unwritten" and logits.shape == expect["logits"].shape:
            logits = logits.masked_fill(torch.isneginf(expect["logits"]), float("-inf"))
        dims = (c.inputs["q"].shape[-1], c.inputs["q"].shape[-2])
        row = logits_row(logits, expect["logits"], expect["bound"], dims, c.accumulation)
        if outside != "-inf":
            row["outside_window"] = f"not judged (declared {outside})"
        return [row]


SPARSE_TRUTH_FROM = 2 ** 30
"""Logits of this many elements or more get a float64 truth of their rows that see any key only
(``live_rows``): a dense one would take 17 GB per 2^31 logits, twice (values and bounds)."""


def _f64_logits(q, k, k_scale, weights, ks, ke) -> torch.Tensor:
    """float64 logits (the float32 result of the registered op would round the ground truth)."""
    return ref.mqa_logits(q, k, k_scale, weights, ks, ke, torch.float64)


class PagedMqaLogitsSpec(MqaLogitsSpec):
    op = "fp8_paged_mqa_logits"
    signature = contract("q", "kv_cache", "weights", "context_lens", "block_tables",
                         "max_model_len")
    token_args = ()
    contiguous_args = ("kv_cache",)
    layout_probe = (3, (("heads", 4), ("context", 200)))
    case_params = {"heads": HEADS, "next_n": 1, "batch": 0, "context": 2048, "shuffled": True,
                   "capacity": False, "data": "random", "empty_requests": 0,
                   "shared_prefix": False, "far_blocks": False, "block_size": BLOCK_SIZE,
                   "head_dim": HEAD_DIM, "sparse_rows": False, "lengths": "random",
                   "calls": ONE}
    """Beside the prefill ones: ``empty_requests``, the last N requests have no context
    (context_len 0: every logit of theirs -inf); ``shared_prefix``, every request's first blocks
    are request 0's (prefix caching: one physical block in several tables); ``far_blocks``, the
    cache is larger than 2^31 bytes and the requests' blocks lie past that offset (a 32-bit
    byte offset wraps); ``sparse_rows``, only the first request (a few keys) and the last (the
    whole ``context``) have context, the others none: a logits tensor past 2^31 elements whose
    float64 truth stays a few rows."""
    input_space = InputSpace(VALUE_CELLS + (
        Cell("sizes", "context <= 8192", "short and medium contexts", {"context": between(1, 8192)}),
        Cell("sizes", "context >= 65536", "long contexts (65536, 131072)",
             {"context": at_least(65536)}, profiles=GPU_PROFILES,
             elsewhere="long contexts: run on a GPU (the CPU profile's contexts are 300 keys)"),
        Cell("sizes", "batch >= 64", "large decode batches", {"batch": at_least(64)},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs batches of 1-3"),
        Cell("sizes", "cache past 2^31 bytes", "blocks at byte offsets past 2^31 of a 2.1 GB cache",
             {"far_blocks": True}, profiles=GPU_PROFILES,
             elsewhere="a 2.1 GB cache per case: run on a GPU"),
        Cell("sizes", "logits past 2^31 elements", "B x next_n x max_model_len > 2^31 logits "
             "(8193 x 2 x 131072, 8.6 GB): a 32-bit output offset (row * max_model_len) wraps "
             "in the last request's rows (ROCm/aiter #4244)",
             where=lambda v: v.get("batch", 0) * v.get("next_n", 1) * v.get("context", 0)
             > 2 ** 31, profiles=NIGHTLY_PROFILES,
             elsewhere=OUTPUT_PAST_2_31_ELSEWHERE),
        Cell("metadata", "next_n > 1", "speculative drafts, each seeing one more key",
             {"next_n": at_least(2)}),
        Cell("metadata", "next_n not a power of two", "3 drafts: rows laid out by tl.arange need "
             "padding to a power of two (found by harness fuzz)", {"next_n": 3}),
        Cell("metadata", "shuffled block table", "blocks in random order, garbage in unused "
             "slots and spare blocks", {"shuffled": True}),
        Cell("metadata", "empty context", "requests with context_len 0", {"empty_requests": at_least(1)}),
        Cell("metadata", "shared blocks", "requests sharing prefix blocks (prefix caching)",
             {"shared_prefix": True}),
        Cell("metadata", "graph-sized buffers", "cache and tables sized for max_model_len, as a "
             "captured decode graph's", {"capacity": True}, profiles=GPU_PROFILES,
             elsewhere="the CUDA-graph suite builds them; it needs a GPU"),
    ) + BLOCK_SIZE_CELLS + HEAD_DIM_CELLS + call_sequences.cells(
        ORDERS, padding="the short calls give half the requests context 0 (requests that had "
        "keys are padding)", reshuffled="block tables and the blocks' places in the cache "
        "redrawn every call"))
    replay_params = (("capacity", True),)
    call_orders = ORDERS
    small_params = (("heads", 4), ("context", 300))
    fuzz_space = FuzzSpace({"batch": Sizes(1, 16385, edges=(1, 2, 3, 64, 8193, 16385)),
                            "next_n": Sizes(1, 4),
                            "heads": FUZZ_HEADS, "context": FUZZ_CONTEXT, "data": FUZZ_DATA,
                            "shuffled": Choice((True, False)), "capacity": flag(),
                            "empty_requests": Sizes(0, 3), "shared_prefix": flag(),
                            "far_blocks": flag(on_cpu=False), "block_size": FUZZ_BLOCK_SIZE,
                            "head_dim": FUZZ_HEAD_DIM, "sparse_rows": flag(on_cpu=False),
                            "lengths": Choice(LENGTHS),
                            "calls": Choice((ONE,) + call_sequences.names(ORDERS))},
                           requests="batch", shrink_to_fit=("batch", "context"),
                           adjust=_decode_batch, cost=_logits_x_heads)

    def case_elements(self, case: Case) -> int | None:
        rows = case.tokens or self.param(case, "batch") * self.param(case, "next_n")
        return rows * max(self.param(case, "context"), 1) if rows else None

    def token_count(self, inputs) -> int:
        return inputs["q"].shape[0] * inputs["q"].shape[1]

    def _make_inputs(self, case: Case) -> dict:
        next_n, heads = self.param(case, "next_n"), self.param(case, "heads")
        bs, d = self.param(case, "block_size"), self.param(case, "head_dim")
        if case.tokens % next_n:
            raise ValueError(f"{case.id}: decode rows {case.tokens} must be a multiple of next_n={next_n}")
        batch, n = case.tokens // next_n, self.param(case, "context")
        g = generator(case, 11)
        lens = decode_seq_lens(batch, next_n, n, g, _lengths(self, case), bs)
        empty = min(self.param(case, "empty_requests"), batch)
        if empty:
            lens[batch - empty:] = 0
        if self.param(case, "sparse_rows") and batch > 1:
            lens[1:-1] = 0
            lens[-1] = n
        need = [(int(x) + bs - 1) // bs for x in lens]
        donor = max(range(batch), key=lambda b: need[b]) if batch else 0
        shared = [min(nb, need[donor]) // 2 if self.param(case, "shared_prefix") and b != donor
                  else 0 for b, nb in enumerate(need)]
        max_blocks = (n + bs - 1) // bs
        # ``capacity``: the cache holds max_model_len for every request, as vLLM sizes the
        # buffers a decode graph is captured with, so every seed has the same shapes
        total = (batch * max_blocks if self.param(case, "capacity") else sum(need)) + 3
        first = far_block(bs, d) if self.param(case, "far_blocks") else 0
        order = (torch.randperm(total, generator=g) if self.param(case, "shuffled")
                 else torch.arange(total)) + first
        tables = torch.randint(0, total, (batch, max_blocks), generator=g, dtype=torch.int32) + first
        used = 0
        for b in [donor] + [b for b in range(batch) if b != donor]:
            tables[b, :shared[b]] = tables[donor, :shared[b]]
            tables[b, shared[b]:need[b]] = order[used:used + need[b] - shared[b]].int()
            used += need[b] - shared[b]
        cache = _garbage_cache(case, total + first, bs, d)
        for b in range(batch):
            length = int(lens[b])
            if length <= shared[b] * bs:
                continue
            pos = torch.arange(shared[b] * bs, length)
            slots = (tables[b].long()[pos // bs] * bs + pos % bs).to(case.device)
            keys = _activations(case, 100 + b, length, d)[shared[b] * bs:]
            ref.indexer_k_quant_and_cache(keys, cache, slots, d, None)
        q, w = quantized_q(case, case.tokens, heads, d)
        return {"q": q.view(batch, next_n, heads, d), "kv_cache": cache, "weights": w,
                "context_lens": lens.to(case.device), "block_tables": tables.to(case.device),
                "max_model_len": max_blocks * bs}

    def call_step(self, case: Case, step: Step) -> Case:
        """Half the requests have context 0 in the padded calls, none in the others."""
        case = super().call_step(case, step)
        batch = case.tokens // self.param(case, "next_n") or self.param(case, "batch")
        return _with(case, lengths=step.lengths,
                     empty_requests=max(1, batch // 2) if step.padded else 0)

    def reference(self, inputs):
        q, cache, w = inputs["q"], inputs["kv_cache"], inputs["weights"]
        b, next_n, _, d = q.shape
        lens = inputs["context_lens"].cpu()
        requests = list(range(b))
        sparse = b * next_n * inputs["max_model_len"] >= SPARSE_TRUTH_FROM
        if sparse:
            requests = [int(i) for i in (lens > 0).nonzero().reshape(-1)]
        out = torch.full((len(requests) * next_n, inputs["max_model_len"]), float("-inf"),
                         dtype=torch.float64, device=q.device)
        bound = torch.zeros_like(out)
        positions = ref.paged_positions(inputs["context_lens"], next_n)
        for slot, i in enumerate(requests):
            length = int(lens[i])
            if length <= 0:
                continue
            k, scale = ref.gather_paged_keys(cache, inputs["block_tables"], i, length, d,
                                             cache.shape[1])
            rows = slice(i * next_n, (i + 1) * next_n)
            into = slice(slot * next_n, (slot + 1) * next_n)
            ke = (positions[rows] + 1).clamp(0, length).int()
            args = (q[i], k, scale, w[rows], torch.zeros_like(ke), ke)
            out[into, :length] = _f64_logits(*args)
            bound[into, :length] = ref.mqa_bound(*args)
        if not sparse:
            return {"logits": out, "bound": bound}
        live = torch.tensor([i * next_n + j for i in requests for j in range(next_n)],
                            dtype=torch.long)
        return {"logits": out, "bound": bound, "live_rows": live}


for _spec in (QuantizeKSpec(), QuantizeQSpec(), QuantAndCacheSpec(), MqaLogitsSpec(),
              PagedMqaLogitsSpec()):
    register_spec(_spec)
