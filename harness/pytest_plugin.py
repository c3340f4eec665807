"""pytest integration: options, sweep parametrization, result recording.

Suites declare what they sweep, and this plugin expands it from the active profile::

    OPS = MHC_OPS                                   # module constant: ops under test

    @pytest.mark.sweep("tokens", "hidden", "seed")  # axes taken from the profile
    def test_matches_reference(target): ...

    @pytest.mark.sweep(hidden="profile", tokens=[7, 257])   # explicit values for an axis
    def test_poison(target): ...

    @pytest.mark.sweep(ops=["top_k_per_row_decode"], top_k={"smoke": [16], "default": [2048]})
    def test_decode(target): ...     # other keywords become Case.params; a dict maps profiles

A keyword must be a case parameter that a swept op's spec declares (``OpSpec.case_params``);
each op's cases carry the ones it declares, and a name none declares is a usage error.


Each generated test gets a :class:`Target` (spec, implementation, case) with an id like
``mhc_pre-T4099-H7168-triton``. Implementations that cannot run here (a vendor package that is
not installed) are left out of the sweep and listed, with the registry's reason, under "Not run
here" in the report; one named with ``--impl`` is collected as a skip carrying that reason.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import pathlib

import pytest

from harness.core import deferred
from harness.core import device as harness_device
from harness.profiles import (INTERPRETER_MAX_ELEMENTS, INTERPRETER_MAX_TOKENS, Profile,
                              get_profile, runs_for)
from harness import families
from harness.core.registry import Implementation, KnownDeviationSeen, records
from harness.core.results import SESSION
from harness.core.cases import Case
from harness.core.specs import OpSpec, get_spec

AXES = ("tokens", "hidden", "seed")


@dataclasses.dataclass(frozen=True)
class Target:
    spec: OpSpec
    impl: Implementation
    case: Case
    profile: Profile

    @property
    def op(self) -> str:
        return self.spec.op

    def runs(self, case: Case | None = None) -> int:
        """How many times the accuracy suites run ``case`` (default: the target's own); cases a
        known deviation covers too, since a deviation documents a wrong value, not a race."""
        return runs_for(self.profile, (case or self.case).id)


def pytest_addoption(parser):
    group = parser.getgroup("harness")
    group.addoption("--profile", default=None,
                    help="sweep profile: smoke, ci, nightly, full (default: smoke on CPU, ci on GPU)")
    group.addoption("--impl", action="append", default=[],
                    help="only test these implementations (repeatable); the reference still "
                         "serves as ground truth")
    group.addoption("--require", action="append", default=[], metavar="NAME",
                    help="implementation that must be judged (repeatable): if it is not "
                         "registered, cannot run here or runs no case, the verdict is 'could "
                         "not test' (125) with the reason, whatever else passed")
    group.addoption("--impl-module", action="append", default=[],
                    help="import this module or .py file first, so it can register implementations")
    group.addoption("--ab", default=None,
                    help="A,B: compare implementation B with A (and both with the reference)")
    group.addoption("--device", default=None, help="cuda or cpu (default: cuda when present)")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run only shard I of N (deterministic, balanced by expected cost); "
                         "merge the shards' report folders with `harness report DIR...`")
    group.addoption("--report-dir", default=os.environ.get("HARNESS_REPORT_DIR"),
                    help="write the report folder here: result rows (CSV, JSON), junit.xml, "
                         "run.json, summary.md, report.html, and cases/ (failing cases, for "
                         "`harness replay`)")
    group.addoption("--save-cases", action="append", default=[], metavar="OP",
                    help="with --report-dir, also save every case of OP, passing or not")


def _pin_worker_gpu(config) -> None:
    """Under pytest-xdist on a multi-GPU host, worker gwN uses GPU N mod count (set before any
    CUDA context exists), so ``-n auto`` spreads the suites over the GPUs."""
    worker = _xdist_worker(config) or ""
    if not worker.startswith("gw") or "CUDA_VISIBLE_DEVICES" in os.environ:
        return
    import torch

    count = torch.cuda.device_count()
    if count > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(int(worker[2:]) % count)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _pin_worker_gpu(config)
    folder = _report_dir(config)
    if folder is not None:
        # The test command itself writes the whole report folder (results, junit.xml, run.json,
        # summary.md, report.html), so CI publishes it without running the suites twice.
        folder.mkdir(parents=True, exist_ok=True)
        if not config.option.xmlpath:
            config.option.xmlpath = str(folder / "junit.xml")
        from harness.saved_cases import SavedCases

        config.pluginmanager.register(SavedCases(config, folder), "harness-saved-cases")
        if _xdist_worker(config) is None:
            from harness.durations import DurationLog

            config.pluginmanager.register(DurationLog(folder), "harness-durations")
    harness_device.configure_triton(cpu_tensors=config.getoption("device") == "cpu")
    config.addinivalue_line("markers", "sweep(*axes, **values): axes of the profile to expand")
    config.addinivalue_line("markers", "gpu: needs a CUDA/ROCm GPU; skipped with a reason elsewhere")
    config.addinivalue_line("markers", "e2e: end-to-end run against an inference server")
    # pytest-xdist registers this marker only while it is active; runs with `-p no:xdist` (the
    # CLI's subprocesses, a bisect) must still collect the suites that use it under --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")
    config.addinivalue_line("markers", "implementation(*names): the implementations a test is "
                            "about, for --impl (no names: none, e.g. vendor stand-ins)")
    config.addinivalue_line("markers", "device_memory_heavy: needs tens of GB of GPU memory; "
                            "runs one at a time across xdist workers")
    config.addinivalue_line("markers", "host_only: allocates no GPU memory itself, so it takes "
                            "no GPU share (harness runs it starts in subprocesses take their own)")
    from harness.plugins import ImplModuleError, load_impl_modules

    families.load()
    try:
        load_impl_modules(config.getoption("impl_module") or [], env=True)
    except ImplModuleError as exc:
        raise pytest.UsageError(str(exc)) from exc
    from harness.core.ops import OP_NAMES

    known = {name for op in OP_NAMES for name in records(op)}
    wanted = set(config.getoption("impl") or [])
    if config.getoption("ab"):
        pair = config.getoption("ab").split(",")
        if len(pair) != 2 or not all(pair):
            raise pytest.UsageError(f"--ab wants two names, A,B; got {config.getoption('ab')!r}")
        wanted |= set(pair)
    unknown = sorted(wanted - known)
    if unknown:
        raise pytest.UsageError(
            f"--impl {', '.join(unknown)}: no such implementation is registered (known: "
            f"{', '.join(sorted(known))}); load it with --impl-module or fix the name")


def _say_notices(config) -> None:
    """What the vendor adapters found about this machine's packages, once, by the controller."""
    from harness.adapters.base import NOTICES

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or _xdist_worker(config) is not None:
        return
    for line in NOTICES:
        reporter.write_line(f"note: {line}")


def _values(profile: Profile, axis: str, spec) -> tuple:
    """``"profile"``: the profile's own axis; ``"smallest"``: its smallest value;
    ``"dispatch"``: the profile's dispatch_tokens; a dict: values per profile name (key
    ``"default"`` for the rest); else the literal values."""
    if spec in ("profile", "smallest"):
        values = {"tokens": profile.tokens, "hidden": profile.hidden, "seed": profile.seeds}[axis]
        return values if spec == "profile" else (min(values),)
    if spec == "dispatch":
        return profile.dispatch_tokens
    if isinstance(spec, dict):
        spec = spec.get(profile.name, spec.get("default", ()))
    return tuple(spec)


LARGE_CASE_ELEMENTS = 2 ** 27
"""Cases whose rows x width reach this many elements need tens of GB for their float64
reference. They carry the ``device_memory_heavy`` marker: on a GPU, a heavy test runs with the
GPU to itself (harness.gpu_memory), so that tests cannot exhaust one GPU's memory together (an
out-of-memory failure makes the run "could not test")."""


def _memory_marks(spec: OpSpec, case: Case, profile: Profile) -> list:
    """A test swept without a token axis may use any token count of its profile (the
    precision-growth test runs them all): unless its spec can size the case from its other
    parameters, it is judged by the profile's largest."""
    elements = spec.case_elements(case)
    if elements is None:
        elements = spec.case_elements(case.with_tokens(max(profile.tokens)))
    return [pytest.mark.device_memory_heavy] if elements >= LARGE_CASE_ELEMENTS else []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """On a GPU: a heavy test runs with the GPU to itself, the others share it
    (harness.gpu_memory). The share covers setup, call and teardown, and memory goes back
    before it ends: a function fixture or a failure's frames still holding a heavy test's
    tensors after its call made the next heavy test run out of memory (H100, 2026-11-24)."""
    if not harness_device.has_gpu() or item.get_closest_marker("host_only") is not None:
        yield
        return
    from harness import gpu_memory

    heavy = item.get_closest_marker("device_memory_heavy") is not None
    with gpu_memory.gpu_share(heavy) as waited:
        item.user_properties.append(("gpu_lock_wait_s", round(waited, 3)))
        item.user_properties.append(("heavy", heavy))
        gpu_memory.reset_peak()
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's fixtures are finalised: GPU memory goes back to the other workers, and
    the test's peak and what its process still holds after that (``gpu_retained_gib``: memory
    pinned by live tensors or by cached segments that cannot be returned) go to durations.csv."""
    yield
    if harness_device.has_gpu():
        from harness import gpu_memory

        gpu_memory.release()
        item.user_properties.append(("gpu_peak_gib", gpu_memory.peak_gib()))
        item.user_properties.append(("gpu_retained_gib", gpu_memory.retained_gib()))


def _cost_marks(spec: OpSpec, impl: Implementation, case: Case) -> list:
    """Skips, with the reason, for cases beyond what ``impl`` is run at: Triton kernels under
    the CPU interpreter, and an implementation's declared ``cost_limit``."""
    if (impl.triton and harness_device.triton_interpreted()
            and (case.tokens or 0) > INTERPRETER_MAX_TOKENS):
        return [pytest.mark.skip(reason=f"{impl.name} launches Triton kernels, which the CPU "
                                 f"runs under the interpreter (minutes at T={case.tokens}); "
                                 f"Triton kernels stop at T={INTERPRETER_MAX_TOKENS} on a CPU "
                                 "and are run at every token count on a GPU (--profile "
                                 "ci/nightly)")]
    elements = spec.case_elements(case)
    if (impl.triton and harness_device.triton_interpreted() and elements is not None
            and elements > INTERPRETER_MAX_ELEMENTS):
        return [pytest.mark.skip(reason=f"{impl.name} launches Triton kernels, which the CPU "
                                 f"runs under the interpreter (minutes for {elements} elements); "
                                 f"on a CPU they stop at {INTERPRETER_MAX_ELEMENTS} elements, "
                                 "torch paths and user modules run this size here, and Triton "
                                 "kernels run it on a GPU (--profile ci/nightly)")]
    unsupported = impl.unsupported_for(case)
    if unsupported:
        return [pytest.mark.skip(reason=f"{impl.name}/{case.op} is documented not to handle "
                                 f"this case, so it is not judged here: {unsupported[0].reason}")]
    limit = impl.cost_limit
    if limit is not None and elements is not None and elements > limit.elements:
        return [pytest.mark.skip(reason=f"{impl.name}/{case.op} runs cases up to "
                                 f"{limit.elements} elements, this one has {elements}: "
                                 f"{limit.reason}")]
    return []


