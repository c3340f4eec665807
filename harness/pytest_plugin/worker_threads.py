"""pytest-xdist workers share the machine's cores: each starts with ``cores // workers`` threads
for torch's OpenMP pool and the BLAS libraries' (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``), unless the user set them. Every worker's torch otherwise starts one
thread per core, and on a 2-core machine under ``-n 2`` the two pools spin against each other:
the mHC accuracy and detector suites took 23% longer (docs/main-job.md). Set in the controller
before the workers start, so they read it when their libraries load."""

from __future__ import annotations

import os

import pytest

from harness.pytest_plugin.context import xdist_worker

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def threads_per_worker(workers: int) -> int:
    return max(1, usable_cores() // max(1, workers))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    workers = getattr(config.option, "numprocesses", None)
    if xdist_worker(config) is not None or not isinstance(workers, int) or workers < 2:
        return
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads_per_worker(workers)))
