"""Index values the shipped Triton kernels check on the device (row windows, context lengths,
slots; ``harness.core.deferred``) still fail the call: on the CPU at once, on a GPU at the next
``raise_pending()`` (every call the harness judges), with a message naming the row, and without
a host synchronisation inside the op."""

import pytest
import torch

from harness.core import deferred
from harness.core.errors import ContractError
from harness.core.registry import records
from harness.core.specs import get_spec

pytestmark = pytest.mark.implementation("triton")


def _bad_prefill_call(device: str):
    logits = torch.randn(4, 64, device=device)
    starts = torch.zeros(4, dtype=torch.int32, device=device)
    ends = torch.full((4,), 64, dtype=torch.int32, device=device)
    ends[2] = -1
    indices = torch.empty(4, 8, dtype=torch.int32, device=device)
    return (logits, starts, ends, indices, 4, 64, 1, 8)


def _triton_prefill():
    impl = records("top_k_per_row_prefill").get("triton")
    if impl is None or not impl.available:
        pytest.skip(f"triton top-k not runnable here: {impl.reason if impl else 'absent'}")
    return impl.fn


def test_words_pack_the_code_and_the_row():
    assert deferred.unpack(deferred.pack(3, 1234)) == (3, 1234)
    assert deferred.pack(2, 0) > deferred.pack(1, (1 << deferred.ROW_BITS) - 1)


def test_a_bad_window_fails_the_call_and_names_the_row():
    fn = _triton_prefill()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with pytest.raises(ContractError, match="row 2: row_ends < row_starts"):
        fn(*_bad_prefill_call(device))
        deferred.raise_pending()


@pytest.mark.gpu
def test_on_a_gpu_the_error_waits_for_the_check_not_for_the_kernel():
    fn = _triton_prefill()
    deferred.raise_pending()
    fn(*_bad_prefill_call("cuda"))
    with pytest.raises(ContractError, match="row 2"):
        deferred.raise_pending()
    deferred.raise_pending()


@pytest.mark.gpu
def test_the_harness_call_raises_from_the_bad_call_itself():
    fn = _triton_prefill()
    spec = get_spec("top_k_per_row_prefill")
    args = dict(zip(spec.signature.parameters, _bad_prefill_call("cuda")))
    with pytest.raises(ContractError, match="row 2"):
        spec.call(fn, args)


def test_an_error_left_unread_fails_the_test_that_left_it_not_the_next():
    """The plugin reads every test's leftovers when it ends (``raise_left_behind``). Here a
    flagged word no check read (a captured call's; on the CPU its word is a plain tensor)."""
    explain = deferred.explainer({1: "slot of token {row} past the cache"})
    deferred._CAPTURED.append((torch.tensor([deferred.pack(1, 5)], dtype=torch.int32), explain))
    with pytest.raises(ContractError, match="left unread by this test.*token 5 past the cache"):
        deferred.raise_left_behind()
    deferred.raise_pending()
