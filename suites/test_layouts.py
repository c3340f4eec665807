"""Every op on the views real callers pass (harness.core.layouts): its tensor inputs as rows of
a wider buffer, column slices of a shared buffer, transposed, and off a 16-byte boundary, each
inside a sentinel-filled parent buffer. Every implementation must match the reference on them
and leave the parent's bytes outside the views untouched (or, having declared that it needs
contiguous inputs, refuse the view with an error naming it)."""

import pytest

from harness.core.layouts import CONTIGUOUS, NAMES
from harness.evaluate import evaluate
from kernels.mhc.ops import MHC_OPS
from kernels.sparse_indexer.ops import INDEXER_OPS
from kernels.topk.ops import TOPK_OPS

OPS = MHC_OPS + TOPK_OPS + INDEXER_OPS
VIEWS = [name for name in NAMES if name != CONTIGUOUS]


@pytest.mark.sweep("seed", tokens={"smoke": [2], "default": [2, 258]}, hidden="smallest",
                   layout=VIEWS, top_k={"smoke": [16], "default": [16, 2048]},
                   context={"smoke": [200], "default": [200, 20000]},
                   next_n={"smoke": [1], "default": [1, 2]}, seqs=[2],
                   heads={"smoke": [4], "default": [64]})
def test_matches_reference_on_views(target, record):
    ev = evaluate(target.spec, target.impl, target.case, runs=target.runs())
    record(ev.rows)
    ev.assert_passed()


# ---- the machinery: layouts, guards, declared requirements ------------------------------------

import torch  # noqa: E402

from harness.core import layouts  # noqa: E402
from harness.core.cases import Case  # noqa: E402
from harness.core.registry import Implementation  # noqa: E402
from harness.core.specs import get_spec  # noqa: E402
from harness.detectors import layouts as layouts_detector  # noqa: E402
from kernels.mhc import torch as mhc_ref  # noqa: E402
from kernels.topk import torch as topk_ref  # noqa: E402


def _samples() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"bf16": torch.randn(5, 4, 6, generator=g).bfloat16(),
            "fp32": torch.randn(5, 3, generator=g), "int32": torch.arange(5, dtype=torch.int32),
            "fp8": torch.randn(5, 16, generator=g).to(torch.float8_e4m3fn),
            "uint8": torch.randint(0, 256, (5, 2, 8), generator=g, dtype=torch.uint8)}


def _same(a, b) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.element_size() == 1 \
        else torch.equal(a, b)


@pytest.mark.machinery
@pytest.mark.parametrize("name", VIEWS)
def test_a_layout_keeps_the_values_in_a_guarded_parent(name):
    made = _samples()
    views = layouts.LAYOUTS[name].build(made)
    assert views, f"{name} made no view"
    for key, view in views.items():
        assert _same(view, made[key]), (name, key)
        assert view.untyped_storage().nbytes() > view.numel() * view.element_size(), (name, key)
    if name == "row-stride":
        assert views["bf16"].stride(0) > 24 and views["int32"].stride(0) > 1
    if name == "column-slice":
        assert all(v.storage_offset() > 0 for v in views.values())
    if name == "transposed":
        assert views["bf16"].stride(-1) == 4 and "int32" not in views
    if name == "misaligned":
        assert all(v.is_contiguous() and v.data_ptr() % 16 for v in views.values())
    guards = layouts.parent_guards(views)
    assert guards and not layouts.written_outside(guards)
    layouts._storage_bytes(views["bf16"])[-1] ^= 1
    assert layouts.written_outside(guards)[0].startswith("bf16: 1 bytes of the parent buffer")


