"""Index values the shipped Triton kernels check on the device (row windows, context lengths,
slots; ``kernels.runtime.deferred``) still fail the call: on the CPU at once, on a GPU at the next
``raise_pending()`` (every call the harness judges), with a message naming the row, and without
a host synchronisation inside the op."""

import pytest
import torch

from kernels.runtime import deferred
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


@pytest.fixture
def cpu_pool(monkeypatch):
    """A device ring on the CPU: the captured-word pool's bookkeeping without a GPU (on a GPU,
    ``test_cuda_graph_replay`` drives it through real graphs)."""
    device = torch.device("cpu")
    monkeypatch.setitem(deferred._RINGS, device, deferred._Ring(device))
    yield device
    deferred.forget_captured()


def test_a_captured_calls_error_stays_until_a_check_reads_it(cpu_pool):
    """No replay zeroes a pooled word (``atomic_max`` never lowers it), so a clean replay after
    a bad one cannot hide it; the check that reads it zeroes it."""
    explain = deferred.explainer({1: "slot of token {row} past the cache"})
    words, index = deferred.claim_captured(cpu_pool, explain)
    words[index] = deferred.pack(1, 5)
    with pytest.raises(ContractError, match="token 5 past the cache"):
        deferred.raise_pending()
    deferred.raise_pending()


def test_captured_words_are_handed_out_again_only_zeroed_after_their_graphs_go(cpu_pool):
    explain = deferred.explainer({1: "slot of token {row} past the cache"})
    (pool, first), (same_pool, second) = (deferred.claim_captured(cpu_pool, explain)
                                          for _ in range(2))
    assert same_pool is pool and first != second
    pool[first] = deferred.pack(1, 5)
    deferred.forget_captured()
    again, index = deferred.claim_captured(cpu_pool, explain)
    assert again is pool and index == first and int(pool[index]) == 0


def test_a_used_up_pool_gives_a_word_of_the_graph_itself(cpu_pool, monkeypatch):
    monkeypatch.setattr(deferred, "CAPTURED", 1)
    explain = deferred.explainer({1: "slot of token {row} past the cache"})
    pool, _ = deferred.claim_captured(cpu_pool, explain)
    word, index = deferred.claim_captured(cpu_pool, explain)
    assert word is not pool and word.numel() == 1 and index == 0 and int(word[0]) == 0
