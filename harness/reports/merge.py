"""``harness report DIR DIR...``: the report folders of one sweep's shards as one report.

Refuses folders of different profiles or commits (their results would not be one sweep) and
folders that are not harness runs. The merged folder gets every shard's result rows, one
``junit.xml`` with every test case, the saved failing cases, and a ``run.json`` whose exit
status and tallies are those of the whole sweep; ``summary.md`` and ``report.html`` are then
written from it like any run's.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import xml.etree.ElementTree as ET

from harness.reports.summary import read_meta

PYTEST_OK, PYTEST_FAILED, PYTEST_NO_TESTS = 0, 1, 5


class MergeError(ValueError):
    pass


def _check(folders: list[pathlib.Path]) -> list[dict]:
    metas = []
    for folder in folders:
        meta = read_meta(folder)
        if not meta or not list(folder.glob("results*.csv")) and not (folder / "junit.xml").exists():
            raise MergeError(f"{folder} is not a harness report folder (no run.json / results); "
                             "pass the folders written by `harness run --shard I/N`")
        metas.append(meta)
    for key, what in (("profile", "profile"), ("git_commit", "commit")):
        values = {str(m.get(key) or (m.get("environment") or {}).get(key)) for m in metas}
        if len(values) > 1:
            raise MergeError(f"the folders come from different {what}s ({', '.join(sorted(values))}); "
                             "merge only the shards of one sweep (same profile, same commit)")
    _check_collected(folders, metas)
    _check_every_shard(folders, metas)
    return metas


def _check_every_shard(folders: list[pathlib.Path], metas: list[dict]) -> None:
    """The folders are shards 1..N of one N, each once: a merge missing a shard would judge
    part of the sweep as if it were the whole."""
    parts = []
    for folder, meta in zip(folders, metas):
        found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(meta.get("shard") or ""))
        if found and 1 <= int(found.group(1)) <= int(found.group(2)):
            parts.append((int(found.group(1)), int(found.group(2))))
        else:
            raise MergeError(f"{folder} is not a shard (its run.json records shard "
                             f"{meta.get('shard')!r}): merge only the folders written by "
                             "`harness run --shard I/N`, one for each I")
    counts = sorted({n for _, n in parts})
    if len(counts) > 1:
        raise MergeError("the folders are shards of different splits ("
                         + ", ".join(f"{i}/{n}" for i, n in parts) + "): merge the N folders "
                         "of one `--shard I/N` sweep")
    seen = [i for i, _ in parts]
    twice = sorted({f"{i}/{counts[0]}" for i in seen if seen.count(i) > 1})
    if twice:
        raise MergeError(f"the same shard appears twice ({', '.join(twice)})")
    missing = [f"{i}/{counts[0]}" for i in range(1, counts[0] + 1) if i not in seen]
    if missing:
        raise MergeError(f"shard(s) {', '.join(missing)} missing: the merge would judge "
                         f"{len(seen)} of {counts[0]} parts of the sweep as the whole; pass the "
                         "report folder of every shard")


def _check_collected(folders: list[pathlib.Path], metas: list[dict]) -> None:
    """Shards must have collected the same tests before each took its part."""
    digests = {m.get("collected") for m in metas}
    if len(digests) <= 1:
        return
    if None in digests:
        lacking = [str(f) for f, m in zip(folders, metas) if not m.get("collected")]
        raise MergeError(f"{', '.join(lacking)} record no collected-test digest (not run with "
                         "--shard by this harness version); rerun every shard with one version")
    sets = [set(_ids(f)) for f in folders]
    for (fa, a), (fb, b) in zip(zip(folders, sets), list(zip(folders, sets))[1:]):
        if a != b:
            only_a, only_b = sorted(a - b)[:3], sorted(b - a)[:3]
            raise MergeError(
                f"{fa} and {fb} collected different tests ({len(a - b)} only in the first, e.g. "
                f"{only_a}; {len(b - a)} only in the second, e.g. {only_b}): their hosts differ "
                "in installed packages or options, so the shards are not one sweep. Run every "
                "shard with the same packages (or --impl / --require the same names)")


def _ids(folder: pathlib.Path) -> list[str]:
    path = folder / "collected.txt"
    return path.read_text().split("\n") if path.exists() else []


def _pytest_exit(codes: list[int]) -> int:
    worst = [c for c in codes if c not in (PYTEST_OK, PYTEST_FAILED, PYTEST_NO_TESTS)]
    if worst:
        return worst[0]
    if PYTEST_FAILED in codes:
        return PYTEST_FAILED
    return PYTEST_NO_TESTS if all(c == PYTEST_NO_TESTS for c in codes) else PYTEST_OK


def _required(metas: list[dict]) -> dict[str, str]:
    """Each required implementation with the first shard's reason it could not run, if any."""
    merged: dict[str, str] = {}
    for meta in metas:
        for name, why in (meta.get("impl_required") or {}).items():
            merged[name] = merged.get(name) or why
    return merged


