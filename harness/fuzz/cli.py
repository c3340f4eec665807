"""``harness fuzz``: argument parsing, the run, the verdict (0 nothing found, 1 a failure, or a
seeded fault missed with ``--faults``; 125 nothing could be judged)."""

from __future__ import annotations

import argparse
import pathlib
import sys

from harness.options import FUZZ_DATABASE as DEFAULT_DATABASE, add_options


def add_parser(sub) -> None:
    fz = sub.add_parser("fuzz", help="draw cases from each op's input space (Hypothesis), judge "
                        "them like the suites, shrink each failure to a minimal case")
    add_options(fz, "fuzz")
    fz.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from harness.core.device import configure_triton
    from harness.reports.meta import new_report_folder

    configure_triton(cpu_tensors=args.device == "cpu")
    folder = new_report_folder(args.output)
    code, _ = fuzz(folder, ops=args.op or None, impls=args.impl, impl_modules=args.impl_module,
                   faults=args.faults, minutes=args.fuzz_minutes, examples=args.examples,
                   seed=args.seed, database=args.database, max_elements=args.max_elements,
                   device=args.device)
    return code


def fuzz(folder: pathlib.Path, *, ops=None, impls=(), impl_modules=(), faults=None,
         minutes: float = 5.0, examples: int = 1000, seed: int = 0,
         database: str = DEFAULT_DATABASE, max_elements: int | None = None,
         device: str | None = None, echo: bool = True) -> tuple[int, str]:
    """One fuzz run written to ``folder``: (verdict, why)."""
    from harness import families
    from harness.core.device import default_device
    from harness.core.registry import records
    from harness.fuzz import report
    from harness.fuzz.run import Options, fault_targets, implementation_targets, run_targets
    from harness.impl_modules import ImplModuleError, load_impl_modules
    from harness.environment import environment
    from harness.core.verdicts import EXIT_UNTESTABLE

    families.load()
    try:
        load_impl_modules(list(impl_modules), env=True)
    except ImplModuleError as exc:
        print(f"fuzz verdict: could not test ({exc})", file=sys.stderr)
        return EXIT_UNTESTABLE, str(exc)
    self_check = faults is not None
    device = device or default_device()
    try:
        targets, left_out = (fault_targets(faults, device) if self_check
                             else implementation_targets(ops, list(impls)))
    except KeyError as exc:
        print(f"harness fuzz: {exc.args[0]}", file=sys.stderr)
        return EXIT_UNTESTABLE, exc.args[0]
    if impls and not self_check:
        from harness.core.specs import all_specs

        known = {name for op in (ops or all_specs()) for name in records(op)}
        unknown = [n for n in impls if n not in known]
        if unknown:
            why = (f"no implementation named {', '.join(unknown)} for these ops; `harness run "
                   "-- --collect-only -q` lists them, --impl-module loads yours")
            print(f"harness fuzz: {why}", file=sys.stderr)
            return EXIT_UNTESTABLE, why
    db = None if database == "none" else pathlib.Path(database)
    options = Options(device=device, minutes=minutes, examples=examples, seed=seed, database=db,
                      max_elements=max_elements)
    searches = run_targets(targets, options, progress=print if echo else (lambda _: None))
    impl_of = {(t.spec.op, t.impl.name): t.impl for t in targets}
    saved_to = None if self_check else folder  # a seeded fault is not registered: no replay
    failures = report.records(searches, impl_of, saved_to, environment(), list(impl_modules))
    code, why = report.verdict(searches, failures, self_check)
    settings = {"seed": seed, "database": str(db) if db else "none", "minutes": minutes,
                "examples": examples, "device": device,
                "mode": "seeded faults" if self_check else "implementations"}
    path = report.write(folder, code, why, searches, failures, left_out, settings)
    if echo:
        print(path.read_text())
        print(f"report: {folder}")
    return code, why
