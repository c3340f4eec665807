"""pytest glue that saves failing cases into the report folder and names them in the failure.

Registered by :mod:`harness.pytest_plugin` when a report folder is set. Every evaluation whose
comparison fails (and, with ``--save-cases OP``, every evaluation of OP) is written by
:mod:`harness.cases.files`; the test's failure message (terminal and JUnit) then starts with the
``harness replay`` command for each file. Files of a test that passes anyway (one that expects a
failing comparison: a seeded fault) are removed again.
"""

from __future__ import annotations

import functools
import pathlib
import shlex

import pytest

from harness.cases import files as casefile
from harness.evaluate import OBSERVERS
from harness.core.verdicts import SEEDED_FAULT_PREFIX

OBSERVER_NAME = "saved-cases"


def replay_command(path: pathlib.Path, impl_modules: list[str]) -> str:
    return " ".join(["harness", "replay", shlex.quote(str(path))] +
                    [f"--impl-module {shlex.quote(m)}" for m in impl_modules])


class SavedCases:
    def __init__(self, folder: pathlib.Path, save_ops=(), impl_modules=()):
        """``save_ops``: the ops whose every case is saved (``--save-cases``); ``impl_modules``:
        what the replay commands load (``--impl-module``), both from the run's selection."""
        self.folder = folder
        self.ops = set(save_ops)
        self.impl_modules = list(impl_modules)
        self.current: list[tuple[pathlib.Path, bool]] = []
        """(file, kept whatever the outcome) saved during the running test."""
        OBSERVERS.add(OBSERVER_NAME, self.observe, replace=True)

    @functools.cached_property
    def environment(self) -> dict[str, str]:
        from harness.environment import environment

        return environment()

    def observe(self, *, spec, impl, case, check, inputs, reference, outputs, rows, knobs,
                runs=1):
        failed = any(r.get("verdict") == "fail" for r in rows)
        if (not failed and case.op not in self.ops) or impl.name.startswith(SEEDED_FAULT_PREFIX):
            return
        path = casefile.save(self.folder, impl=impl, case=case, check=check, inputs=inputs,
                             reference=reference, outputs=outputs, rows=rows,
                             environment=self.environment, knobs=knobs, runs=runs)
        if path is not None:
            self.current.append((path, case.op in self.ops))

    def pytest_runtest_setup(self, item):
        self.current = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when != "call" or not self.current:
            return
        if not report.failed:
            # A test that passed despite failing comparisons expected them (a seeded fault).
            for path, keep in self.current:
                if not keep:
                    path.unlink(missing_ok=True)
            return
        paths = dict.fromkeys(p for p, _ in self.current)
        commands = [replay_command(p, self.impl_modules) for p in paths]
        head = "saved case(s); replay on any machine with:\n  " + "\n  ".join(commands)
        report.sections.append(("harness replay", head))
        report.longrepr = f"{head}\n\n{report.longrepr}"

    def pytest_unconfigure(self, config):
        OBSERVERS.remove(OBSERVER_NAME)
