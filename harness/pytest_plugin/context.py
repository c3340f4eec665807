"""Where this pytest process stands: which xdist worker it is (None: the controller), the
report folder it writes to (None: no ``--report-dir``), and what the run judges: its
:class:`~harness.options.selection.Selection` and profile, resolved once, in ``pytest_configure``, and
read from the config's stash after that."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from harness.options import SELECTION_FLAG
from harness.options.selection import Selection, SelectionError, selection_options_given
from harness.profiles import Profile, get_profile

PROFILE = pytest.StashKey[Profile]()
SELECTION = pytest.StashKey[Selection]()


def xdist_worker(config) -> str | None:
    """This process's xdist worker id, from the config (not the environment, which a harness
    subprocess started by a test inherits from its worker)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def report_dir(config) -> pathlib.Path | None:
    folder = config.getoption("report_dir")
    return pathlib.Path(folder) if folder else None


def selection(config) -> Selection:
    """The run's selection (``harness run``'s file, else pytest's own options), its profile
    resolved."""
    if SELECTION not in config.stash:
        _resolve(config)
    return config.stash[SELECTION]


def run_profile(config) -> Profile:
    """The run's profile (``--profile``, else ``HARNESS_PROFILE``, else the device's default)."""
    if PROFILE not in config.stash:
        _resolve(config)
    return config.stash[PROFILE]


def _resolve(config) -> None:
    chosen = given_selection(config)
    try:
        profile = get_profile(chosen.profile)
    except KeyError as exc:
        raise pytest.UsageError(f"--profile: {exc.args[0]}") from exc
    chosen = dataclasses.replace(chosen, profile=profile.name)
    config.stash[PROFILE], config.stash[SELECTION] = profile, chosen
    # Suites (and plugins) that read an option themselves see the resolved selection too.
    for dest, value in chosen.option_values().items():
        setattr(config.option, dest, value)


def given_selection(config) -> Selection:
    """The selection pytest was given: ``harness run``'s file, else its own options; a usage
    error for both at once, a malformed one, or a file that cannot be read."""
    path = config.getoption("harness_selection")
    try:
        if path is None:
            return Selection.from_namespace(config.option)
        also = selection_options_given(config.option)
        if also:
            raise pytest.UsageError(
                f"{SELECTION_FLAG} {path} and {', '.join(also)}: the selection file is the whole "
                "selection; give the options to `harness run` (before --), or drop the file")
        return Selection.read(path)
    except SelectionError as exc:
        raise pytest.UsageError(str(exc)) from exc
