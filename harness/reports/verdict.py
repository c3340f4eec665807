"""A run's verdict in ``git bisect run`` terms: 0 good, 1 bad, 125 could not test."""

from __future__ import annotations

EXIT_GOOD, EXIT_BAD, EXIT_UNTESTABLE = 0, 1, 125


def _pytest_exit_to_verdict(code: int) -> int:
    """pytest: 0 ok, 1 tests failed, 2 interrupted, 3 internal error, 4 usage, 5 none collected."""
    if code == 0:
        return EXIT_GOOD
    if code == 1:
        return EXIT_BAD
    return EXIT_UNTESTABLE


def run_verdict(code: int, meta: dict, regressions: int = 0) -> tuple[int, str]:
    """The run's git-bisect verdict and why. 125 (could not test) when a required implementation
    (``--require``) cannot run here, when a named or required one ran no case, when no case of
    anything was judged, or when the only failures are the machine running out of memory; 1 when
    a comparison failed or the trend against the baseline got worse; else pytest's code mapped."""
    verdict = _pytest_exit_to_verdict(code)
    ran = meta.get("cases_run") or {}
    required = meta.get("impl_required") or {}
    missing = [f"{n}: {why}" for n, why in required.items() if why]
    if missing:
        return EXIT_UNTESTABLE, ("could not test: a required implementation cannot run here ("
                                 + "; ".join(missing) + ")")
    idle = [n for n in list(meta.get("impl_wanted") or []) + list(required) if not ran.get(n)]
    if verdict != EXIT_UNTESTABLE and idle:
        return EXIT_UNTESTABLE, (f"could not test: {', '.join(idle)} ran no case here (every test "
                                 "of it was skipped or deselected; see 'Not run here' in the "
                                 "summary)")
    oom = meta.get("out_of_memory") or []
    if verdict == EXIT_BAD and oom and not meta.get("failed"):
        return EXIT_UNTESTABLE, (f"could not test: {len(oom)} case(s) ran out of device memory "
                                 f"(first: {oom[0]}); rerun on a larger device or a smaller profile")
    if verdict == EXIT_GOOD and regressions:
        return EXIT_BAD, f"{regressions} metric(s) got worse than the baseline run (trend.md)"
    if code == 5:
        return verdict, "could not test: no test was selected (check --ops, --impl and -k)"
    if verdict == EXIT_GOOD and "cases_run" in meta and not sum(ran.values()):
        return EXIT_UNTESTABLE, ("could not test: no case of any implementation was judged "
                                 "(every kernel test was skipped or deselected: a GPU-only "
                                 "selection on a CPU, or --ops/-k/-m matching no sweep); see "
                                 "the skip reasons in summary.md")
    return verdict, {EXIT_GOOD: "good", EXIT_BAD: "bad: a comparison failed (summary.md)"}.get(
        verdict, f"could not test (pytest exit {code})")
