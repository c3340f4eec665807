"""What a fuzz run found, for a person (``fuzz.md``, verdict first, one group per failure), for
tools (``fuzz.json``) and for a CI job (``junit.xml``: a test case per target); each failure's
case saved for ``harness replay``."""

from __future__ import annotations

import json
import pathlib
import shlex
import xml.etree.ElementTree as ET

from harness.cases import files as casefile
from harness.core.specs import get_spec
from harness.fuzz.describe import describe
from harness.fuzz.search import Search
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE


def _save(folder: pathlib.Path, search: Search, found, impl, environment: dict) -> str:
    failure = found.failure
    spec = get_spec(search.op)
    evidence = failure.evidence
    if evidence is None:  # a detector's failure: the case regenerates its inputs from its seed
        inputs = spec.make_inputs(failure.case)
        evidence = {"inputs": inputs, "reference": spec.reference(inputs), "outputs": {},
                    "runs": 1}
    path = casefile.save(folder, impl=impl, case=failure.case, check=failure.check,
                         inputs=evidence["inputs"], reference=evidence["reference"],
                         outputs=evidence["outputs"], rows=failure.rows,
                         environment=environment, runs=evidence.get("runs", 1))
    return str(path) if path is not None else ""


def records(searches: list[Search], impls: dict, folder: pathlib.Path | None,
            environment: dict, impl_modules: list[str]) -> list[dict]:
    """One dict per failure found: where, how soon, the shrunk case, its case file."""
    out = []
    for s in searches:
        for signature, found in s.found.items():
            check, output, kind = signature
            path = _save(folder, s, found, impls[(s.op, s.impl)], environment) if folder else ""
            replay = (" ".join(["harness", "replay", shlex.quote(path)]
                               + [f"--impl-module {shlex.quote(m)}" for m in impl_modules])
                      if path else "")
            case = found.failure.case
            out.append({"op": s.op, "impl": s.impl, "check": check, "output": output,
                        "kind": kind, "seconds_to_find": round(found.seconds_to_find, 2),
                        "examples_to_find": found.examples_to_find, "shrinks": found.shrinks,
                        "case": case.id, "tokens": case.tokens, "hidden": case.hidden,
                        "params": dict(case.params), "seed": case.seed,
                        "minimal": describe(get_spec(s.op), found.failure),
                        "case_file": path, "replay": replay})
    return out


def verdict(searches: list[Search], failures: list[dict], self_check: bool) -> tuple[int, str]:
    judged = sum(s.examples for s in searches)
    empty = [f"{s.op}/{s.impl}" for s in searches if s.examples == 0]
    broken = [f"{s.op}/{s.impl} ({s.error})" for s in searches if s.error]
    if self_check:
        missed = [f"{s.op}/{s.impl}" for s in searches if not s.found]
        if missed:
            return EXIT_BAD, (f"the fuzzer missed {len(missed)} of {len(searches)} seeded "
                              f"fault(s): {', '.join(missed)}")
        return EXIT_GOOD, f"the fuzzer found and shrank all {len(searches)} seeded fault(s)"
    if failures:
        groups = sorted({(f["impl"], f["op"]) for f in failures})
        return EXIT_BAD, (f"{len(failures)} failure(s) in {len(groups)} implementation(s) "
                          f"({', '.join(f'{o}/{i}' for i, o in groups)}) over {judged} cases")
    if broken:
        return EXIT_UNTESTABLE, ("could not test: the harness itself failed while fuzzing "
                                 + "; ".join(broken) + " (a harness bug: report it with fuzz.json)")
    if not searches or judged == 0:
        return EXIT_UNTESTABLE, "could not test: no case was judged (see what was left out)"
    if empty:
        return EXIT_UNTESTABLE, (f"could not test {', '.join(empty)}: every drawn case was "
                                 "discarded (reasons below)")
    return EXIT_GOOD, f"no failure in {judged} drawn cases over {len(searches)} target(s)"


