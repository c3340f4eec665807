"""The mHC call contract: leading dims, empty batches, clear errors on bad input, and the fused
op equal to post followed by pre."""

import pytest
import torch

from harness.detectors import outputs_agree
from kernels.mhc.ops import MHC_OPS
from harness.core.registry import implementations
from harness.core.specs import get_spec
from kernels.mhc.validate import ContractError

OPS = MHC_OPS
SHIPPED = ("torch", "triton")
LEADING = (2, 3)


@pytest.mark.sweep(tokens=[6], hidden=[64])
def test_arbitrary_leading_dims(target):
    spec, fn = target.spec, target.impl.fn
    inputs = spec.make_inputs(target.case)
    flat = spec.run(fn, inputs)
    shaped = {k: (v.reshape(*LEADING, *v.shape[1:]) if k in spec.token_args else v)
              for k, v in inputs.items()}
    out = spec.run(fn, shaped)
    for name in spec.outputs:
        assert out[name].shape == (*LEADING, *flat[name].shape[1:]), name
        assert torch.equal(out[name].reshape(flat[name].shape), flat[name]), name


@pytest.mark.sweep(tokens=[0], hidden=[64])
def test_empty_batch(target):
    spec = target.spec
    inputs = spec.make_inputs(target.case)
    out = spec.run(target.impl.fn, inputs)
    ref = spec.reference(inputs)
    for name in spec.outputs:
        assert out[name].shape == ref[name].shape, name
        assert out[name].dtype == spec.output_dtypes[name], name


@pytest.mark.sweep(tokens=[5], hidden=[64])
def test_fused_equals_post_then_pre(target):
    if target.op != "mhc_fused_post_pre":
        pytest.skip("only the fused op has a decomposition")
    name = target.impl.name
    post = implementations("mhc_post").get(name)
    pre = implementations("mhc_pre").get(name)
    if post is None or pre is None:
        pytest.skip(f"{name} has no separate mhc_post/mhc_pre to compare with")
    spec = target.spec
    inputs = spec.make_inputs(target.case)
    fused = spec.run(target.impl.fn, inputs)
    post_spec, pre_spec = get_spec("mhc_post"), get_spec("mhc_pre")
    new_residual = post_spec.call(post, post_spec.own_inputs(inputs))
    pre_outputs = pre_spec.call(pre, {**pre_spec.own_inputs(inputs), "residual": new_residual})
    separate = dict(zip(spec.outputs, (new_residual, *pre_outputs)))
    assert not outputs_agree(spec, fused, separate, bitwise=False)


def _bad_inputs(op, inputs):
    """(description, mutated inputs, word the error must contain) for one op."""
    first = next(iter(inputs))
    cases = [(f"{first} as float32", {**inputs, first: inputs[first].float()}, first),
             (f"{first} missing a dim", {**inputs, first: inputs[first][0]}, first)]
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dtype == torch.float32 and k != first:
            cases.append((f"{k} truncated", {**inputs, k: v[..., :-1]}, k))
            cases.append((f"{k} as bfloat16", {**inputs, k: v.bfloat16()}, k))
    return cases


@pytest.mark.sweep(tokens=[3], hidden=[64])
def test_bad_input_raises_clear_error(target):
    if target.impl.name not in SHIPPED:
        pytest.skip("error messages are part of the shipped kernels' contract only")
    inputs = target.spec.make_inputs(target.case)
    target.spec.call(target.impl.fn, inputs)  # a good call first: its checks are kept per signature
    for _what, bad, word in _bad_inputs(target.op, inputs):
        for _ in range(2):  # and a failed check is never kept
            with pytest.raises(ContractError, match=word):
                target.spec.call(target.impl.fn, bad)
