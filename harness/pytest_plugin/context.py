"""Where this pytest process stands: which xdist worker it is (None: the controller), the
report folder it writes to (None: no ``--report-dir``), and the run's profile."""

from __future__ import annotations

import pathlib

import pytest

from harness.profiles import Profile, get_profile

PROFILE = pytest.StashKey[Profile]()


def xdist_worker(config) -> str | None:
    """This process's xdist worker id, from the config (not the environment, which a harness
    subprocess started by a test inherits from its worker)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def report_dir(config) -> pathlib.Path | None:
    folder = config.getoption("report_dir")
    return pathlib.Path(folder) if folder else None


def run_profile(config) -> Profile:
    """The run's profile (``--profile``, else ``HARNESS_PROFILE``, else the device's default),
    resolved once, in ``pytest_configure``, and read from the config's stash after that."""
    if PROFILE not in config.stash:
        try:
            config.stash[PROFILE] = get_profile(config.getoption("profile"))
        except KeyError as exc:
            raise pytest.UsageError(f"--profile: {exc.args[0]}") from exc
    return config.stash[PROFILE]
