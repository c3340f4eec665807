"""The ``harness`` command (also ``python -m harness``).

``harness run`` picks the device (CUDA/ROCm, or CPU with the Triton interpreter) and the matching
profile, runs the kernel suites through pytest and writes a report folder.
``harness selftest`` runs the detectors against the seeded faults and the shipped kernels.
``harness fuzz`` draws cases from each op's input space and shrinks what fails to a minimal case.
``harness speed`` puts the benchmarks' ``--json`` runs side by side over time (no verdict).

Exit codes follow ``git bisect run``: 0 good, 1 bad (a comparison failed), 125 could not test.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

from harness.core.input_space import PROFILES as PROFILE_NAMES
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE, folder_verdict
from harness.options import SELECTION_FLAG, add_options
from harness.options.selection import Selection, SelectionError, selection_flags_in
from harness.reports.meta import new_report_folder


def cmd_run(args) -> int:
    try:
        chosen = Selection.from_namespace(args)
    except SelectionError as exc:
        raise SystemExit(f"harness run: {exc}") from exc
    return run_suites(chosen, output=args.output, workers=args.workers,
                      compare_to=args.compare_to, fuzz_minutes=args.fuzz_minutes,
                      self_tests=args.self_tests, pytest_args=args.pytest_args)


def run_suites(selection: Selection, *, output: str | None = None, workers: str | None = None,
               compare_to: str | None = None, fuzz_minutes: float | None = None,
               self_tests: bool = False, pytest_args=()) -> int:
    """``harness run``: the suites in a pytest child judging ``selection``, the trend, the
    fuzzing after the sweep; the verdict's exit code."""
    from harness import adapters
    from harness.profiles import default_profile_name
    from harness.reports.meta import read_meta
    from harness.supervise import run_pytest

    selection, pytest_args = _fold_selection_flags(selection, list(pytest_args))
    profile = selection.profile or default_profile_name()
    selection = dataclasses.replace(selection, profile=profile)
    folder = new_report_folder(output)
    selection_file = selection.write(folder)
    if workers is None:
        workers = default_workers(list(pytest_args))
    code = run_pytest(pytest_argv(selection_file, folder, self_tests=self_tests, workers=workers,
                                  passthrough=pytest_args), folder, profile)
    baseline = _baseline(compare_to, folder, profile)
    regressions = 0
    if baseline is not None:
        regressions = _trend(baseline, folder, explicit=compare_to not in (None, "auto"))
    minutes = planned_fuzz_minutes(profile, fuzz_minutes)
    fuzzed = bool(minutes) and folder_verdict(folder).code != EXIT_UNTESTABLE
    if fuzzed:
        _fuzz_after_sweep(folder, minutes, selection)
    if baseline is not None or fuzzed or not read_meta(folder).get("verdict"):
        from harness.reports.summary import write_summary

        adapters.scope_to(selection.adapter_scope())  # the summary's vendor matrix, as pytest's
        write_summary(folder, profile=profile, pytest_exit=code)
    verdict = folder_verdict(folder)
    print(f"report: {folder}" + (f" (trend against {baseline}: {regressions} worse)"
                                 if baseline is not None else ""))
    print(f"verdict: {verdict.why}")
    return verdict.code


def _fold_selection_flags(selection: Selection, passthrough: list[str]):
    """Selection options given after ``--`` (``harness run -- --impl X``, which earlier releases
    passed on to pytest) join the selection, with a deprecation note: pytest reads the run's
    selection from one file. Returns the selection and the rest of ``passthrough``."""
    from harness.options.selection import note_deprecated_passthrough, selection_from_pytest_flags

    if not selection_flags_in(passthrough):
        return selection, passthrough
    try:
        given, rest = selection_from_pytest_flags(passthrough)
    except SelectionError as exc:
        raise SystemExit(f"harness run: after --: {exc}") from exc
    note_deprecated_passthrough(selection_flags_in(passthrough))
    return selection.joined(given), rest


SUITES = pathlib.Path(__file__).resolve().parent.parent / "suites"


