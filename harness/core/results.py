"""Result rows: one per (op, implementation, case, check, output), made by :func:`result_row`
only, gathered into pandas with every column a consumer reads (report, trend, merge)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading
from typing import Iterable

import pandas as pd

COLUMNS = ("op", "impl", "case", "tokens", "hidden", "check", "output", "verdict", "detail",
           "max_abs", "max_rel", "mean_abs", "max_ulp", "mismatch_frac", "nan_count",
           "nonfinite_mismatch", "cosine", "atol", "rtol", "p50", "p99")
"""Every row has these (missing measures are NA); checks may add measures of their own."""

VERDICTS = ("pass", "fail", "known-deviation", "not run")


def result_row(case, impl: str, check: str, output: str, *, passed: bool | None = None,
               verdict: str | None = None, detail: str = "", op: str | None = None,
               **measures) -> dict:
    """The one way a result row is made: the case's fields, the check, the output judged, the
    verdict (given, or ``pass``/``fail`` from ``passed``), what failed and the check's measures.
    ``op`` names the op judged where the case is another's (a step case judging its top-k)."""
    if verdict is None:
        if passed is None:
            raise ValueError(f"a result row of {check}/{output} needs passed= or verdict=")
        verdict = "pass" if passed else "fail"
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} of {check}/{output} is not one of {VERDICTS}")
    return {"op": op or case.op, "impl": impl, "case": case.id, "tokens": case.tokens,
            "hidden": case.hidden, "check": check, "output": output, "verdict": verdict,
            "detail": detail, "case_op": case.op, "params": case_params_json(case), **measures}


def case_params_json(case) -> str:
    """The case's named parameters as JSON: what the coverage table matches cells against."""
    return json.dumps(dict(getattr(case, "params", ()) or ()), sort_keys=True, default=str)


class ResultLog:
    """Thread-safe list of result rows; ``frame()`` gives the pandas DataFrame."""

    def __init__(self) -> None:
        self._rows: list[dict] = []
        self._lock = threading.Lock()

    def add(self, **row) -> None:
        with self._lock:
            self._rows.append(row)

    def extend(self, rows: Iterable[dict]) -> None:
        with self._lock:
            self._rows.extend(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self._rows)
        for col in COLUMNS:
            if col not in df.columns:
                df[col] = pd.NA
        rest = [c for c in df.columns if c not in COLUMNS]
        return df[list(COLUMNS) + rest]

    def write(self, folder: str | pathlib.Path, stem: str = "results") -> pathlib.Path:
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        df = self.frame()
        df.to_csv(folder / f"{stem}.csv", index=False)
        (folder / f"{stem}.json").write_text(json.dumps(
            json.loads(df.to_json(orient="records")), indent=1))
        return folder


SESSION = ResultLog()
"""Rows recorded by the suites of this process (the conftest writes them out at the end)."""


KNOWN_DEVIATION = "known-deviation"
"""Verdict of a failed comparison that a registered KnownDeviation of the implementation
explains: reported apart from failures (the test is a strict xfail)."""


@dataclasses.dataclass
class Finding:
    detector: str
    op: str
    impl: str
    passed: bool
    message: str
    rows: list[dict] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def explain(self) -> str:
        state = "ok" if self.passed else "FLAGGED"
        return f"[{self.detector}] {self.op}/{self.impl}: {state}: {self.message}"

    def assert_passed(self) -> None:
        """Fail the calling test unless the finding passed; raise ``KnownDeviationSeen`` when
        it passed with rows a known deviation covers (what a covered case's strict xfail
        expects), as ``Evaluation.assert_passed`` does."""
        if not self.passed:
            raise AssertionError(self.explain())
        known = sorted({str(r.get("known_deviation")) for r in self.rows
                        if r.get("verdict") == KNOWN_DEVIATION})
        if known:
            from harness.core.registry import KnownDeviationSeen

            raise KnownDeviationSeen(f"{self.explain()}: {'; '.join(known)}")
