"""Verdicts in ``git bisect run`` terms (0 good, 1 bad, 125 could not test) and what kind of
failure a failed comparison is: the one module the CLI, reports, saved cases, the fuzzer and
E2E take them from.

:func:`folder_verdict` is the one place a run folder's verdict is decided: ``summary.md``,
``report.html``, ``run.json``'s ``verdict`` and the exit code of ``harness run`` and ``harness
report`` all take it from there, so they cannot disagree."""

from __future__ import annotations

import dataclasses
import json
import pathlib

EXIT_GOOD, EXIT_BAD, EXIT_UNTESTABLE = 0, 1, 125
PYTEST_INTERRUPTED = 2

SEEDED_FAULT_PREFIX = "fault-"
"""Implementation names of the harness's own seeded faults (kernels/<family>/faults.py): they are meant to
fail, so they are counted in the self-check, never among failures."""


FAILURE_KINDS = (
    ("NaN", "NaN"), ("-inf pattern", "wrong -inf mask"), ("nondeterministic", "nondeterministic"),
    ("wrote past the end", "write past the end"), ("wrote into its inputs", "clobbered inputs"),
    ("cells outside", "write outside its rows"), ("bytes differ", "not bit-exact"),
    ("not the top-k", "wrong top-k"), ("wrong number of valid", "wrong top-k"),
    ("repeated offset", "wrong top-k"),
    ("beyond", "beyond tolerance"), ("unwritten", "unwritten output"),
)
"""(text in a failure's detail, the kind of failure it is), first match wins."""


def failure_kind(row) -> str:
    """What went wrong in a failed comparison, from its detail, whichever check saw it (one
    wrong kernel fails the accuracy suite, the dispatch thresholds and the detectors alike)."""
    detail, output = str(row.get("detail", "") or ""), str(row.get("output", ""))
    return next((k for needle, k in FAILURE_KINDS if needle in detail),
                "exception or contract violation" if output == "*" else "other")


HEADLINES = {EXIT_GOOD: "PASS", EXIT_BAD: "FAIL"}
"""What the summary and the HTML page say for a code; anything else is "COULD NOT TEST"."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    code: int
    why: str

    @property
    def headline(self) -> str:
        return HEADLINES.get(self.code, "COULD NOT TEST")

    @property
    def css_class(self) -> str:
        return {EXIT_GOOD: "pass", EXIT_BAD: "fail"}.get(self.code, "untestable")


def _pytest_exit_to_verdict(code: int) -> int:
    """pytest: 0 ok, 1 tests failed, 2 interrupted, 3 internal error, 4 usage, 5 none collected."""
    if code == 0:
        return EXIT_GOOD
    if code == 1:
        return EXIT_BAD
    return EXIT_UNTESTABLE


def _crash(meta: dict) -> str | None:
    crashed = meta.get("crashed")
    if not crashed:
        return None
    tests = crashed.get("tests") or []
    where = (f"while running {', '.join(tests)}" if tests
             else "between tests (no test was in flight)")
    return (f"bad: the test process died ({crashed.get('how', 'crashed')}) {where}; a crash is "
            "the implementation's failure (crash.md has the last traceback where one was "
            "written)")


def _interrupted(meta: dict) -> str | None:
    stopped = meta.get("interrupted")
    if not stopped:
        return None
    tests = stopped.get("tests") or []
    judged = sum((meta.get("cases_run") or {}).values())
    failed = len(meta.get("failed") or [])
    return (f"could not test: the run was stopped ({stopped.get('how', 'interrupted')}) "
            + (f"while running {', '.join(tests)}" if tests else "between tests")
            + f"; {judged} case(s) judged so far" + (f", {failed} test(s) failed" if failed else "")
            + " (the summary shows them)")


def _timed_out(meta: dict) -> str | None:
    late = meta.get("timed_out") or []
    if not late:
        return None
    limit = meta.get("case_time_limit_s")
    return (f"bad: {len(late)} test(s) did not finish within the per-case time limit"
            + (f" of {limit:g} s" if limit else "") + f" (a hang is the implementation's "
            f"failure): {', '.join(late[:5])}" + (" ..." if len(late) > 5 else ""))


DECLARED_SKIPS = ("declared", "cost")
"""Skip kinds that are an implementation's own choice (harness.pytest_plugin.sweep.SKIP_KINDS)."""


