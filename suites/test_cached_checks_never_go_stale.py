"""The shipped kernels keep their argument checks per call signature (``kernels.runtime.memo``): a
kept result must never let a bad call through. The contract suites call every bad argument
after a good call, twice; these tests hold the memo itself to its rule."""

import gc

import pytest
import torch

from harness.core.errors import ContractError
from kernels.runtime.memo import per_signature


def _counting(check):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return check(*args, **kwargs)
    return per_signature(counted), calls


def _bf16_only(t, *rest):
    if t.dtype != torch.bfloat16:
        raise ContractError(f"want bf16, got {t.dtype}")
    return tuple(t.shape)


def test_same_signature_runs_the_check_once_and_returns_its_result():
    check, calls = _counting(_bf16_only)
    a, b = torch.zeros(2, 3, dtype=torch.bfloat16), torch.ones(2, 3, dtype=torch.bfloat16)
    assert check(a) == (2, 3) and check(b) == (2, 3)
    assert len(calls) == 1


@pytest.mark.parametrize("other", [
    torch.zeros(2, 4, dtype=torch.bfloat16),                # shape
    torch.zeros(2, 3, dtype=torch.float32),                 # dtype
    torch.zeros(3, 2, dtype=torch.bfloat16).t(),            # strides
], ids=["shape", "dtype", "strides"])
def test_a_new_shape_dtype_or_layout_runs_the_check_again(other):
    check, calls = _counting(_bf16_only)
    check(torch.zeros(2, 3, dtype=torch.bfloat16))
    if other.dtype != torch.bfloat16:
        with pytest.raises(ContractError):
            check(other)
    else:
        check(other)
    assert len(calls) == 2


def test_a_failing_check_raises_every_time():
    check, calls = _counting(_bf16_only)
    bad = torch.zeros(2, 3)
    for _ in range(3):
        with pytest.raises(ContractError, match="want bf16"):
            check(bad)
    assert len(calls) == 3


def test_plain_values_are_part_of_the_signature():
    def positive(t, k):
        if k <= 0:
            raise ContractError(f"k must be > 0, got {k}")
    check, calls = _counting(positive)
    t = torch.zeros(1)
    check(t, 1)
    with pytest.raises(ContractError):
        check(t, 0)
    with pytest.raises(ContractError):
        check(t, False)  # equal to 0 and to a kept True: its type is in the key too
    check(t, True)
    assert len(calls) == 4


def test_tensors_inside_tuples_are_keyed_by_metadata_not_identity():
    """A tensor's hash is its id, which a freed tensor's successor may reuse: a pair (k, scale)
    kept by identity would pass a later pair of another shape."""
    def pair_rows(pair):
        k, scale = pair
        if scale.shape[0] != k.shape[0]:
            raise ContractError("scale must have one entry per row")
    check, calls = _counting(pair_rows)
    check((torch.zeros(4, 8), torch.zeros(4)))
    gc.collect()
    with pytest.raises(ContractError):
        check((torch.zeros(4, 8), torch.zeros(3)))
    assert len(calls) == 2


def test_arguments_without_a_known_signature_are_checked_every_call():
    class Holder:
        shape = (2, 3)
    check, calls = _counting(lambda obj: None)
    holder = Holder()
    check(holder)
    check(holder)
    check([1, {"a": 1}])
    assert len(calls) == 3


def test_a_frozen_dataclass_is_keyed_by_its_fields():
    """The mHC kernels keep their launches per (tensors, launch plan): a plan with other fields
    must build its own launch, an equal plan may share one."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Plan:
        block: int = 64

    @dataclasses.dataclass(frozen=True)
    class Holding:
        items: list

    check, calls = _counting(lambda t, plan: getattr(plan, "block", None))
    t = torch.zeros(1)
    assert check(t, Plan()) == 64 and check(t, Plan()) == 64
    assert check(t, Plan(block=128)) == 128
    assert len(calls) == 2
    check(t, Holding([1]))  # frozen, but its field cannot be hashed: checked every call
    check(t, Holding([1]))
    assert len(calls) == 4


def test_subclasses_of_keyed_types_are_checked_every_call():
    import enum

    class Mode(enum.IntEnum):
        A = 1
    check, calls = _counting(lambda t, mode: None)
    t = torch.zeros(1)
    check(t, Mode.A)
    check(t, Mode.A)
    assert len(calls) == 2


def test_a_zero_dim_tensor_passed_for_a_number_is_checked_every_call():
    """``int(t)`` of a 0-d tensor reads its value, which its metadata does not key."""
    def positive(k):
        if int(k) <= 0:
            raise ContractError(f"k must be > 0, got {int(k)}")
    check, calls = _counting(positive)
    check(torch.tensor(4))
    with pytest.raises(ContractError):
        check(torch.tensor(0))
    assert len(calls) == 2