@pytest.mark.machinery
def test_nan_written_into_the_hidden_columns_of_strided_logits_fails():
    """Issue 63: only the view was compared, so NaN written into the parent's columns past the
    logits' width read good."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        topk_ref.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                       stride1, top_k)
        logits.as_strided((num_rows, stride0 - logits.shape[1]), (stride0, 1),
                          logits.storage_offset() + logits.shape[1]).fill_(float("nan"))

    op = "top_k_per_row_prefill"
    impl = Implementation(op, "writes-hidden-columns", prefill)
    case = Case(op, tokens=5, top_k=16, context=60, seqs=2, strided=True)
    ev = evaluate(get_spec(op), impl, case)
    guard = [r for r in ev.rows if r["output"] == "guard" and r["verdict"] == "fail"]
    assert guard and "logits: " in guard[0]["detail"] and "outside the view" in guard[0]["detail"]


def _post_needing_contiguous(message: str | None, compute_on_view: bool = False):
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        if message is not None and not residual.is_contiguous():
            raise ValueError(message)
        if compute_on_view:
            residual = layouts.as_packed(residual)
        return mhc_ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return mhc_post


def _judge(fn, declared: dict, layout: str):
    impl = Implementation("mhc_post", "needs-contiguous", fn, declared=declared)
    case = Case("mhc_post", tokens=3, hidden=64, layout=layout)
    return evaluate(get_spec("mhc_post"), impl, case)


@pytest.mark.machinery
def test_a_declared_requirement_refused_clearly_passes_and_anything_else_fails():
    clear = "residual must be contiguous; call .contiguous() first"
    declared = {"inputs": "contiguous"}
    refused = _judge(_post_needing_contiguous(clear), declared, "row-stride")
    assert refused.passed and refused.rows[0].get("refused"), refused.failures()
    assert _judge(_post_needing_contiguous(clear), declared, "contiguous").passed
    vague = _judge(_post_needing_contiguous("bad input"), declared, "row-stride")
    assert not vague.passed and "without naming the input" in vague.failures()
    silent = _judge(_post_needing_contiguous(None, compute_on_view=True), declared, "row-stride")
    assert not silent.passed and "out:" in silent.failures()
    with pytest.raises(ValueError, match="contiguous"):  # undeclared: the sweep test errors
        _judge(_post_needing_contiguous(clear), {}, "row-stride")
    finding = layouts_detector.check(get_spec("mhc_post"), Implementation(
        "mhc_post", "undeclared", _post_needing_contiguous(clear)), Case("mhc_post", hidden=64))
    assert not finding.passed and "raised on layout row-stride: ValueError" in finding.message


@pytest.mark.machinery
def test_a_refusal_may_name_the_input_by_the_implementations_own_name():
    """A vendor's ``res must be contiguous`` refuses the contract's ``residual`` when the adapter
    bound ``res`` to it (bind_by_name records the binding); a word that only contains the name,
    or a name bound to another input, is no refusal."""
    from harness.adapters.signature import bind_by_name

    def vendor_post(x, res, post, comb, message="res must be contiguous"):
        if not res.is_contiguous():
            raise ValueError(message)
        return mhc_ref.mhc_post(x, res, post, comb)

    aliases = {"res": "residual", "post": "post_layer_mix", "comb": "comb_res_mix"}
    bound = bind_by_name("mhc_post", vendor_post, aliases=aliases)
    assert layouts.own_names(bound) == {"residual": "res", "post_layer_mix": "post",
                                        "comb_res_mix": "comb"}
    declared = {"inputs": "contiguous"}
    refused = _judge(bound, declared, "row-stride")
    assert refused.passed and refused.rows[0].get("refused"), refused.failures()
    broken = {"residual": ["contiguous"]}
    names = layouts.own_names(bound)
    assert not layouts.refusal(ValueError("results must be contiguous"), broken, names)
    assert not layouts.refusal(ValueError("comb must be contiguous"), broken, names)
    assert layouts.refusal(ValueError("Res: not contiguous"), broken, names)


@pytest.mark.machinery
def test_an_unknown_declared_requirement_is_refused():
    with pytest.raises(ValueError, match="packed is no requirement"):
        _judge(_post_needing_contiguous(None), {"inputs": "packed"}, "row-stride")


@pytest.mark.machinery
def test_inputs_written_in_place_or_required_packed_stay_as_made():
    for op, name in (("top_k_per_row_decode", "indices"), ("fp8_paged_mqa_logits", "kv_cache"),
                     ("indexer_k_quant_and_cache", "kv_cache")):
        spec = get_spec(op)
        tokens, params = spec.layout_probe
        case = Case(op, tokens=tokens, hidden=64, params=params + (("layout", "row-stride"),))
        made = spec.make_inputs(case)
        laid = layouts.lay_out(spec, case, made)
        assert laid[name] is made[name], (op, name)
        assert any(v is not made[k] for k, v in layouts.tensor_inputs(laid).items()), op
    topk = layouts.lay_out(get_spec("top_k_per_row_decode"), Case(
        "top_k_per_row_decode", tokens=4, top_k=16, context=60, layout="transposed"),
        get_spec("top_k_per_row_decode").make_inputs(Case(
            "top_k_per_row_decode", tokens=4, top_k=16, context=60, layout="transposed")))
    assert (topk["stride0"], topk["stride1"]) == topk["logits"].stride() == (1, 4)
