"""pytest-xdist workers split the machine's cores between their thread pools
(``harness.pytest_plugin.worker_threads``): each starts with ``cores // workers`` threads for
torch's and BLAS's pools, and a user's own setting is kept."""

import os
import subprocess
import sys
import textwrap

import pytest

from harness.pytest_plugin.worker_threads import threads_per_worker

pytestmark = [pytest.mark.machinery, pytest.mark.host_only]

TESTS = """
import os

def test_threads():
    import torch
    print("threads", os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())
"""


def _threads(tmp_path, **env) -> set[tuple[str, str]]:
    (tmp_path / "test_threads.py").write_text(textwrap.dedent(TESTS))
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                              "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "harness.pytest_plugin.worker_threads", "-n", "2", "-rA", "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**clean, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = {tuple(line.split()[1:3]) for line in proc.stdout.splitlines()
            if line.startswith("threads ")}
    assert seen, proc.stdout[-3000:]
    return seen


def test_each_worker_gets_its_share_of_the_cores(tmp_path):
    share = str(threads_per_worker(2))
    assert _threads(tmp_path) == {(share, share)}


def test_a_thread_count_the_user_set_is_kept(tmp_path):
    assert {env for env, _ in _threads(tmp_path, OMP_NUM_THREADS="3")} == {"3"}
