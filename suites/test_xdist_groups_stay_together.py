"""Tests marked with one ``xdist_group`` run on one pytest-xdist worker (the E2E suite's tests
share one server run through a module fixture), under the pytest and pytest-xdist releases
installed here: pytest 9.2 stopped reading the node-id suffix by which pytest-xdist 3.8's own
``loadgroup`` groups them (``harness.pytest_plugin.xdist_groups``)."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.machinery, pytest.mark.host_only]

TESTS = """
import os
import pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    print("worker", os.environ["PYTEST_XDIST_WORKER"], "group")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    print("worker", os.environ["PYTEST_XDIST_WORKER"], "free")
"""


def _workers(tmp_path, *args: str) -> dict[str, set[str]]:
    """Which workers ran the grouped and the free tests (the harness's grouping plugin alone,
    without the rest of the harness, so the workers start in a second)."""
    (tmp_path / "test_groups.py").write_text(textwrap.dedent(TESTS))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "harness.pytest_plugin.xdist_groups", "-n", "2", "-rA", "-q", *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen: dict[str, set[str]] = {"group": set(), "free": set()}
    for line in proc.stdout.splitlines():
        if line.startswith("worker "):
            _, worker, kind = line.split()
            seen[kind].add(worker)
    assert sum(map(len, seen.values())), proc.stdout[-3000:]
    return seen


def test_a_group_runs_on_one_worker(tmp_path):
    """-n's default scheduling; an explicit ``--dist loadgroup`` takes the same path."""
    seen = _workers(tmp_path)
    assert len(seen["group"]) == 1, seen


CRASHES = """
import os
import pathlib
import time

import pytest

MARK = pathlib.Path(os.environ["MARK_DIR"])

def pytest_collection_modifyitems(items):
    # A replacement worker announces that it is collecting, then takes its time.
    if os.environ.get("PYTEST_XDIST_WORKER") not in ("gw0", "gw1"):
        (MARK / "replacement-collecting").touch()
        time.sleep(3)
"""

DYING = """
import os
import pathlib
import time

import pytest

MARK = pathlib.Path(os.environ["MARK_DIR"])

@pytest.mark.parametrize("i", range(2))
def test_dies(i):
    if os.environ["PYTEST_XDIST_WORKER"] == "gw0":
        os.abort()
    deadline = time.monotonic() + 60
    while not (MARK / "replacement-collecting").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.abort()

@pytest.mark.parametrize("i", range(4))
def test_lives(i):
    pass
"""


def test_a_worker_dying_while_its_replacement_collects_leaves_the_run_going(tmp_path):
    """Two workers die, the second while the first's replacement is still collecting (kernels
    that fault on the GPU end their worker, often several at once): the run goes on with the
    replacements, reports both deaths as failures and passes the rest, with no INTERNALERROR."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CRASHES))
    (tmp_path / "test_dying.py").write_text(textwrap.dedent(DYING))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "harness.pytest_plugin.xdist_groups", "-n", "2", "-q",
                           "--max-worker-restart", "4", "-p", "no:faulthandler"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "MARK_DIR": str(tmp_path)})
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in out, out[-3000:]
    assert (tmp_path / "replacement-collecting").exists(), out[-3000:]
    assert "2 failed, 4 passed" in out, out[-3000:]
