"""A kernel that faults on the GPU (a device-side assert, an illegal or misaligned address)
leaves the process's CUDA context unusable: every later test of that process would fail with the
same error, thousands of failures blamed on innocent kernels. After each test the device is
asked whether it still runs a kernel (by behaviour, not by an error's text: a test may catch the
error itself, as a detector shown a seeded fault does); if not, the process ends right there,
with the test still named in flight:

- under pytest-xdist the controller reports that test as crashed and starts a fresh worker for
  the tests that remain (``--max-worker-restart`` bounds how many times);
- in one process the session stops with exit 1 naming the test (``harness run`` reports it as
  a crash, :mod:`harness.supervise`).

A CPU-only process never registers this plugin.
"""

from __future__ import annotations

import os
import sys

import pytest

from harness.pytest_plugin.context import xdist_worker

EXIT_CODE = 70
"""The exit status of a worker that ended on a dead CUDA context (EX_SOFTWARE)."""


def context_is_dead() -> bool:
    """Whether the current CUDA context can no longer run a kernel."""
    import torch
    if not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
        return int(torch.ones(1, device="cuda").add_(1).item()) != 2
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return True


class DeviceFault:
    def __init__(self, config, worker: str | None) -> None:
        self.config, self.worker = config, worker

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        result = yield
        if context_is_dead():
            message = (f"harness: {item.nodeid} left the GPU's CUDA context unusable (a kernel "
                       "faulted on the device); this process ends here so that no later test is "
                       "blamed for it. Rerun it alone with CUDA_LAUNCH_BLOCKING=1 to see the "
                       "faulting kernel.")
            if self.worker is not None:
                from harness.pytest_plugin.recording import write_rows

                write_rows(self.config)  # the rows of the tests before it, and its own
                sys.stderr.write(message + "\n")
                sys.stderr.flush()
                os._exit(EXIT_CODE)
            pytest.exit(message, returncode=1)
        return result


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    from harness.core import device
    if device.has_gpu() and not config.option.collectonly:
        config.pluginmanager.register(DeviceFault(config, xdist_worker(config)),
                                      "harness-device-fault")