def _deviation_marks(impl, case) -> list:
    """A strict xfail for a case that a known deviation of ``impl`` covers, expecting
    KnownDeviationSeen alone (a failure beyond the deviation, or an exception, fails)."""
    reasons = [d.reason for d in impl.deviations_for(case)]
    return [pytest.mark.xfail(strict=True, raises=KnownDeviationSeen,
                              reason=f"known deviation of {impl.name} from the "
                              f"contract: {'; '.join(reasons)}")] if reasons else []


def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    config = metafunc.config
    profile = get_profile(config.getoption("profile"))
    dev = config.getoption("device") or harness_device.default_device()
    ops = getattr(metafunc.module, "OPS", None)
    if not ops:
        raise pytest.UsageError(f"{metafunc.module.__name__} uses `target` but sets no OPS")
    marker = metafunc.definition.get_closest_marker("sweep")
    axes = {a: "profile" for a in (marker.args if marker else AXES)}
    axes.update(marker.kwargs if marker else {})
    only_ops = axes.pop("ops", None)
    if only_ops:
        ops = [op for op in ops if op in only_ops]
    grid = {a: _values(profile, a, axes[a]) if a in axes else (None,) for a in AXES}
    extra = {a: _values(profile, a, v) for a, v in axes.items() if a not in AXES}
    undeclared = sorted(a for a in extra if not any(a in get_spec(op).case_params for op in ops))
    if undeclared:
        known = sorted({p for op in ops for p in get_spec(op).case_params})
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: sweep axis {', '.join(undeclared)} is no case "
            f"parameter of {', '.join(ops)}; they take {', '.join(AXES + tuple(known))}")
    empty = sorted(a for a, v in {**grid, **extra}.items() if not v)
    if empty:
        metafunc.parametrize("target", [pytest.param(None, marks=pytest.mark.skip(
            reason=f"not in the {profile.name} profile: its sweep lists no {', '.join(empty)} "
                   "for it"))])
        return
    wanted = set(config.getoption("impl") or [])
    params = []
    for op in ops:
        spec = get_spec(op)
        own = {a: v for a, v in extra.items() if a in spec.case_params}
        combos = [tuple(zip(own, vals)) for vals in itertools.product(*own.values())]
        for name, impl in sorted(records(op).items()):
            if wanted and name not in wanted:
                continue
            if not impl.available:
                if name in wanted:
                    params.append(pytest.param(None, id=f"{op}-{name}", marks=[
                        pytest.mark.skip(reason=f"{op}/{name} cannot run here: {impl.reason}"),
                        pytest.mark.implementation(name)]))
                continue
            for hidden in grid["hidden"]:
                for tokens in grid["tokens"]:
                    for seed, combo in itertools.product(grid["seed"], combos):
                        case = Case(op, tokens=tokens or 0, hidden=hidden or 0, seed=seed or 0,
                                    device=dev, params=combo)
                        marks = (_deviation_marks(impl, case) + _memory_marks(spec, case, profile)
                                 + _cost_marks(spec, impl, case))
                        pid = [op] + ([f"T{tokens}"] if tokens is not None else []) + \
                              ([f"H{hidden}"] if hidden is not None else []) + \
                              [f"{k}{v}" for k, v in combo] + \
                              ([f"s{seed}"] if seed is not None and len(grid["seed"]) > 1 else []) + [name]
                        params.append(pytest.param(Target(spec, impl, case, profile),
                                                   id="-".join(pid), marks=marks))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(
            reason=f"no implementation of {ops} matches --impl {sorted(wanted)}"))]
    metafunc.parametrize("target", params)


