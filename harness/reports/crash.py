"""A run whose test process died: which case killed it, from the in-flight record the pytest
plugin keeps in the report folder (``in_flight/<worker>.json``), and the Python tracebacks the
fault handler wrote beside it. ``crash.md`` says it; run.json's ``crashed`` makes the verdict 1
(a crash is the implementation's failure, as pytest-xdist counts a worker's)."""

from __future__ import annotations

import json
import pathlib
import signal

IN_FLIGHT = "in_flight"
SUPERVISED = "HARNESS_SUPERVISED"
"""Set by ``harness run`` for its pytest: the fault handler then writes into the report folder,
where the crash report finds it (without a parent, it writes to the terminal as usual)."""


def in_flight(folder: pathlib.Path) -> list[dict]:
    """The tests the run's processes were running (each: test, pid, started, limit_s)."""
    found = []
    for path in sorted((folder / IN_FLIGHT).glob("*.json")):
        try:
            record = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            continue
        if record.get("test"):
            found.append({**record, "worker": path.stem})
    return found


def tracebacks(folder: pathlib.Path) -> str:
    """What the fault handler wrote (a segfault's or abort's Python stack), per process."""
    parts = []
    for path in sorted((folder / IN_FLIGHT).glob("*.traceback")):
        text = path.read_text(errors="replace").strip()
        if text:
            parts.append(f"[{path.stem}]\n{text}")
    return "\n\n".join(parts)


def how_it_ended(returncode: int) -> str:
    """'killed by SIGSEGV' for a signal death (a negative return code, or a shell's 128+N)."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        return f"killed by {signal.Signals(signum).name}" if signum else f"exited {returncode}"
    except ValueError:
        return f"exited {returncode}"


def write_crash_report(folder: pathlib.Path, how: str, tests: list[str]) -> pathlib.Path:
    stacks = tracebacks(folder)
    lines = ["# The test process died", "", f"It was {how}"
             + (f" while running {', '.join(f'`{t}`' for t in tests)}." if tests
                else " with no test in flight."), "",
             "A crash is the implementation's failure (verdict 1). Rerun the case alone "
             "(`python -m pytest 'NODEID' -p no:xdist`) to see it again."]
    if stacks:
        lines += ["", "## Python stacks at the crash (faulthandler)", "", "```", stacks, "```"]
    path = folder / "crash.md"
    path.write_text("\n".join(lines) + "\n")
    return path
