"""A run folder's run.json (what ran, how it ended, the verdict) and the folder itself.

Kept apart from the reports so that ``harness run``'s parent process, which only starts the
pytest child and reads back its verdict, needs neither torch nor pandas."""

from __future__ import annotations

import datetime
import json
import pathlib
import uuid


def write_meta(folder: pathlib.Path, **meta) -> None:
    from harness.environment import environment

    (folder / "run.json").write_text(json.dumps({**meta, "environment": environment()}, indent=1))


def read_meta(folder: pathlib.Path) -> dict:
    path = folder / "run.json"
    return json.loads(path.read_text()) if path.exists() else {}


def update_meta(folder: pathlib.Path, **changes) -> None:
    """Set ``changes`` in an existing run.json (a run's trend, a crash found by its parent)."""
    meta = read_meta(folder)
    (folder / "run.json").write_text(json.dumps({**meta, **changes}, indent=1))


def record_verdict(folder: pathlib.Path, verdict) -> None:
    """run.json's ``verdict``: the same code and reason as the summary's headline."""
    if (folder / "run.json").exists():
        update_meta(folder, verdict={"code": verdict.code, "headline": verdict.headline,
                                     "why": verdict.why})


def new_report_folder(output: str | None) -> pathlib.Path:
    if output:
        folder = pathlib.Path(output)
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = pathlib.Path("reports") / f"{stamp}-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True, exist_ok=True)
    latest = folder.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(folder.name)
    except OSError:
        pass
    return folder