def markdown(code: int, why: str, searches: list[Search], failures: list[dict],
             left_out: list[dict], settings: dict) -> str:
    head = {EXIT_GOOD: "PASS", EXIT_BAD: "FAIL"}.get(code, "COULD NOT TEST")
    lines = [f"# Fuzz verdict: {head}", "", why, "",
             f"Seed {settings['seed']}, Hypothesis database `{settings['database']}`, budget "
             f"{settings['minutes']} min, at most {settings['examples']} drawn cases a target "
             "before shrinking (the counts below include the shrinker's), "
             f"device {settings['device']}. The same seed, database and build draw the same "
             "cases.", ""]
    if failures:
        lines += [f"## Failures ({len(failures)}, one per cause, each shrunk)", ""]
        for f in failures:
            lines.append(f"- **{f['op']} / {f['impl']}**, `{f['output']}`, {f['kind']} "
                         f"({f['check']}): found after {f['examples_to_find']} case(s), "
                         f"{f['seconds_to_find']} s; shrunk {f['shrinks']} time(s) to")
            lines.append(f"  - {f['minimal']}")
            if f["replay"]:
                lines.append(f"  - replay: `{f['replay']}`")
        lines.append("")
    lines += ["## Targets", "", "| op | implementation | cases judged | discarded | seconds | "
              "failures |", "| --- | --- | --- | --- | --- | --- |"]
    for s in searches:
        lines.append(f"| {s.op} | {s.impl} | {s.examples} | {sum(s.discarded.values())} | "
                     f"{s.seconds:.1f} | {len(s.found)}"
                     + (f" (stopped: harness error {s.error})" if s.error else "") + " |")
    discarded = [(s, reason, n) for s in searches for reason, n in s.discarded.most_common(3)]
    if discarded:
        lines += ["", "Discarded draws (not judged), by reason:", ""]
        lines += [f"- {s.op}/{s.impl}: {n} x {reason}" for s, reason, n in discarded]
    if left_out:
        lines += ["", "## Not fuzzed", ""]
        lines += [f"- {x['op']} / {x['impl']}: {x['reason']}" for x in left_out]
    return "\n".join(lines) + "\n"


def junit(searches: list[Search], failures: list[dict]) -> str:
    """One test case per target, failing with each shrunk failure and its replay command."""
    suite = ET.Element("testsuite", name="harness-fuzz", tests=str(len(searches)),
                       failures=str(sum(1 for s in searches if s.found)),
                       errors=str(sum(1 for s in searches if s.error)),
                       time=f"{sum(s.seconds for s in searches):.1f}")
    for s in searches:
        case = ET.SubElement(suite, "testcase", classname=f"fuzz.{s.op}", name=s.impl,
                             time=f"{s.seconds:.1f}")
        ET.SubElement(case, "system-out").text = f"{s.examples} cases judged"
        if s.error:
            ET.SubElement(case, "error", message=s.error)
        mine = [f for f in failures if f["op"] == s.op and f["impl"] == s.impl]
        if mine:
            text = "\n".join(f"{f['output']}, {f['kind']} ({f['check']}): {f['minimal']}"
                             + (f"\n  replay: {f['replay']}" if f["replay"] else "") for f in mine)
            ET.SubElement(case, "failure", message=f"{len(mine)} failure(s), shrunk").text = text
        elif not s.examples and not s.error:
            ET.SubElement(case, "skipped", message="every drawn case was discarded: "
                          + "; ".join(s.discarded)[:300])
    return ET.tostring(suite, encoding="unicode")


def write(folder: pathlib.Path, code: int, why: str, searches: list[Search],
          failures: list[dict], left_out: list[dict], settings: dict) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "junit.xml").write_text(junit(searches, failures))
    (folder / "fuzz.json").write_text(json.dumps({
        "verdict": code, "why": why, **settings,
        "targets": [{"op": s.op, "impl": s.impl, "examples": s.examples, "rounds": s.rounds,
                     "seconds": round(s.seconds, 2), "discarded": dict(s.discarded),
                     "error": s.error,
                     "cases": s.drawn} for s in searches],
        "failures": failures, "not_fuzzed": left_out}, indent=1, default=str))
    path = folder / "fuzz.md"
    path.write_text(markdown(code, why, searches, failures, left_out, settings))
    return path