@pytest.fixture(autouse=True)
def _device_errors_read_by_their_test():
    """Every test ends with its calls' device-checked errors read (``deferred``)."""
    yield
    deferred.raise_left_behind()


@pytest.fixture
def device(request) -> str:
    """The device the run targets (``--device``, else CUDA when present, else CPU)."""
    return request.config.getoption("device") or harness_device.default_device()


@pytest.fixture
def record(request):
    """Append result rows (dicts) to the session's result log, each with the test's node id (the
    report turns it into the command that reproduces only that test)."""
    test = f"{request.config.rootpath}/{request.node.nodeid}"
    counted = {value for key, value in request.node.user_properties if key == "impl"}

    def extend(rows):
        rows = [{**row, "test": test} for row in rows]
        for group in _failure_groups(rows):
            if ("failure_group", group) not in request.node.user_properties:
                request.node.user_properties.append(("failure_group", group))
        for impl in sorted({str(r["impl"]) for r in rows if r.get("impl")} - counted):
            # Rows of an implementation count as that implementation having run (a suite that
            # runs vLLM's own code, not through a sweep target, still counts for --impl vllm).
            request.node.user_properties.append(("impl", impl))
            counted.add(impl)
        SESSION.extend(rows)
    return extend


def _failure_groups(rows) -> list[str]:
    """The cause groups of the failing rows (report_tables.failure_groups' key), carried into
    JUnit as ``failure_group`` properties so a CI page can group failures too."""
    from harness.report_tables import SEEDED_FAULT_PREFIX, failure_kind

    return sorted({f"{r.get('impl')} / {r.get('op')} / {str(r.get('output')).split('/')[0]}: "
                   f"{failure_kind(r)}" for r in rows if r.get("verdict") == "fail"
                   and not str(r.get("impl", "")).startswith(SEEDED_FAULT_PREFIX)})


