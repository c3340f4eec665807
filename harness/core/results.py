"""Result records: one row per (op, implementation, case, check, output), gathered into pandas."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading
from typing import Iterable

import pandas as pd

COLUMNS = ("op", "impl", "case", "tokens", "hidden", "check", "output", "verdict", "detail",
           "max_abs", "max_rel", "mean_abs", "max_ulp", "mismatch_frac", "nan_count",
           "nonfinite_mismatch", "cosine", "atol", "rtol")


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


def verdict(passed: bool) -> str:
    return "pass" if passed else "fail"


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
