"""Checks of index values that run on the device and reach the host without stalling it.

A kernel that must validate index values (row windows, context lengths, slots) clamps them so no
access leaves its tensors and records the worst violation in an int32 *error word* (0: fine;
``tl.atomic_max``). Reading that word after every call would synchronise the host with the GPU,
which a serving loop cannot afford, and even an asynchronous copy costs the host far more per
call than taking an index (docs/kernels/harness_core.md). So a call only *claims* a word: on a
GPU, a slot of a per-device ring of zeroed words, with no host work beyond an index. The words
are read

- by ``raise_pending()``: one read of the slots claimed since the last check, which raises the
  first error and zeroes them. The harness calls it after every call it judges (``OpSpec.call``,
  ``OpSpec.collect``), so a bad input never passes as green;
- when a ring is full (every ``RING`` calls): the same check, the one synchronisation left,
  amortised over ``RING`` calls;
- on the CPU, at once after the launch (``launched``): nothing to save there;
- for calls captured in a CUDA graph: by ``raise_pending()`` outside capture, after the
  replays. Their words come from a per-device pool zeroed before the capture (``CAPTURED``
  words, handed out again by ``forget_captured()``), which no replay resets: an error of any
  replay stays until a check reads it, where a word reset by each replay let a clean replay
  hide a bad one before it. Nor does a captured call carry a zeroing kernel of its own, which
  would add a kernel to every replay (docs/kernels/harness_core.md has its cost). A call
  captured before any eager call made the pool, or after it ran out, gets a word zeroed in the
  graph as before (reset by each replay: check after each one);
- at the end of every test (``raise_left_behind``): an error no check read is raised on the
  test whose call flagged it, not on the next test of the worker.

``explain(word)`` turns a non-zero word into the message. It must hold no tensor (it outlives the
call until the next check): ops pack what the message needs (the code, a row) into the word.
"""

from __future__ import annotations

from typing import Any, Callable

from kernels.runtime.errors import ContractError

RING = 4096
CAPTURED = 4096
"""Words of a device's pool for calls captured in a CUDA graph."""
ROW_BITS = 24
"""Words packed as ``code << ROW_BITS | row`` (``pack``): the largest code wins, then the
largest row."""

_RINGS: dict[Any, "_Ring"] = {}
_CAPTURED: list[tuple[Any, Callable[[int], str]]] = []


def pack(code: int, row: int) -> int:
    return (code << ROW_BITS) | min(row, (1 << ROW_BITS) - 1)


def unpack(word: int) -> tuple[int, int]:
    return word >> ROW_BITS, word & ((1 << ROW_BITS) - 1)


def explainer(messages: dict[int, str], section: int = 3, **values) -> Callable[[int], str]:
    """``explain(word)``: the message of the word's code (``str.format`` with ``{row}``,
    ``{code}`` and ``values``; ints only, so nothing of the call is kept alive), naming the
    contract's section of ../shared/spec/ops.md."""
    def explain(word: int) -> str:
        code, row = unpack(word)
        text = messages.get(code, "kernel error code {code}").format(row=row, code=code, **values)
        return f"{text} (checked on the device) (contract: ../shared/spec/ops.md section {section})"
    return explain


class _Ring:
    def __init__(self, device) -> None:
        import torch

        self.words = torch.zeros(RING, dtype=torch.int32, device=device)
        self.explains: list[Callable[[int], str]] = []
        self.captured = torch.zeros(CAPTURED, dtype=torch.int32, device=device)
        self.captured_used = 0

    def claim_captured(self) -> int | None:
        """The index of a free word of the captured pool, or None when it is used up."""
        if self.captured_used == CAPTURED:
            return None
        index, self.captured_used = self.captured_used, self.captured_used + 1
        return index

    def release_captured(self) -> None:
        self.captured[:self.captured_used].zero_()
        self.captured_used = 0

    def claim(self, explain: Callable[[int], str]) -> int:
        if len(self.explains) == RING:
            self.check()
        self.explains.append(explain)
        return len(self.explains) - 1

    def check(self) -> None:
        explains, self.explains = self.explains, []
        if not explains:
            return
        used = self.words[:len(explains)]
        words = used.tolist()
        used.zero_()
        for word, explain in zip(words, explains):
            if word:
                raise ContractError(explain(word))


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def claim(device, explain: Callable[[int], str]) -> tuple[Any, int]:
    """(words, index): the kernel records its error with ``atomic_max(words + index, word)``."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return torch.zeros(1, dtype=torch.int32, device=device), 0
    if torch.cuda.is_current_stream_capturing():
        return claim_captured(device, explain)
    ring = _RINGS.get(device)
    if ring is None:
        ring = _RINGS[device] = _Ring(device)
    return ring.words, ring.claim(explain)


def claim_captured(device, explain: Callable[[int], str]) -> tuple[Any, int]:
    """``claim`` while capturing: a word of the device's pool, else one zeroed in the graph."""
    import torch

    ring = _RINGS.get(torch.device(device))
    index = ring.claim_captured() if ring is not None else None
    words, index = ((ring.captured, index) if index is not None
                    else (torch.zeros(1, dtype=torch.int32, device=device), 0))
    _CAPTURED.append((words[index:index + 1], explain))
    return words, index


def launched(words, index: int, explain: Callable[[int], str]) -> None:
    """After the launch: on the CPU the word is read at once; on a GPU nothing happens here."""
    if not words.is_cuda:
        word = int(words[index])
        if word:
            raise ContractError(explain(word))


def raise_pending() -> None:
    """Read every claimed word (and every captured one) and raise the first error."""
    if _capturing():
        return
    for ring in list(_RINGS.values()):
        ring.check()
    for word, explain in list(_CAPTURED):
        value = int(word)
        if value:
            word.zero_()
            raise ContractError(explain(value))


def raise_left_behind() -> None:
    """``raise_pending()`` at the end of a test (the harness's pytest plugin): an error still
    unread then would be raised by the next check, in whatever test the worker runs next (red
    there, green when that test runs alone). It is raised here instead, naming this test as the
    one that left it, and dropped so the next test starts clean."""
    try:
        raise_pending()
    except ContractError as exc:
        forget_captured()
        raise ContractError(f"left unread by this test, found when it ended: {exc}. Read the "
                            "errors of the calls the test makes (deferred.raise_pending(), which "
                            "OpSpec.call does), or they fail the next test instead") from None


def forget_captured() -> None:
    """Drop the words of captured calls (when their graph is destroyed, or will not be replayed
    again) and zero the pools for the next capture."""
    _CAPTURED.clear()
    if _capturing():
        return
    for ring in _RINGS.values():
        ring.release_captured()
