"""Which collected tests run, in what order: ``--impl`` keeps the tests about the named
implementations, ``--shard I/N`` takes one balanced share, end-to-end tests go first and
GPU-heavy ones last, GPU tests skip without a GPU, and each sweep test carries its case (for the
coverage table and the plan ``harness coverage`` reads)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from harness.core import device as harness_device
from harness.pytest_plugin.context import selection
from harness.pytest_plugin.sweep import Target

CASE_PROPERTY = "harness_case"
"""The user property that carries a sweep target's case (op, tokens, hidden, params, impl) to
the controller, so skipped cases can be counted in the coverage table (harness.reports.coverage)."""
COLLECTED = pytest.StashKey[tuple]()
"""(digest, node ids) of everything a sharded run collected before taking its shard."""


IMPL_PARAMS = ("impl", "name")
"""Parameter names under which suites pass a registered implementation's name."""


def implementations_of(item) -> set[str]:
    """The implementations a test is about: its ``implementation(*names)`` marker if it has
    one (no names: about none, e.g. vendor stand-ins), else its sweep target's or its
    ``impl``/``name`` parameter's. ``--impl NAME`` keeps only the tests about NAME."""
    marker = item.get_closest_marker("implementation")
    if marker is not None:
        return set(marker.args)
    params = getattr(getattr(item, "callspec", None), "params", {})
    names = {v.impl.name for v in params.values() if isinstance(v, Target)}
    return names | {v for k, v in params.items() if k in IMPL_PARAMS and isinstance(v, str)}


def ops_of(item) -> set[str]:
    """The ops a test is about: its sweep target's, else those its suite sweeps (``OPS``)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    swept = {v.op for v in params.values() if isinstance(v, Target)}
    return swept or set(getattr(getattr(item, "module", None), "OPS", None) or ())


def _keep(config, items: list, about) -> None:
    kept = [item for item in items if about(item)]
    dropped = [item for item in items if not about(item)]
    items[:] = kept
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def heavy_last(items: list) -> list:
    """``items`` with the ``device_memory_heavy`` ones last, end-to-end tests still first.
    Each heavy test waits until every running light test has finished: spread through the run,
    each one idled the other workers for as long as the longest light test in flight (up to
    58 s, a CLI test's subprocess run); together at the end, the GPU is drained once."""
    return sorted(items, key=lambda item: ("e2e" not in item.keywords) + (
        item.get_closest_marker("device_memory_heavy") is not None))


def pytest_collection_modifyitems(config, items):
    # End-to-end tests take minutes each (a model server per run): start them first, so that
    # under xdist the other workers fill in with kernel tests instead of waiting at the end.
    items[:] = heavy_last(items)
    chosen = selection(config)
    wanted = set(chosen.impls)
    if wanted:
        _keep(config, items, lambda item: implementations_of(item) & wanted)
    ops = set(chosen.ops)
    if ops:
        _keep(config, items, lambda item: ops_of(item) & ops)
    if chosen.shard:
        from harness.pytest_plugin.shards import ShardError, collected_digest, parse, split

        config.stash[COLLECTED] = collected_digest(items)
        try:
            index, count = parse(chosen.shard)
        except ShardError as exc:
            raise pytest.UsageError(str(exc)) from exc
        items[:], dropped = split(items, index, count)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
    if not harness_device.has_gpu():
        skip = pytest.mark.skip(reason="needs a GPU (none visible to torch); run on a CUDA/ROCm "
                                       "host")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    for item in items:
        _leave_interpreted_vendor(config, item)
        _tag_case(item)
    from harness.reports.coverage import PLAN_ENV

    plan = os.environ.get(PLAN_ENV)
    if plan:
        _write_plan(pathlib.Path(plan), items)


def _leave_interpreted_vendor(config, item) -> None:
    """With ``--interpreted-vendors skip`` on a CPU, a vendor's Triton sweep case is skipped,
    saying so, unless the run judges that vendor (``--impl``, ``--require``, ``--ab``): the test
    command's choice (``harness run`` and the GPU profiles sweep them; vendors' torch paths and
    the adapter tests run either way)."""
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    chosen = selection(config)
    if (not isinstance(target, Target) or chosen.interpreted_vendors != "skip"
            or not harness_device.triton_interpreted() or not target.impl.triton
            or target.impl.origin != "vendor" or target.not_judged):
        return
    if target.impl.name in chosen.named() | set(chosen.require):
        return
    item.add_marker(pytest.mark.skip(reason=(
        f"{target.impl.name} is a vendor's Triton entry, which this run leaves to `harness run` "
        "(--interpreted-vendors skip: the CPU's interpreter takes minutes over a vendor's sweep; "
        f"--impl {target.impl.name} or `harness run` judges it)")))
    item.stash[LEFT_TO_MAIN_JOB] = True


LEFT_TO_MAIN_JOB = pytest.StashKey[bool]()
"""Set on a sweep case ``--interpreted-vendors skip`` skipped: its coverage kind is
``interpreter``."""


def _tag_case(item) -> None:
    """The case's property; ``not_judged`` says why the sweep skips it (sweep.SKIP_KINDS)."""
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    if isinstance(target, Target):
        case = target.case
        gpu_only = "gpu" in item.keywords and not harness_device.has_gpu()
        item.user_properties.append((CASE_PROPERTY, json.dumps(
            {"case_op": case.op, "tokens": case.tokens, "hidden": case.hidden,
             "params": dict(case.params), "impl": target.impl.name,
             "not_judged": target.not_judged or ("device" if gpu_only else "")
             or ("interpreter" if item.stash.get(LEFT_TO_MAIN_JOB, False) else "")},
            default=str)))


def _write_plan(path: pathlib.Path, items) -> None:
    with path.open("w") as out:
        for item in items:
            case = dict(item.user_properties).get(CASE_PROPERTY)
            if not case:
                continue
            skip = next(item.iter_markers("skip"), None)
            reason = (skip.kwargs.get("reason") or (skip.args[0] if skip.args else "skipped")
                      ) if skip is not None else ""
            out.write(json.dumps({**json.loads(case), "id": item.nodeid, "reason": reason}) + "\n")
