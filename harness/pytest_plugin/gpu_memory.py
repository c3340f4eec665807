"""One GPU shared by the xdist workers of a run: a test marked ``device_memory_heavy`` (tens
of GB for a float64 reference, measured up to 56 GiB on an H100) runs with the GPU to itself;
the other tests share it, and memory goes back between tests (``release``, which the pytest
plugin calls after each test's teardown, while the test still holds its share).

Two lock files (``fcntl``), so the workers need no coordinator and a killed worker's locks free
themselves: ``room`` is held shared by every running light test and exclusively by a heavy one;
``gate`` is held by a heavy test while it waits for the room, so that light tests starting
meanwhile queue behind it instead of starving it.

Measured on an H100 with 8 workers (nightly profile): heavy tests sharing the GPU in two slots,
with the light tests beside them, ran out of memory (light tests alone reach 25 GiB)."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import pathlib
import sys
import tempfile
import time

HELD_ENV = "KERNEL_HARNESS_GPU_SHARE_HELD"
"""The process id of a test holding its share, while it does: a harness run that the test
starts in a subprocess (the CLI, bisect and shard suites do) runs under its parent's share
instead of queueing for one, which would deadlock behind a heavy test that waits for the parent
to finish."""

RETAINED_GIB = 1
"""Memory a finished test still holds above which a garbage collection is worth its ~0.5 s
(tensors kept alive by reference cycles, e.g. a failure's traceback)."""


def _lock_path(name: str) -> pathlib.Path:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_")
    return pathlib.Path(tempfile.gettempdir()) / f"kernel-harness-gpu{visible}-{name}-{os.getuid()}.lock"


@contextlib.contextmanager
def gpu_share(heavy: bool):
    """Hold the GPU for one test: alone when ``heavy``, else beside other light tests. Yields
    the seconds spent waiting."""
    if os.environ.get(HELD_ENV, str(os.getpid())) != str(os.getpid()):
        yield 0.0  # a parent process holds the share for this run
        return
    started = time.monotonic()
    with open(_lock_path("gate"), "w") as gate, open(_lock_path("room"), "w") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if heavy:
            fcntl.flock(room, fcntl.LOCK_EX)
        fcntl.flock(gate, fcntl.LOCK_UN)
        if not heavy:
            fcntl.flock(room, fcntl.LOCK_SH)
        os.environ[HELD_ENV] = str(os.getpid())
        try:
            yield time.monotonic() - started
        finally:
            os.environ.pop(HELD_ENV, None)
            fcntl.flock(room, fcntl.LOCK_UN)


def release() -> None:
    """Give cached GPU memory back to the other workers; collect garbage first when the
    finished test still holds more than RETAINED_GIB."""
    import torch

    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)  # pytest keeps a failure's frames (and tensors) alive here
    if torch.cuda.current_stream() != torch.cuda.default_stream():
        torch.cuda.set_stream(torch.cuda.default_stream())  # a test left a stream context
    if torch.cuda.memory_allocated() > RETAINED_GIB * 2 ** 30:
        gc.collect()
    torch.cuda.empty_cache()


def reset_peak() -> None:
    import torch

    torch.cuda.reset_peak_memory_stats()


def retained_gib() -> float:
    import torch

    return round(torch.cuda.memory_reserved() / 2 ** 30, 2)


def peak_gib() -> float:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
