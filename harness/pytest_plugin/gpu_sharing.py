"""One GPU shared by pytest-xdist workers: each worker pinned to a GPU, heavy tests run with
the GPU to themselves, and each test's GPU memory figures recorded (harness.pytest_plugin.
gpu_memory holds the locks)."""

from __future__ import annotations

import os

import pytest

from harness.core import device as harness_device
from harness.pytest_plugin.context import xdist_worker


def pin_worker_gpu(config) -> None:
    """Under pytest-xdist on a multi-GPU host, worker gwN uses GPU N mod count (set before any
    CUDA context exists), so ``-n auto`` spreads the suites over the GPUs."""
    worker = xdist_worker(config) or ""
    if not worker.startswith("gw") or "CUDA_VISIBLE_DEVICES" in os.environ:
        return
    import torch

    count = torch.cuda.device_count()
    if count > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(int(worker[2:]) % count)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """On a GPU: a heavy test runs with the GPU to itself, the others share it
    (harness.pytest_plugin.gpu_memory). The share covers setup, call and teardown, and memory
    goes back before it ends: a function fixture or a failure's frames still holding a heavy
    test's tensors after its call made the next heavy test run out of memory."""
    if not harness_device.has_gpu() or item.get_closest_marker("host_only") is not None:
        yield
        return
    from harness.pytest_plugin import gpu_memory

    heavy = item.get_closest_marker("device_memory_heavy") is not None
    with gpu_memory.gpu_share(heavy) as waited:
        item.user_properties.append(("gpu_lock_wait_s", round(waited, 3)))
        item.user_properties.append(("heavy", heavy))
        gpu_memory.reset_peak()
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's fixtures are finalised: GPU memory goes back to the other workers, and
    the test's peak and what its process still holds after that (``gpu_retained_gib``: memory
    pinned by live tensors or by cached segments that cannot be returned) go to durations.csv."""
    yield
    if harness_device.has_gpu():
        from harness.pytest_plugin import gpu_memory

        gpu_memory.release()
        item.user_properties.append(("gpu_peak_gib", gpu_memory.peak_gib()))
        item.user_properties.append(("gpu_retained_gib", gpu_memory.retained_gib()))
