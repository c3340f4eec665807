"""The harness's pytest options (the "pytest" rows of :mod:`harness.options`), their validation,
its markers, and the run's configuration: the selection resolved once, the report folder's
writers, the Triton mode, the kernel families and ``--impl-module``s."""

from __future__ import annotations

import pytest

from harness import adapters, families
from harness.core import device as harness_device
from harness.core.registry import records
from harness.options import add_options
from harness.pytest_plugin.context import report_dir, selection, xdist_worker


def pytest_addoption(parser):
    add_options(parser.getgroup("harness"), "pytest")


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
    chosen = selection(config)
    folder = report_dir(config)
    if folder is not None:
        # The test command itself writes the whole report folder (results, junit.xml, run.json,
        # summary.md, report.html), so CI publishes it without running the suites twice.
        folder.mkdir(parents=True, exist_ok=True)
        if not config.option.xmlpath:
            config.option.xmlpath = str(folder / "junit.xml")
        from harness.cases.saving import SavedCases

        config.pluginmanager.register(SavedCases(folder, chosen.save_cases, chosen.impl_modules),
                                      "harness-saved-cases")
        if xdist_worker(config) is None:
            from harness.pytest_plugin.durations import DurationLog

            config.pluginmanager.register(DurationLog(folder), "harness-durations")
    harness_device.configure_triton(cpu_tensors=chosen.device == "cpu")
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    from harness.impl_modules import ImplModuleError, load_impl_modules

    adapters.scope_to(chosen.adapter_scope())
    families.load()
    try:
        load_impl_modules(list(chosen.impl_modules), env=True)
    except ImplModuleError as exc:
        raise pytest.UsageError(str(exc)) from exc
    check_names(chosen)



def check_names(chosen) -> None:
    """``--op`` names a known op, ``--impl`` and ``--ab`` registered implementations, else a
    usage error."""
    from harness.core.ops import op_names

    bad_ops = sorted(set(chosen.ops) - set(op_names()))
    if bad_ops:
        raise pytest.UsageError(f"--op {', '.join(bad_ops)}: no such op; the ops are "
                                f"{', '.join(op_names())}")
    known = {name for op in op_names() for name in records(op)}
    unknown = sorted(chosen.named() - known)
    if unknown:
        raise pytest.UsageError(
            f"--impl {', '.join(unknown)}: no such implementation is registered (known: "
            f"{', '.join(sorted(known))}); load it with --impl-module or fix the name")
