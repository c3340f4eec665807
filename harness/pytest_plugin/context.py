"""Where this pytest process stands: which xdist worker it is (None: the controller), and
the report folder it writes to (None: no ``--report-dir``)."""

from __future__ import annotations

import pathlib


def xdist_worker(config) -> str | None:
    """This process's xdist worker id, from the config (not the environment, which a harness
    subprocess started by a test inherits from its worker)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def report_dir(config) -> pathlib.Path | None:
    folder = config.getoption("report_dir")
    return pathlib.Path(folder) if folder else None