def judged_failures(meta: dict) -> tuple[list[str], list[str]]:
    """(failed tests that count, failed tests only about implementations the run does not
    judge). A run without ``judged`` (an older run.json) counts every failure."""
    failed = list(dict.fromkeys(meta.get("failed") or []))
    judged = meta.get("judged")
    if judged is None:
        return failed, []
    about = meta.get("failed_about") or {}
    counted = [t for t in failed if not about.get(t) or set(about[t]) & set(judged)]
    return counted, [t for t in failed if t not in counted]


def coverage_shortfalls(meta: dict) -> list[str]:
    """The judged implementations' ops that were judged on no case, or that their own
    declarations skipped beyond the profile's ``max_declared_skip_share``, with the counts.
    None in a shard's run (its share of an op's cases is arbitrary: the merge judges it)."""
    if meta.get("shard"):
        return []
    judged = set(meta.get("judged") or ())
    share = meta.get("max_declared_skip_share")
    short = []
    for row in meta.get("coverage") or []:
        if row["impl"] not in judged:
            continue
        ran = int(row.get("judged", 0))
        declared = sum(int(row.get(kind, 0)) for kind in DECLARED_SKIPS)
        skipped = {k: int(v) for k, v in row.items() if k not in ("impl", "op", "judged") and v}
        counts = ", ".join(f"{k} {v}" for k, v in skipped.items())
        total = ran + sum(skipped.values())
        if not ran and skipped:
            short.append(f"{row['impl']}/{row['op']}: judged on none of its {total} cases "
                         f"(skipped: {counts})")
        elif share is not None and declared > share * (ran + declared):
            short.append(f"{row['impl']}/{row['op']}: its declarations skipped {declared} of "
                         f"{ran + declared} cases ({declared / (ran + declared):.0%}, over the "
                         f"profile's {share:.0%}; skipped: {counts})")
    return short


def _shortfall_why(short: list[str]) -> str:
    return ("could not test: a judged implementation was judged on too little of its input "
            "space: " + "; ".join(short[:6]) + (f"; and {len(short) - 6} more" if len(short) > 6
                                                else "")
            + " (see 'What was judged' in the summary; pass --accept-partial-coverage to "
            "call such a run good)")


def _unjudged_note(unjudged: list[str], meta: dict) -> str:
    about = meta.get("failed_about") or {}
    names = sorted({n for t in unjudged for n in about.get(t, [])})
    return (f"; {len(unjudged)} failing test(s) of implementations this run does not judge "
            f"({', '.join(names)}: see the matrix; --impl or --require NAME judges one)")


def judged_exit_status(code: int, meta: dict) -> tuple[int, str]:
    """The test command's (pytest's) exit status and a note, from what the run judged: 1 only
    when a judged implementation's test failed (else 0, with the note); 125 when a judged
    implementation's coverage falls short (``coverage_shortfalls``) unless accepted. Other
    pytest codes are kept."""
    if code not in (0, 1):
        return code, ""
    counted, unjudged = judged_failures(meta)
    if code == 1 and (counted or not unjudged):
        return code, ""
    short = [] if meta.get("accept_partial_coverage") else coverage_shortfalls(meta)
    if short:
        return EXIT_UNTESTABLE, _shortfall_why(short)
    return EXIT_GOOD, ("good" + _unjudged_note(unjudged, meta)) if unjudged else ""


