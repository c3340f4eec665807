"""Implementations whose parameters are not the contract's: the harness binds inputs to an
op's declared signature by name and calls positionally in that order (as vLLM does), so a
shipped kernel that renames or reorders a parameter would be handed the wrong tensor."""

import inspect

import pytest

from harness.core.ops import op_names
from harness.core.registry import records
from harness.core.specs import get_spec

pytestmark = pytest.mark.machinery


SHIPPED = [(op, name) for op in op_names() for name, impl in sorted(records(op).items())
           if impl.source.startswith("kernels.")]


@pytest.mark.parametrize("op,name", SHIPPED, ids=[f"{op}-{name}" for op, name in SHIPPED])
def test_shipped_parameters_are_the_contract_in_order(op, name):
    contract = list(get_spec(op).signature.parameters)
    params = list(inspect.signature(records(op)[name].fn).parameters)
    assert params[:len(contract)] == contract, (
        f"{op}/{name} takes {params}, the contract {contract}: rename or reorder its parameters "
        "as ../shared/spec/ops.md states them")


def test_inputs_bind_by_name_whatever_their_order():
    spec = get_spec("mhc_post")
    inputs = {"comb_res_mix": "c", "x": "x", "post_layer_mix": "p", "residual": "r"}
    assert spec.arguments(inputs) == ("x", "r", "p", "c")


def test_a_missing_or_unknown_argument_is_named():
    spec = get_spec("mhc_post")
    with pytest.raises(TypeError, match="comb_res_mix"):
        spec.arguments({"x": 1, "residual": 2, "post_layer_mix": 3})
    with pytest.raises(TypeError, match="residule"):
        spec.arguments({"x": 1, "residule": 2, "post_layer_mix": 3, "comb_res_mix": 4})
