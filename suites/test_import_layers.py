"""The architecture, as imports: the core knows no kernel, the kernels know only the core, the
engine collects families without naming one, and no module imports itself back through others.

Layers, lowest first (every import in a module counts, also one inside a function):

- ``kernels.runtime``: what the shipped kernels need to run (device, argument errors, memo,
  deferred checks, launch cache, Triton helpers), importing nothing of the harness;
- ``harness.core``: ops, cases, specs, registry, metrics, tolerances, result rows, faults, family;
- ``kernels``: one package per family, importing the core and other families;
- ``harness.adapters``: vendor implementations, importing the core and the families' contracts;
- the engine, the rest of ``harness``: evaluation, detectors, selftest, reports, CLI; it reaches
  the kernels only through ``harness.families`` (``kernels.FAMILIES``).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.machinery


ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "kernels")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, known: set[str]) -> set[str]:
    """Our modules ``path`` imports: ``from a.b import c`` names ``a.b.c`` when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    return {name: _imports(path, known) - {name} for name, path in files.items()}


def layer(module: str) -> str:
    for prefix, name in (("kernels.runtime", "runtime"), ("harness.core", "core"),
                         ("harness.adapters", "adapters"), ("kernels", "kernels"),
                         ("harness", "engine")):
        if module == prefix or module.startswith(prefix + "."):
            return name
    raise ValueError(module)


ALLOWED = {
    "runtime": {"runtime"},
    "core": {"runtime", "core"},
    "kernels": {"runtime", "core", "kernels"},
    "adapters": {"runtime", "core", "kernels", "adapters"},
    "engine": {"runtime", "core", "adapters", "engine"},
}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


GRAPH = import_graph()


GATEWAY = ("harness.families", "kernels")
"""The one import from the engine into the kernels: families.load() collects kernels.FAMILIES."""


@pytest.mark.parametrize("lower", ["runtime", "core", "kernels", "adapters", "engine"])
def test_each_layer_imports_only_what_is_below_it(lower):
    reaching_up = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if layer(m) == lower
                         for d in deps if layer(d) not in ALLOWED[lower] and (m, d) != GATEWAY)
    assert not reaching_up, (f"{lower} modules import outside {sorted(ALLOWED[lower])}: "
                             + "; ".join(reaching_up)
                             + ". Move the shared piece down a layer (harness/core, or the "
                               "family under kernels/) instead of importing upwards.")


REGISTRATION = ("harness.core.registry", "harness.core.ops")
SHIPPED_KERNEL_MODULES = ("torch", "triton")
"""A family's backends (``kernels/<family>/torch.py``, ``triton.py``): what a reader vendors."""


def test_a_shipped_kernel_stands_on_its_own():
    """A backend module imports, of the harness, only the registry (``register``, and
    ``Unsupported`` for what it declares it cannot run) and the op names it registers under
    (``kernels/<family>/ops.py`` declares them); the rest it needs is its family's own modules
    and ``kernels.runtime``, directly or through them."""
    def reaches(module: str, seen: set[str]) -> set[str]:
        for dep in GRAPH.get(module, ()):
            if dep not in seen and dep.startswith("kernels.") and not dep.endswith(("spec", "faults")):
                seen.add(dep)
                reaches(dep, seen)
        return seen

    bad = []
    for module in sorted(GRAPH):
        parts = module.split(".")
        if len(parts) == 3 and parts[0] == "kernels" and parts[2] in SHIPPED_KERNEL_MODULES:
            for m in sorted({module} | reaches(module, set())):
                bad += [f"{m} imports {d}" for d in sorted(GRAPH[m])
                        if d.startswith("harness") and d not in REGISTRATION]
    assert not bad, ("; ".join(bad) + ". Move what the kernel needs into kernels/runtime/ "
                                      "(which imports nothing of the harness).")


def test_no_import_circle():
    cycles = import_cycles(GRAPH)
    assert not cycles, ("modules that import each other (directly or through others): "
                        + "; ".join(" <-> ".join(c) for c in cycles)
                        + ". Move what both need into a module neither imports.")


def package_of(module: str) -> str:
    """The unit a circle is looked for at, besides modules: a sub-package of the engine
    (``harness.reports``), the core, the adapters, the kernels' runtime, the kernels, or a
    top-level module."""
    parts = module.split(".")
    if parts[0] == "kernels":
        return "kernels.runtime" if parts[1:2] == ["runtime"] else "kernels"
    return ".".join(parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, deps in graph.items():
        packages[package_of(module)].update(package_of(d) for d in deps)
    return {p: deps - {p} for p, deps in packages.items()}


def test_no_import_circle_between_packages():
    """Two packages that import each other, each module through a different one (reports.tables
    reading a saved case's name while cases.saving reads the run's environment from reports),
    are a circle a module graph does not show."""
    graph = package_graph(GRAPH)
    cycles = import_cycles(graph)
    edges = {c: [f"{m} imports {d}" for m, deps in GRAPH.items() for d in deps
                 if package_of(m) in c and package_of(d) in c and package_of(m) != package_of(d)]
             for c in map(tuple, cycles)}
    assert not cycles, ("packages that import each other: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(e) + ")" for c, e in edges.items())
        + ". Move what both need into the lower one, or into harness.core.")


def test_the_checks_see_a_circle_and_an_upward_import():
    graph = {"harness.core.a": {"harness.core.b"}, "harness.core.b": {"harness.evaluate"},
             "harness.evaluate": {"harness.core.a"}}
    assert import_cycles(graph) == [["harness.core.a", "harness.core.b", "harness.evaluate"]]
    hidden = {"harness.reports.t": {"harness.cases.f"}, "harness.cases.f": set(),
              "harness.cases.s": {"harness.reports.s"}, "harness.reports.s": set()}
    assert import_cycles(hidden) == []
    assert import_cycles(package_graph(hidden)) == [["harness.cases", "harness.reports"]]
    assert layer("harness.evaluate") not in ALLOWED[layer("harness.core.b")]
    engine_into_kernels = sorted((m, d) for m, deps in GRAPH.items() if layer(m) == "engine"
                                 for d in deps if layer(d) == "kernels")
    assert engine_into_kernels == [GATEWAY], engine_into_kernels


NEVER = {
    "harness.reports": ("harness.pytest_plugin", "harness.cli"),
    "harness.cases": ("harness.pytest_plugin", "harness.cli"),
    "harness.e2e": ("harness.pytest_plugin", "harness.fuzz"),
    "harness.fuzz": ("harness.pytest_plugin", "harness.e2e"),
}
"""Sub-layers of the engine: reports and saved cases are read by the plugin and the CLI, never
the other way round; the E2E and fuzzing engines stand apart."""


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("package", sorted(NEVER))
def test_engine_sub_layers_keep_apart(package):
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if _inside(m, package)
                 for d in deps for other in NEVER[package] if _inside(d, other))
    assert not bad, "; ".join(bad)


@pytest.mark.host_only
@pytest.mark.parametrize("package", sorted(NEVER))
def test_engine_sub_layers_keep_apart_at_run_time(package):
    """Importing every module of the sub-layer loads none of what it must not import (imports
    by string, which the static graph cannot see, included)."""
    import subprocess
    import sys

    from harness.subprocess_env import child_env

    modules = sorted(m for m in GRAPH if _inside(m, package))
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            f"print(sorted(m for m in sys.modules if any(m == o or m.startswith(o + '.') "
            f"for o in {NEVER[package]!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