def pytest_argv(selection_file: pathlib.Path, folder: pathlib.Path, *, self_tests: bool = False,
                workers: str | int | None = None, passthrough=()) -> list[str]:
    """The pytest command line of ``harness run``: the selection as one file (never re-spelt
    as options), the report folder, the judging suites, the workers, then what came after --.
    Test files or node ids after -- (``harness run -- suites/test_layouts.py``) take the place
    of the whole suites folder: pytest collects only them."""
    passthrough = list(passthrough)
    where = [] if _names_tests(passthrough) else [str(SUITES)]
    args = [*where, SELECTION_FLAG, str(selection_file.resolve()), "--report-dir",
            str(folder), "-q", "-p", "no:cacheprovider"]
    if not self_tests:
        args += ["-m", JUDGING_ONLY]
    if workers is not None:
        args += ["-n", str(workers)]
    return args + list(passthrough)


VALUED_PYTEST_FLAGS = ("-k", "-m", "-p", "-n", "-o", "-c", "-W", "--deselect", "--ignore")


def _names_tests(args: list[str]) -> bool:
    """Whether pytest arguments name a test file, a folder or a node id (an existing path,
    before any ``::``, that is not the value of an option), which pytest then collects
    instead of the suites."""
    for before, arg in zip(["", *args], args):
        path = pathlib.Path(arg.split("::")[0])
        if arg and not arg.startswith("-") and before not in VALUED_PYTEST_FLAGS \
                and (path.suffix == ".py" or path.is_dir()) and path.exists():
            return True
    return False


def _trend(baseline: pathlib.Path, folder: pathlib.Path, explicit: bool) -> int:
    """Compare with the baseline run into trend.md and run.json's ``trend``; the number of rows
    worse. A comparison the user asked for (``--compare-to DIR``) that cannot be made makes the
    run "could not test"; the automatic one of nightly runs is only noted."""
    from harness.reports.meta import update_meta
    from harness.reports.trend import TrendError, write_trend

    try:
        _, worse = write_trend(baseline, folder)
    except (TrendError, FileNotFoundError) as exc:
        print(f"trend: not compared: {exc}")
        update_meta(folder, trend={"against": str(baseline), "worse": 0,
                                   "untestable": str(exc) if explicit else ""})
        return 0
    update_meta(folder, trend={"against": str(baseline), "worse": worse, "untestable": ""})
    return worse


JUDGING_ONLY = "not machinery"
"""What ``harness run`` selects: the suites that judge implementations. Tests of the harness's own
machinery (its CLI, reports, sharding, fuzzer, imports, the E2E judge on seeded faults) carry the
``machinery`` marker; the test command (CI) runs them, ``harness run --self-tests`` too."""


FUZZ_MINUTES = {"nightly": 10.0, "full": 30.0}
"""The fuzz budget after the sweep, by profile (``--fuzz-minutes MINUTES`` or
HARNESS_FUZZ_MINUTES overrides; 0 turns it off): the grid runs first, then the search for what it
does not hold."""


def planned_fuzz_minutes(profile: str, given: float | None) -> float:
    import os

    if given is None:
        given = os.environ.get("HARNESS_FUZZ_MINUTES")
    return float(given) if given not in (None, "") else FUZZ_MINUTES.get(profile, 0.0)


def _fuzz_after_sweep(folder: pathlib.Path, minutes: float, selection: Selection) -> None:
    """The fuzzer over the sweep's ops and implementations, into ``folder/fuzz``; a failure it
    finds makes the run bad, as a sweep failure does (``folder_verdict`` reads fuzz.json)."""
    from harness.core.device import configure_triton
    from harness.core.specs import all_specs
    from harness.fuzz.cli import fuzz

    configure_triton(cpu_tensors=selection.device == "cpu")

    ops = [o for o in selection.ops if o in all_specs()] or None
    print(f"fuzz: {minutes:g} min over the sweep's implementations (harness fuzz; "
          "--fuzz-minutes 0 skips)")
    code, fuzz_why = fuzz(folder / "fuzz", ops=ops, impls=list(selection.impls),
                          impl_modules=list(selection.impl_modules), minutes=minutes,
                          device=selection.device, database=str(folder.parent / ".hypothesis"),
                          echo=False)
    print(f"fuzz: {fuzz_why} ({folder / 'fuzz' / 'fuzz.md'})")


