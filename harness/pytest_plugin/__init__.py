"""The harness's pytest plugin (``pytest_plugins = ["harness.pytest_plugin"]`` in conftest.py),
one module per job:

- :mod:`~harness.pytest_plugin.options`: options, their validation, markers, the run's setup;
- :mod:`~harness.pytest_plugin.sweep`: suites' ``sweep`` markers expanded into ``target``s;
- :mod:`~harness.pytest_plugin.deviations`: known deviations as strict xfails, only in the tests
  that evaluate a case they cover;
- :mod:`~harness.pytest_plugin.selection`: ``--impl``, ``--shard``, ordering, GPU-only skips;
- :mod:`~harness.pytest_plugin.gpu_sharing`: one GPU shared by xdist workers;
- :mod:`~harness.pytest_plugin.xdist_groups`: ``xdist_group`` markers keep their tests on one
  xdist worker (pytest 9.2 broke pytest-xdist's own ``loadgroup``);
- :mod:`~harness.pytest_plugin.worker_threads`: xdist workers split the cores' threads;
- :mod:`~harness.pytest_plugin.recording`: result rows, tallies, the report folder at the end;
- :mod:`~harness.pytest_plugin.judging`: which implementations decide the exit code, and the
  test command's exit status;
- :mod:`~harness.pytest_plugin.progress`: tests done, time elapsed and left, every half minute;
- :mod:`~harness.pytest_plugin.time_limit`: the per-case time limit (pytest-timeout), per profile;
- :mod:`~harness.pytest_plugin.in_flight`: the test each process runs, on disk (a crash names
  it), and SIGTERM stopping a run with its report written;
- :mod:`~harness.pytest_plugin.device_fault`: a test that leaves the CUDA context dead ends its
  process (a crash of that test) instead of failing every later one;
- :mod:`~harness.pytest_plugin.durations` and :mod:`harness.cases.saving`: registered with a
  report folder, one writes durations.csv, the other saves failing cases for replay.
"""

from harness.pytest_plugin.recording import OOM_MARKERS  # noqa: F401  (names of the one-file plugin)
from harness.pytest_plugin.selection import (CASE_PROPERTY, COLLECTED,  # noqa: F401
                                             heavy_last, implementations_of)
from harness.pytest_plugin.sweep import (AXES, LARGE_CASE_ELEMENTS, Target,  # noqa: F401
                                         _memory_marks)

pytest_plugins = [
    "harness.pytest_plugin.options",
    "harness.pytest_plugin.sweep",
    "harness.pytest_plugin.deviations",
    "harness.pytest_plugin.selection",
    "harness.pytest_plugin.gpu_sharing",
    "harness.pytest_plugin.xdist_groups",
    "harness.pytest_plugin.worker_threads",
    "harness.pytest_plugin.recording",
    "harness.pytest_plugin.judging",
    "harness.pytest_plugin.progress",
    "harness.pytest_plugin.time_limit",
    "harness.pytest_plugin.in_flight",
    "harness.pytest_plugin.device_fault",
]
