"""What a run judges: the implementations whose failures and coverage decide its exit code, and
the exit status the test command ends with.

``--impl`` names them (with ``--require`` and ``--ab``); otherwise the profile's
``judged_by_default`` origins do (the harness's kernels and ``--impl-module``s), plus the
``--require``d. Every implementation still runs and shows in the matrix; a failing test about
implementations none of which is judged is reported, not counted.
"""

from __future__ import annotations

import pytest

from harness.core.ops import op_names
from harness.core.registry import records
from harness.pytest_plugin.context import run_profile, selection

VERDICT = pytest.StashKey[str]()


def judged_names(config) -> tuple[list[str], str]:
    """(the implementations the run judges, how they were chosen)."""
    chosen = selection(config)
    required, ab, named = set(chosen.require), set(chosen.ab or ()), set(chosen.impls)
    if named:
        return sorted(named | required | ab), "named by --impl" + (
            " and --require" if required - named else "")
    profile = run_profile(config)
    default = {name for op in op_names() for name, impl in records(op).items()
               if impl.available and impl.origin in profile.judged_by_default}
    how = (f"the {profile.name} profile's default ({', '.join(profile.judged_by_default)} "
           "implementations)" + (", --require" if required else "") + (", --ab" if ab else ""))
    return sorted(default | required | ab), how


def registered() -> dict[str, dict]:
    """name -> its origin and the ops it is registered for (available or not)."""
    found: dict[str, dict] = {}
    for op in op_names():
        for name, impl in records(op).items():
            entry = found.setdefault(name, {"origin": impl.origin, "ops": [], "unavailable": {}})
            if impl.available:
                entry["ops"].append(op)
                entry["origin"] = impl.origin
            else:
                entry["unavailable"][op] = impl.reason
    return found


def judging(config, tally) -> dict:
    """run.json's keys about what was judged (read by harness.core.verdicts)."""
    names, how = judged_names(config)
    profile = run_profile(config)
    return {"judged": names, "judged_how": how,
            "failed_about": dict(tally.failed_about),
            "coverage": [{"impl": impl, "op": op, **counts}
                         for (impl, op), counts in sorted(tally.coverage.items())],
            "max_declared_skip_share": profile.max_declared_skip_share,
            "accept_partial_coverage": selection(config).accept_partial_coverage,
            "registered": registered()}


def settle_exit_status(session, exitstatus: int, meta: dict) -> None:
    """The test command's exit status follows what the run judged: failures only of
    implementations it does not judge leave it 0; a judged implementation short of coverage
    makes it 125 (harness.core.verdicts.judged_exit_status)."""
    from harness.core.verdicts import judged_exit_status

    code, why = judged_exit_status(int(exitstatus), meta)
    session.config.stash[VERDICT] = why
    if code != int(exitstatus):
        session.exitstatus = code


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    why = config.stash.get(VERDICT, "")
    if why:
        terminalreporter.write_line(f"harness verdict: {why}")