def run_verdict(code: int, meta: dict, regressions: int = 0) -> tuple[int, str]:
    """The run's git-bisect verdict and why. 1 when the test process crashed (whatever else);
    125 (could not test) when a required implementation (``--require``) cannot run here, when the
    run was stopped (SIGINT/SIGTERM), when a named or required one ran no case, when no case of
    anything was judged, or when the only failures are the machine running out of memory; 1 when
    a comparison failed, a test hung past the time limit, or the trend against the baseline got
    worse; else pytest's code mapped."""
    crash = _crash(meta)
    if crash:
        return EXIT_BAD, crash
    verdict = _pytest_exit_to_verdict(code)
    ran = meta.get("cases_run") or {}
    required = meta.get("impl_required") or {}
    missing = [f"{n}: {why}" for n, why in required.items() if why]
    if missing:
        return EXIT_UNTESTABLE, ("could not test: a required implementation cannot run here ("
                                 + "; ".join(missing) + ")")
    stopped = _interrupted(meta)
    if stopped or code == PYTEST_INTERRUPTED:
        return EXIT_UNTESTABLE, stopped or "could not test: the run was interrupted"
    idle = [n for n in list(meta.get("impl_wanted") or []) + list(required) if not ran.get(n)]
    if verdict != EXIT_UNTESTABLE and idle:
        return EXIT_UNTESTABLE, (f"could not test: {', '.join(idle)} ran no case here (every test "
                                 "of it was skipped or deselected; see 'Not run here' in the "
                                 "summary)")
    oom = meta.get("out_of_memory") or []
    counted, unjudged = judged_failures(meta)
    if verdict == EXIT_BAD and oom and not counted:
        return EXIT_UNTESTABLE, (f"could not test: {len(oom)} case(s) ran out of device memory "
                                 f"(first: {oom[0]}); rerun on a larger device or a smaller profile")
    if verdict == EXIT_BAD and code == 1 and unjudged and not counted:
        verdict = EXIT_GOOD
    late = _timed_out(meta)
    if late:
        return EXIT_BAD, late
    if verdict == EXIT_GOOD and regressions:
        return EXIT_BAD, f"{regressions} metric(s) got worse than the baseline run (trend.md)"
    if code == 5:
        return verdict, "could not test: no test was selected (check --ops, --impl and -k)"
    short = [] if meta.get("accept_partial_coverage") else coverage_shortfalls(meta)
    coverage_verdict = code == EXIT_UNTESTABLE and bool(short)  # the test command's own 125
    if (verdict == EXIT_GOOD or coverage_verdict) and "cases_run" in meta \
            and not sum(ran.values()):
        return EXIT_UNTESTABLE, ("could not test: no case of any implementation was judged "
                                 "(every kernel test was skipped or deselected: a GPU-only "
                                 "selection on a CPU, or --ops/-k/-m matching no sweep); see "
                                 "the skip reasons in summary.md"
                                 + "".join(f"; {line}" for line in short[:4]))
    if short and (verdict == EXIT_GOOD or coverage_verdict):
        return EXIT_UNTESTABLE, _shortfall_why(short)
    note = _unjudged_note(unjudged, meta) if unjudged else ""
    return verdict, {EXIT_GOOD: "good" + note, EXIT_BAD: "bad: a comparison failed (summary.md)"
                     }.get(verdict, f"could not test (pytest exit {code})")


def _trend(meta: dict) -> tuple[int, str]:
    """(metrics worse than the baseline, why the comparison itself could not judge: "" if it
    could) from run.json's ``trend`` (written by ``harness run --compare-to``)."""
    trend = meta.get("trend") or {}
    return int(trend.get("worse") or 0), str(trend.get("untestable") or "")


def _fuzz(folder: pathlib.Path) -> dict:
    path = folder / "fuzz" / "fuzz.json"
    return json.loads(path.read_text()) if path.exists() else {}


def folder_verdict(folder: pathlib.Path, meta: dict | None = None) -> Verdict:
    """The verdict of the run folder ``folder``: its run.json (pytest's exit, tallies, a crash
    or a stop, the trend against a baseline) and the fuzzing after the sweep."""
    if meta is None:
        path = folder / "run.json"
        meta = json.loads(path.read_text()) if path.exists() else {}
    worse, trend_untestable = _trend(meta)
    code, why = run_verdict(int(meta.get("pytest_exit", 0)), meta, worse)
    if code == EXIT_GOOD and trend_untestable:
        code, why = EXIT_UNTESTABLE, f"could not test against the baseline: {trend_untestable}"
    fuzz = _fuzz(folder)
    if code != EXIT_UNTESTABLE and fuzz.get("verdict") == EXIT_BAD:
        code, why = EXIT_BAD, (why + "; " if code == EXIT_BAD else "") + "fuzzing: " + str(
            fuzz.get("why", ""))
    return Verdict(code, why)
