"""The harness's pytest options, their validation, its markers, and the run's configuration:
the report folder's writers, the Triton mode, the kernel families and ``--impl-module``s."""

from __future__ import annotations

import os

import pytest

from harness import adapters, families
from harness.core import device as harness_device
from harness.core.registry import records
from harness.pytest_plugin.context import report_dir, run_profile, xdist_worker


def pytest_addoption(parser):
    group = parser.getgroup("harness")
    group.addoption("--profile", default=None,
                    help="sweep profile: smoke, ci, nightly, full (default: smoke on CPU, ci on GPU)")
    group.addoption("--op", action="append", default=[], metavar="OP",
                    help="only the tests about this op (repeatable): its sweep cases, and the "
                         "other tests of suites that sweep it")
    group.addoption("--impl", action="append", default=[],
                    help="only test and judge these implementations (repeatable); the "
                         "reference still serves as ground truth. Without it the run judges the "
                         "harness's kernels and --impl-module's, and shows the vendors'")
    group.addoption("--require", action="append", default=[], metavar="NAME",
                    help="implementation that must be judged (repeatable): its failures and "
                         "coverage count (a vendor's too, which the profile's default only "
                         "shows); if it is not registered, cannot run here or runs no case, the "
                         "verdict is 'could not test' (125) with the reason, whatever else passed")
    group.addoption("--accept-partial-coverage", action="store_true", default=False,
                    help="call the run good even when a judged implementation skipped more of "
                         "its cases by its own declarations (Unsupported, CostLimit) than the "
                         "profile's stated share, or an op entirely (default: could not test, "
                         "125, with the counts)")
    group.addoption("--impl-module", action="append", default=[],
                    help="import this module or .py file first, so it can register implementations")
    group.addoption("--ab", default=None,
                    help="A,B: compare implementation B with A (and both with the reference)")
    group.addoption("--device", default=None, help="cuda or cpu (default: cuda when present)")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run only shard I of N (deterministic, balanced by expected cost); "
                         "merge the shards' report folders with `harness report DIR...`")
    group.addoption("--report-dir", default=os.environ.get("HARNESS_REPORT_DIR"),
                    help="write the report folder here: result rows (CSV, JSON), junit.xml, "
                         "run.json, summary.md, report.html, and cases/ (failing cases, for "
                         "`harness replay`)")
    group.addoption("--interpreted-vendors", choices=("run", "skip"), default="run",
                    help="skip: on a CPU, vendors' Triton entries are not swept under the Triton "
                         "interpreter unless --impl/--require names them; each case is skipped "
                         "saying so (the test command's choice: `harness run` and the GPU "
                         "profiles sweep them; vendors' torch paths and adapter tests still run)")
    group.addoption("--save-cases", action="append", default=[], metavar="OP",
                    help="with --report-dir, also save every case of OP, passing or not")


MARKERS = (
    "sweep(*axes, **values): axes of the profile to expand",
    "gpu: needs a CUDA/ROCm GPU; skipped with a reason elsewhere",
    "e2e: end-to-end run against an inference server",
    # pytest-xdist registers this marker only while it is active; runs with `-p no:xdist` (the
    # CLI's subprocesses, a bisect) must still collect the suites that use it under --strict-markers.
    "xdist_group(name): run these tests in one xdist worker",
    "implementation(*names): the implementations a test is about, for --impl (no names: none, "
    "e.g. vendor stand-ins)",
    "device_memory_heavy: needs tens of GB of GPU memory; runs one at a time across xdist workers",
    "machinery: tests the harness's own machinery (CLI, reports, sharding, fuzzer, imports, the "
    "E2E judge on seeded faults), not an implementation: the test command runs it, `harness run` "
    "only with --self-tests",
    "host_only: allocates no GPU memory itself, so it takes no GPU share (harness runs it starts "
    "in subprocesses take their own)",
)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    from harness.pytest_plugin.gpu_sharing import pin_worker_gpu

    pin_worker_gpu(config)
    folder = report_dir(config)
    if folder is not None:
        # The test command itself writes the whole report folder (results, junit.xml, run.json,
        # summary.md, report.html), so CI publishes it without running the suites twice.
        folder.mkdir(parents=True, exist_ok=True)
        if not config.option.xmlpath:
            config.option.xmlpath = str(folder / "junit.xml")
        from harness.cases.saving import SavedCases

        config.pluginmanager.register(SavedCases(config, folder), "harness-saved-cases")
        if xdist_worker(config) is None:
            from harness.pytest_plugin.durations import DurationLog

            config.pluginmanager.register(DurationLog(folder), "harness-durations")
    run_profile(config)
    harness_device.configure_triton(cpu_tensors=config.getoption("device") == "cpu")
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    from harness.impl_modules import ImplModuleError, load_impl_modules

    adapters.scope_to(_adapter_scope(config))
    families.load()
    try:
        load_impl_modules(config.getoption("impl_module") or [], env=True)
    except ImplModuleError as exc:
        raise pytest.UsageError(str(exc)) from exc
    _check_implementation_names(config)


def _implementations_named(config) -> set[str]:
    """The implementations ``--impl`` and ``--ab`` name (none: all)."""
    named = set(config.getoption("impl") or [])
    if config.getoption("ab"):
        named |= {name for name in config.getoption("ab").split(",") if name}
    return named


def _adapter_scope(config) -> set[str]:
    """The implementations whose adapters a run imports: those ``--impl``/``--ab`` name and those
    it ``--require``s (a required one left unimported would read as unable to run); none named
    by ``--impl``/``--ab``: every adapter."""
    named = _implementations_named(config)
    return named | set(config.getoption("require") or []) if named else set()


def _check_implementation_names(config) -> None:
    """``--op`` names a known op, ``--impl`` and ``--ab`` registered implementations, else a
    usage error."""
    from harness.core.ops import op_names

    bad_ops = sorted(set(config.getoption("op") or []) - set(op_names()))
    if bad_ops:
        raise pytest.UsageError(f"--op {', '.join(bad_ops)}: no such op; the ops are "
                                f"{', '.join(op_names())}")
    known = {name for op in op_names() for name in records(op)}
    if config.getoption("ab"):
        pair = config.getoption("ab").split(",")
        if len(pair) != 2 or not all(pair):
            raise pytest.UsageError(f"--ab wants two names, A,B; got {config.getoption('ab')!r}")
    wanted = _implementations_named(config)
    unknown = sorted(wanted - known)
    if unknown:
        raise pytest.UsageError(
            f"--impl {', '.join(unknown)}: no such implementation is registered (known: "
            f"{', '.join(sorted(known))}); load it with --impl-module or fix the name")
