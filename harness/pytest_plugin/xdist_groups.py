"""``xdist_group`` markers keep their tests on one pytest-xdist worker, whatever the pytest
release.

pytest-xdist's ``--dist loadgroup`` marks a test's group by appending ``@group`` to
``item._nodeid`` on the workers; pytest 9.2 builds ``nodeid`` from ``item._id``, so the suffix
is lost and every test is scheduled alone: tests that share a module's expensive fixture (the E2E
suite's server run) each run it on their own worker. Here each worker writes the groups of the
tests it collected to a file in a folder the controller names, and the controller schedules with
xdist's ``loadscope`` whose scope is a test's group, else the test itself (``load``'s granularity).
It replaces ``load`` (``-n``'s default) and ``loadgroup``; another ``--dist`` is kept. A worker
that dies is replaced as under ``load`` (kernels that fault on the GPU end their worker).
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest

GROUPS_DIR = pytest.StashKey[pathlib.Path]()
WORKERINPUT_KEY = "harness_xdist_groups"


def group_of(item) -> str | None:
    """The test's group as pytest-xdist names it: its ``xdist_group`` names, sorted, joined."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(controller) Where the worker writes its tests' groups."""
    config = node.config
    if GROUPS_DIR not in config.stash:
        config.stash[GROUPS_DIR] = pathlib.Path(tempfile.mkdtemp(prefix="harness-xdist-groups-"))
    node.workerinput[WORKERINPUT_KEY] = str(config.stash[GROUPS_DIR])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """(worker) The groups of the tests this worker collected, for the controller's scheduler."""
    folder = (getattr(config, "workerinput", None) or {}).get(WORKERINPUT_KEY)
    if not folder:
        return
    groups = {item.nodeid: g for item in items if (g := group_of(item))}
    path = pathlib.Path(folder) / f"{config.workerinput['workerid']}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(groups))
    os.replace(partial, path)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """(controller) ``load`` and ``loadgroup`` runs schedule by group."""
    if config.getvalue("dist") not in ("load", "loadgroup") or GROUPS_DIR not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = config.stash[GROUPS_DIR]

    class GroupScheduling(LoadScopeScheduling):
        """xdist's loadscope with a test's group, else the test itself, as its scope; groups
        with more tests are handed out first (loadscope's reorder)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = {}
                for path in sorted(folder.glob("*.json")):
                    self.groups.update(json.loads(path.read_text()))
            return self.groups.get(nodeid, nodeid)

        def remove_node(self, node):
            """A worker gone: as under ``load``, the test it was running is the crash (reported
            failed by xdist) and the rest of its work goes back to the queue. loadscope puts
            the crashed test back too, so it runs, and kills a worker, again and again until
            the restarts run out."""
            workload = self.assigned_work.pop(node)
            crashed = next((nodeid for unit in workload.values()
                            for nodeid, done in unit.items() if not done), None)
            if crashed is None:
                return None
            for scope, unit in workload.items():
                rest = {nodeid: done for nodeid, done in unit.items() if nodeid != crashed}
                if not all(rest.values()):
                    self.workqueue[scope] = rest
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

        def _reschedule(self, node) -> None:
            """Work only for a worker whose collection has arrived. loadscope hands a unit to
            every worker when one crashes, including a replacement (``--max-worker-restart``)
            still collecting, and fails on its missing collection (KeyError, the run ends in
            an INTERNALERROR); that worker is scheduled when its collection arrives."""
            if node in self.registered_collections:
                super()._reschedule(node)

    return GroupScheduling(config, log)


def pytest_unconfigure(config) -> None:
    folder = config.stash.get(GROUPS_DIR, None)
    if folder is not None:
        for path in folder.glob("*"):
            path.unlink(missing_ok=True)
        folder.rmdir()