def _first_of(metas: list[dict], key: str, folders: list[pathlib.Path]) -> dict | None:
    """A shard's crash or stop (the first), naming the shard's folder: one shard that did not
    finish makes the merged sweep's verdict what that shard's was."""
    for meta, folder in zip(metas, folders):
        if meta.get(key):
            return {**meta[key], "how": f"{meta[key].get('how', key)}, in shard {folder}"}
    return None


def _coverage(metas: list[dict]) -> list[dict]:
    """Every shard's per implementation and op counts, summed."""
    summed: dict[tuple[str, str], dict] = {}
    for meta in metas:
        for row in meta.get("coverage") or []:
            into = summed.setdefault((row["impl"], row["op"]), {"impl": row["impl"], "op": row["op"]})
            for key, value in row.items():
                if key not in ("impl", "op"):
                    into[key] = into.get(key, 0) + int(value)
    return [summed[key] for key in sorted(summed)]


def _merge_junit(folders: list[pathlib.Path], out: pathlib.Path) -> None:
    merged = ET.Element("testsuites")
    suite = ET.SubElement(merged, "testsuite", name="harness")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for folder in folders:
        path = folder / "junit.xml"
        if not path.exists():
            continue
        for found in ET.parse(path).getroot().iter("testsuite"):
            for key in totals:
                totals[key] += int(found.get(key, 0))
            suite.extend(found.findall("testcase"))
    for key, value in totals.items():
        suite.set(key, str(value))
    ET.ElementTree(merged).write(out / "junit.xml", encoding="utf-8", xml_declaration=True)


def merge(folders: list[pathlib.Path], out: pathlib.Path) -> dict:
    """Write the merged folder ``out``; returns its run.json contents."""
    metas = _check(folders)
    out.mkdir(parents=True, exist_ok=True)
    for n, folder in enumerate(folders, start=1):
        for csv in sorted(folder.glob("results*.csv")):
            shutil.copy(csv, out / f"{csv.stem}-shard{n}.csv")
        cases = folder / "cases"
        if cases.is_dir():
            (out / "cases").mkdir(exist_ok=True)
            for case in cases.glob("*.pt"):
                shutil.copy(case, out / "cases" / case.name)
            if (cases / "not_saved.txt").exists():
                with open(out / "cases" / "not_saved.txt", "a") as notes:
                    notes.write((cases / "not_saved.txt").read_text())
    _merge_junit(folders, out)
    cases_run: dict[str, int] = {}
    for meta in metas:
        for impl, count in (meta.get("cases_run") or {}).items():
            cases_run[impl] = cases_run.get(impl, 0) + count
    first = metas[0]
    meta = {**first, "pytest_exit": _pytest_exit([int(m.get("pytest_exit", 0)) for m in metas]),
            "seconds": max(float(m.get("seconds", 0)) for m in metas),
            "seconds_all_shards": sum(float(m.get("seconds", 0)) for m in metas),
            "started": min(str(m.get("started", "")) for m in metas),
            "cases_run": cases_run,
            "impl_required": _required(metas),
            "failed": [t for m in metas for t in m.get("failed", [])],
            "out_of_memory": [t for m in metas for t in m.get("out_of_memory", [])],
            "skipped_cases": [s for m in metas for s in m.get("skipped_cases", [])],
            "failed_cases": [s for m in metas for s in m.get("failed_cases", [])],
            "timed_out": [t for m in metas for t in m.get("timed_out", [])],
            "crashed": _first_of(metas, "crashed", folders),
            "interrupted": _first_of(metas, "interrupted", folders),
            "trend": None, "verdict": None,
            "failed_about": {t: a for m in metas for t, a in (m.get("failed_about") or {}).items()},
            "coverage": _coverage(metas),
            "shard": None, "merged_from": [str(f) for f in folders],
            "shards": sorted(str(m.get("shard")) for m in metas)}
    (out / "run.json").write_text(json.dumps(meta, indent=1))
    return meta
