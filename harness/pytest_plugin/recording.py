"""What a run records: result rows (the ``record`` fixture), per-implementation tallies on
``config.stash`` (cases run, failures, out-of-memory failures, skipped cases), and at the end
the report folder's run.json and summary (``--report-dir``)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib

import pytest

from kernels.runtime import deferred
from harness.core import device as harness_device
from harness.core.errors import is_out_of_memory
from harness.core.registry import records
from harness.core.results import SESSION
from harness.options.selection import spelt_out
from harness.pytest_plugin.context import report_dir, run_profile, selection, xdist_worker
from harness.pytest_plugin.in_flight import stopped
from harness.pytest_plugin.selection import CASE_PROPERTY, COLLECTED, implementations_of
from harness.pytest_plugin.sweep import Target
from harness.pytest_plugin.time_limit import case_time_limit, is_time_limit

OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "HIP out of memory")
"""Texts of device out-of-memory messages. They decide nothing (out of memory is decided by the
exception's class: ``harness.core.errors.is_out_of_memory``); tests use them to check that an
implementation's own out-of-memory failure does not read like the harness's."""
FAILURE_CAUSE = "failure_cause"
"""The user property a failed test's report carries when its exception says why by its class:
``out_of_memory`` (the machine's) or ``timed_out`` (the per-case time limit)."""


ABOUT = "harness_about"
"""The user property a failed test's report carries: the implementations it is about (JSON
list; empty: about the harness itself or no implementation in particular, so it always counts)."""


@dataclasses.dataclass
class Tally:
    """Outcome tallies for the verdict: cases run per implementation; failures that are the
    machine's (out of memory) rather than the kernel's, and what each failure is about; skipped
    sweep cases; per implementation and op, its sweep cases judged and skipped by kind."""
    ran: dict = dataclasses.field(default_factory=dict)
    failed: list = dataclasses.field(default_factory=list)
    out_of_memory: list = dataclasses.field(default_factory=list)
    skipped_cases: list = dataclasses.field(default_factory=list)
    failed_cases: list = dataclasses.field(default_factory=list)
    timed_out: list = dataclasses.field(default_factory=list)
    failed_about: dict = dataclasses.field(default_factory=dict)
    coverage: dict = dataclasses.field(default_factory=dict)

    def _count(self, report, case: dict) -> None:
        """One sweep case of ``case['impl']`` on ``case['case_op']``: judged (passed, failed or
        a known deviation's xfail) or skipped, by kind (sweep.SKIP_KINDS)."""
        if report.when == "setup" and report.skipped:
            kind = case.get("not_judged") or "other"
        elif report.when == "call":
            kind = "other" if report.skipped and not hasattr(report, "wasxfail") else "judged"
        else:
            return
        counts = self.coverage.setdefault((case["impl"], case["case_op"]), {})
        counts[kind] = counts.get(kind, 0) + 1

    def pytest_runtest_logreport(self, report):
        cause = dict(report.user_properties).get(FAILURE_CAUSE)
        if report.failed and cause == "out_of_memory":
            self.out_of_memory.append(report.nodeid)
        elif report.failed:
            self.failed.append(report.nodeid)
            if cause == "timed_out":
                self.timed_out.append(report.nodeid)
            about = dict(report.user_properties).get(ABOUT)
            if about is not None:
                self.failed_about[report.nodeid] = json.loads(about)
        case = dict(report.user_properties).get(CASE_PROPERTY)
        if case:
            self._count(report, json.loads(case))
            if report.failed:
                self.failed_cases.append({**json.loads(case), "test": report.nodeid,
                                          "error": _crash_line(report)})
        if report.when == "call" and not report.skipped:
            for key, value in report.user_properties:
                if key == "impl":
                    self.ran[value] = self.ran.get(value, 0) + 1
        if report.skipped and not hasattr(report, "wasxfail"):
            case = dict(report.user_properties).get(CASE_PROPERTY)
            if case:
                reason = (report.longrepr[2] if isinstance(report.longrepr, tuple)
                          else str(report.longrepr))
                self.skipped_cases.append({**json.loads(case),
                                           "reason": str(reason).removeprefix("Skipped: ")})


def _crash_line(report) -> str:
    """The failed test's exception in one line (pytest's crash message), at most 300 chars."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or (report.longreprtext.strip().splitlines() or [""])[-1]
    return " ".join(str(text).split())[:300]


TALLY = pytest.StashKey[Tally]()
STARTED = pytest.StashKey[datetime.datetime]()


def pytest_configure(config):
    config.stash[TALLY] = Tally()
    config.pluginmanager.register(config.stash[TALLY], "harness-tally")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Marks a failure whose exception is out of memory, or the time limit, by its class, and
    names the implementations a failed test is about (``ABOUT``: the verdict counts only the
    failures of the implementations the run judges). Outermost (tryfirst), so it sees the
    outcome pytest's xfail handling settles. The report reaches the controller under xdist with
    its user properties."""
    report = yield
    if report.failed and call.excinfo is not None:
        error = call.excinfo.value
        cause = ("out_of_memory" if is_out_of_memory(error)
                 else "timed_out" if is_time_limit(error) else None)
        if cause:
            report.user_properties = [*report.user_properties, (FAILURE_CAUSE, cause)]
    if report.failed and ABOUT not in dict(report.user_properties):
        about = [] if item.get_closest_marker("machinery") else sorted(implementations_of(item))
        report.user_properties = [*report.user_properties, (ABOUT, json.dumps(about))]
    return report


@pytest.fixture(autouse=True)
def _device_errors_read_by_their_test():
    """Every test ends with its calls' device-checked errors read (``deferred``)."""
    yield
    deferred.raise_left_behind()


@pytest.fixture
def device(request) -> str:
    """The device the run targets (``--device``, else CUDA when present, else CPU)."""
    return selection(request.config).device or harness_device.default_device()


@pytest.fixture
def record(request):
    """Append result rows (dicts) to the session's result log, each with the test's node id (the
    report turns it into the command that reproduces only that test)."""
    test = f"{request.config.rootpath}/{request.node.nodeid}"
    counted = {value for key, value in request.node.user_properties if key == "impl"}

    def extend(rows):
        rows = [{**row, "test": test} for row in rows]
        for group in _failure_groups(rows):
            if ("failure_group", group) not in request.node.user_properties:
                request.node.user_properties.append(("failure_group", group))
        for impl in sorted({str(r["impl"]) for r in rows if r.get("impl")} - counted):
            # Rows of an implementation count as that implementation having run (a suite that
            # runs vLLM's own code, not through a sweep target, still counts for --impl vllm).
            request.node.user_properties.append(("impl", impl))
            counted.add(impl)
        SESSION.extend(rows)
    return extend


def _failure_groups(rows) -> list[str]:
    """The cause groups of the failing rows (reports.tables.failure_groups' key), carried into
    JUnit as ``failure_group`` properties so a CI page can group failures too."""
    from harness.core.verdicts import SEEDED_FAULT_PREFIX, failure_kind

    return sorted({f"{r.get('impl')} / {r.get('op')} / {str(r.get('output')).split('/')[0]}: "
                   f"{failure_kind(r)}" for r in rows if r.get("verdict") == "fail"
                   and not str(r.get("impl", "")).startswith(SEEDED_FAULT_PREFIX)})


def pytest_runtest_setup(item):
    """Tag each sweep test with its implementation, so the controller (also under xdist) can
    count what every implementation actually ran."""
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    if isinstance(target, Target):
        item.user_properties.append(("impl", target.impl.name))


def _say_notices(config) -> None:
    """What the vendor adapters found about this machine's packages, once, by the controller."""
    from harness.adapters.base import NOTICES

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or xdist_worker(config) is not None:
        return
    for line in NOTICES:
        reporter.write_line(f"note: {line}")


def pytest_sessionstart(session):
    session.config.stash[STARTED] = datetime.datetime.now()
    _say_notices(session.config)


def write_rows(config) -> None:
    """This process's recorded rows into the report folder (``results[-<worker>].csv``): at the
    session's end, and before a process that must end early (a dead CUDA context) exits, so
    that what it judged before is not lost."""
    folder = report_dir(config)
    worker = xdist_worker(config)
    if folder is not None and len(SESSION):
        SESSION.write(folder, stem=f"results-{worker}" if worker else "results")


def pytest_sessionfinish(session, exitstatus):
    from harness.pytest_plugin.judging import judging, settle_exit_status

    config = session.config
    folder = report_dir(config)
    worker = xdist_worker(config)
    write_rows(config)
    if worker:
        return
    tally = config.stash[TALLY]
    judged = judging(config, tally)
    chosen = selection(config)
    settle_exit_status(session, exitstatus, {**judged, "failed": list(tally.failed),
                                             "out_of_memory": list(tally.out_of_memory),
                                             "shard": chosen.shard})
    if folder is None:
        return
    from harness.reports.summary import write_meta, write_summary

    started = config.stash.get(STARTED, datetime.datetime.now())
    profile = run_profile(config).name
    write_meta(folder, profile=profile, pytest_exit=int(exitstatus),
               started=started.isoformat(),
               seconds=(datetime.datetime.now() - started).total_seconds(),
               argv=spelt_out([str(a) for a in config.invocation_params.args], chosen),
               selection=dataclasses.asdict(chosen),
               cwd=str(config.invocation_params.dir),
               cases_run=dict(tally.ran), out_of_memory=list(tally.out_of_memory),
               failed=list(tally.failed), impl_wanted=list(chosen.impls),
               timed_out=list(tally.timed_out), case_time_limit_s=case_time_limit(config),
               **stopped(config, exitstatus),
               skipped_cases=list(tally.skipped_cases),
               failed_cases=list(tally.failed_cases),
               impl_required=_required(config),
               collected=_collected(config, folder),
               shard=chosen.shard, **judged)
    write_summary(folder, profile=profile, pytest_exit=int(exitstatus))


def _collected(config, folder: pathlib.Path) -> str | None:
    """A sharded run's digest of the collected test ids (its ids in ``collected.txt``, so a
    merge can name what differs between shards)."""
    digest, ids = config.stash.get(COLLECTED, (None, ()))
    if digest is not None:
        (folder / "collected.txt").write_text("\n".join(ids) + "\n")
    return digest


def _required(config) -> dict[str, str]:
    """``--require`` names -> why each cannot run here ("" when it can)."""
    from harness.core.ops import op_names

    found: dict[str, list] = {}
    for op in op_names():
        for name, impl in records(op).items():
            found.setdefault(name, []).append(impl)
    why = {}
    for name in selection(config).require:
        impls = found.get(name, [])
        if not impls:
            why[name] = (f"{name} is not registered on this machine (its package or adapter did "
                         "not load: see 'Not run here'; --impl-module loads a module)")
        elif not any(i.available for i in impls):
            why[name] = f"{name} cannot run here: {impls[0].reason}"
        else:
            why[name] = ""
    return why