GIB_PER_WORKER = 3
"""Host memory a CPU worker is given: the smoke profile's largest cases (top-k rows of 300000
columns and their float64 reference) stay under 2 GiB a process."""


def default_workers(passthrough: list[str]) -> int | None:
    """pytest-xdist workers for a run that names none: on a CPU machine one per core, capped
    so each has GIB_PER_WORKER of memory (``-n 0`` opts out); on a GPU host none, as before
    (``-n auto`` pins one worker to each GPU). None where xdist is switched off."""
    import os

    if any(a in ("no:xdist", "-n", "--numprocesses") or a.startswith("-n") for a in passthrough):
        return None
    from harness.core.device import has_gpu

    if has_gpu():
        return None
    from harness.pytest_plugin.worker_threads import usable_cores

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    workers = max(1, min(usable_cores(), int(memory // GIB_PER_WORKER)))
    return workers if workers > 1 else None


def _baseline(compare_to: str | None, folder: pathlib.Path, profile: str):
    if compare_to is None:
        compare_to = "auto" if profile == "nightly" else "none"
    if compare_to == "none":
        return None
    if compare_to == "auto":
        from harness.reports.trend import previous_run

        return previous_run(folder, profile)
    return pathlib.Path(compare_to)


def cmd_report(args) -> int:
    from harness.reports.summary import read_meta, write_summary

    if len(args.folders) > 1:
        from harness.reports.merge import MergeError, merge

        folder = new_report_folder(args.output)
        try:
            merge([pathlib.Path(f) for f in args.folders], folder)
        except MergeError as exc:
            print(f"harness report: {exc}", file=sys.stderr)
            return EXIT_UNTESTABLE
    else:
        folder = pathlib.Path(args.output or args.folders[0])
        if args.output:
            print("harness report: --output is for merging several folders", file=sys.stderr)
            return EXIT_UNTESTABLE
    _crash_left_behind(folder)
    meta = read_meta(folder)
    if not meta:
        print(f"{folder} holds no run.json: not a finished harness run (pass a folder written "
              "by `harness run` or the test command's --report-dir)", file=sys.stderr)
        return EXIT_UNTESTABLE
    path = write_summary(folder, profile=meta.get("profile", "?"),
                         pytest_exit=meta.get("pytest_exit", 0))
    print(path.read_text())
    return folder_verdict(folder).code


def _crash_left_behind(folder: pathlib.Path) -> None:
    """A folder whose pytest died with no parent to say so (the test command, not `harness
    run`): its in-flight record names the test; run.json says it crashed."""
    from harness.reports.crash import in_flight, write_crash_report
    from harness.reports.summary import read_meta, update_meta, write_meta

    tests = [r["test"] for r in in_flight(folder)]
    if not tests or read_meta(folder).get("crashed"):
        return
    how = "ended without finishing its session (killed or crashed)"
    write_crash_report(folder, how, tests)
    if read_meta(folder):
        update_meta(folder, crashed={"how": how, "tests": tests})
    else:
        write_meta(folder, profile="?", pytest_exit=1, crashed={"how": how, "tests": tests})


def cmd_compare(args) -> int:
    from harness.reports.trend import runs_between, write_trend

    for folder in (args.old, args.new):
        if not list(pathlib.Path(folder).glob("results*.csv")):
            print(f"harness compare: {folder} holds no harness results (results*.csv); pass two "
                  "report folders written by `harness run` or the test command's --report-dir",
                  file=sys.stderr)
            return EXIT_UNTESTABLE
    from harness.reports.trend import TrendError

    old, new = pathlib.Path(args.old), pathlib.Path(args.new)
    try:
        path, regressions = write_trend(old, new, runs_between(old, new))
    except TrendError as exc:
        print(f"harness compare: could not compare: {exc}", file=sys.stderr)
        return EXIT_UNTESTABLE
    print(path.read_text())
    return EXIT_BAD if regressions else EXIT_GOOD


def cmd_bisect(args) -> int:
    """One verdict for ``git bisect run``: the chosen ops' suites at a small profile."""
    import tempfile

    if not args.op:
        raise SystemExit("harness bisect: name the ops whose tests decide: --op OP (repeatable)")
    with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp:
        code = run_suites(Selection.from_namespace(args), output=tmp, workers=args.workers,
                          compare_to="none", fuzz_minutes=0.0,
                          pytest_args=["-x", "-q", *args.pytest_args])
    print({EXIT_GOOD: "bisect verdict: good", EXIT_BAD: "bisect verdict: bad"}.get(
        code, "bisect verdict: skip (could not test)"))
    return code


def cmd_replay(args) -> int:
    from harness.cases.replay import main as replay

    return replay(args.files, args.impl, args.impl_module, args.device)


def cmd_speed(args) -> int:
    """Kernel speed over time from the benchmarks' --json files: a report, never a verdict."""
    from harness.reports import speed

    try:
        df = speed.load(args.paths)
    except speed.SpeedFileError as exc:
        print(f"harness speed: {exc}", file=sys.stderr)
        return EXIT_UNTESTABLE
    path = speed.write(df, pathlib.Path(args.output))
    print(path.read_text())
    print(f"written: {path.parent}/speed.md, speed.html, speed.csv and the plots")
    return EXIT_GOOD


COVERAGE_PROFILES = [p for p in PROFILE_NAMES if p != "full"]
"""What ``harness coverage`` prints by default: full differs from nightly only in sizes."""


def cmd_coverage(args) -> int:
    """The coverage table each profile's sweep would have here, from a collection of the suites
    (nothing runs); exit 1 when a declared cell of a profile is reached by no swept case."""
    from harness.reports import coverage

    missing = []
    for profile in args.profile or COVERAGE_PROFILES:
        table, collected = coverage.planned(profile)
        print(f"# {profile}: {collected} sweep tests collected (counts below are tests, not "
              "cases; 'judged' = would run here)\n")
        print("\n".join(coverage.markdown(table, profile)[4:]))
        missing += [f"{profile}: {gap}" for gap in coverage.gaps(table)]
    profiles = ", ".join(args.profile or COVERAGE_PROFILES)
    print(f"coverage: {len(missing)} declared cell(s) no sweep reaches: " + "; ".join(missing)
          if missing else f"coverage: every declared cell of {profiles} is reached by a sweep")
    return EXIT_BAD if missing else EXIT_GOOD


def cmd_vendors(args) -> int:
    """The conformance matrix of a run folder (vendor x release x op x input-space cell); with
    no folder, which vendor entries run on this machine and why the others do not. Exit 1 when
    a vendor cell of the run failed, 125 when the run judged no vendor case."""
    from harness import families
    from harness.core.registry import unavailable
    from harness.reports import vendors
    from harness.reports.summary import load_results, read_meta

    families.load()
    if args.folder is None:
        matrix = vendors.entries(unavailable())
        print("\n".join(vendors.markdown(matrix, "entries on this machine")[4:]))
        return EXIT_GOOD
    folder = pathlib.Path(args.folder)
    df, meta = load_results(folder), read_meta(folder)
    if df.empty and not meta:
        print(f"harness vendors: {folder} holds no harness results (results*.csv, run.json); "
              "pass a folder written by `harness run` or the test command's --report-dir, or "
              "no folder for the entries on this machine", file=sys.stderr)
        return EXIT_UNTESTABLE
    profile = meta.get("profile", "?")
    matrix = vendors.table(df, meta.get("skipped_cases") or [], profile, unavailable(),
                           meta.get("environment") or {}, cases_dir=folder / "cases",
                           failed_cases=meta.get("failed_cases") or [])
    print("\n".join(vendors.markdown(matrix, profile)))
    judged = matrix["status"].isin([vendors.PASS, vendors.FAIL, vendors.KNOWN])
    if not vendors.failed(matrix).empty:
        return EXIT_BAD
    if not judged.any():
        print("harness vendors: this run judged no vendor case", file=sys.stderr)
        return EXIT_UNTESTABLE
    return EXIT_GOOD


def cmd_selftest(args) -> int:
    import pandas as pd

    from harness.core.device import configure_triton, default_device
    from harness.profiles import get_profile
    from harness import families, selftest

    configure_triton(cpu_tensors=args.device == "cpu")
    families.load()
    profile = get_profile(args.profile)
    hidden = args.hidden or min(profile.hidden)
    df = selftest.run(profile, args.device or default_device(), hidden)
    shown = df[["kind", "name", "op", "detector", "result", "message"]].copy()
    shown["message"] = shown["message"].str.slice(0, 110)
    with pd.option_context("display.max_colwidth", 110, "display.width", 250):
        print(shown.to_string(index=False, justify="left"))
    bad = df[~df["ok"]]
    not_run = df[df.result == "not run"]
    print(f"\n{int((df.kind == 'fault').sum()) - len(not_run)} faults, "
          f"{int((df.kind == 'control').sum())} controls, {len(bad)} wrong"
          + (f"; {len(not_run)} fault(s) not run here: {', '.join(not_run.name)}" if len(not_run) else ""))
    return EXIT_GOOD if bad.empty else EXIT_BAD


COMMANDS = (
    ("run", "run the kernel suites and write a report", cmd_run),
    ("report", "rebuild summary.md and report.html of a run folder, or merge the folders of a "
     "sweep's shards into one report", cmd_report),
    ("compare", "two runs side by side; exit 1 if the new one is worse", cmd_compare),
    ("bisect", "git-bisect-run verdict: 0 good, 1 bad, 125 skip", cmd_bisect),
    ("replay", "judge saved failing cases (report's cases/*.pt) again here: 0 pass, 1 fail, "
     "125 could not replay", cmd_replay),
    ("speed", "kernel speed over time from the benchmarks' --json files (slower/faster than the "
     "previous run on the same device; no verdict)", cmd_speed),
    ("coverage", "each profile's input-space coverage table, from a collection of the suites "
     "(nothing runs)", cmd_coverage),
    ("vendors", "the vendor conformance matrix of a run folder (vendor x release x op x "
     "input-space cell), or which vendor entries run here", cmd_vendors),
    ("selftest", "seeded faults must be caught, shipped kernels pass", cmd_selftest),
)
"""The subcommands: name, help, handler; their options are the rows of ``harness.options``
that name them. ``fuzz``, ``e2e`` and ``golden`` add themselves from their own packages."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="harness", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name, help_, handler in COMMANDS:
        parser = sub.add_parser(name, help=help_)
        add_options(parser, name)
        parser.set_defaults(func=handler)
    from harness.e2e.cli import add_parsers
    from harness.fuzz.cli import add_parser as add_fuzz

    add_fuzz(sub)
    add_parsers(sub)
    return ap


def main(argv=None) -> int:
    """The command's exit code, always one ``git bisect run`` reads: 0, 1 or 125. A usage error
    (argparse's 2) or the harness's own exception is "could not test", never "bad"; a code
    outside the three from a handler is too."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_GOOD if exc.code in (0, None) else EXIT_UNTESTABLE  # --help: 0
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        return EXIT_UNTESTABLE
    except SystemExit as exc:  # a handler's usage error: SystemExit("what is wrong")
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except Exception:  # the harness's own failure is no verdict on the code
        import traceback

        traceback.print_exc()
        print(f"harness {args.command}: the harness itself failed (traceback above): could not "
              "test (125); please report it", file=sys.stderr)
        return EXIT_UNTESTABLE
    return code if code in (EXIT_GOOD, EXIT_BAD, EXIT_UNTESTABLE) else EXIT_UNTESTABLE


if __name__ == "__main__":
    sys.exit(main())