def _xdist_worker(config) -> str | None:
    """This process's xdist worker id, from the config (not the environment, which a harness
    subprocess started by a test inherits from its worker)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def _report_dir(config) -> pathlib.Path | None:
    folder = config.getoption("report_dir")
    return pathlib.Path(folder) if folder else None


def pytest_sessionstart(session):
    session.config._harness_started = datetime.datetime.now()
    _say_notices(session.config)


def pytest_sessionfinish(session, exitstatus):
    folder = _report_dir(session.config)
    if folder is None:
        return
    worker = _xdist_worker(session.config)
    if len(SESSION):
        SESSION.write(folder, stem=f"results-{worker}" if worker else "results")
    if worker:
        return
    from harness.report import write_meta, write_summary

    started = getattr(session.config, "_harness_started", datetime.datetime.now())
    profile = get_profile(session.config.getoption("profile")).name
    write_meta(folder, profile=profile, pytest_exit=int(exitstatus),
               started=started.isoformat(),
               seconds=(datetime.datetime.now() - started).total_seconds(),
               argv=list(session.config.invocation_params.args),
               cwd=str(session.config.invocation_params.dir),
               cases_run=dict(_TALLY["ran"]), out_of_memory=list(_TALLY["out_of_memory"]),
               failed=list(_TALLY["failed"]), impl_wanted=session.config.getoption("impl") or [],
               skipped_cases=list(_TALLY["skipped_cases"]),
               impl_required=_required(session.config),
               collected=_collected(session.config, folder),
               shard=session.config.getoption("shard"))
    write_summary(folder, profile=profile, pytest_exit=int(exitstatus))


def _collected(config, folder: pathlib.Path) -> str | None:
    """A sharded run's digest of the collected test ids (its ids in ``collected.txt``, so a
    merge can name what differs between shards)."""
    digest, ids = config.stash.get(COLLECTED, (None, ()))
    if digest is not None:
        (folder / "collected.txt").write_text("\n".join(ids) + "\n")
    return digest


def _required(config) -> dict[str, str]:
    """``--require`` names -> why each cannot run here ("" when it can)."""
    from harness.core.ops import OP_NAMES

    found: dict[str, list] = {}
    for op in OP_NAMES:
        for name, impl in records(op).items():
            found.setdefault(name, []).append(impl)
    why = {}
    for name in config.getoption("require") or []:
        impls = found.get(name, [])
        if not impls:
            why[name] = (f"{name} is not registered on this machine (its package or adapter did "
                         "not load: see 'Not run here'; --impl-module loads a module)")
        elif not any(i.available for i in impls):
            why[name] = f"{name} cannot run here: {impls[0].reason}"
        else:
            why[name] = ""
    return why


OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "HIP out of memory")


def pytest_runtest_setup(item):
    """Tag each sweep test with its implementation, so the controller (also under xdist) can
    count what every implementation actually ran."""
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    if isinstance(target, Target):
        item.user_properties.append(("impl", target.impl.name))


def pytest_runtest_logreport(report):
    """Outcome tallies for the verdict: cases run per implementation; failures that are the
    machine's (out of memory) rather than the kernel's."""
    tally = _TALLY
    if report.failed and any(m in str(report.longrepr) for m in OOM_MARKERS):
        tally["out_of_memory"].append(report.nodeid)
    elif report.failed:
        tally["failed"].append(report.nodeid)
    if report.when == "call" and not report.skipped:
        for key, value in report.user_properties:
            if key == "impl":
                tally["ran"][value] = tally["ran"].get(value, 0) + 1
    if report.skipped and not hasattr(report, "wasxfail"):
        case = dict(report.user_properties).get(CASE_PROPERTY)
        if case:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            tally["skipped_cases"].append({**json.loads(case),
                                           "reason": str(reason).removeprefix("Skipped: ")})


_TALLY: dict = {"ran": {}, "failed": [], "out_of_memory": [], "skipped_cases": []}
CASE_PROPERTY = "harness_case"
"""The user property that carries a sweep target's case (op, tokens, hidden, params, impl) to
the controller, so skipped cases can be counted in the coverage table (harness.coverage)."""


def _tag_case(item) -> None:
    target = getattr(item, "callspec", None) and item.callspec.params.get("target")
    if isinstance(target, Target):
        case = target.case
        item.user_properties.append((CASE_PROPERTY, json.dumps(
            {"case_op": case.op, "tokens": case.tokens, "hidden": case.hidden,
             "params": dict(case.params), "impl": target.impl.name}, default=str)))
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
    for item in items:
        _tag_case(item)
    wanted = set(config.getoption("impl") or [])
    if wanted:
        kept = [item for item in items if implementations_of(item) & wanted]
        dropped = [item for item in items if not implementations_of(item) & wanted]
        items[:] = kept
        if dropped:
            config.hook.pytest_deselected(items=dropped)
    if config.getoption("shard"):
        from harness.shards import ShardError, collected_digest, parse, split

        config.stash[COLLECTED] = collected_digest(items)
        try:
            index, count = parse(config.getoption("shard"))
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
    from harness.coverage import PLAN_ENV

    plan = os.environ.get(PLAN_ENV)
    if plan:
        _write_plan(pathlib.Path(plan), items)


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

