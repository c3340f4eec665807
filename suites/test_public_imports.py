"""The public face (``harness``'s ``__all__``) resolves, and a plugin module written against the
first release's import path still registers and runs, with a DeprecationWarning naming the new
one."""

import importlib
import pathlib
import subprocess
import sys
import textwrap

import pytest

import harness
from harness.subprocess_env import child_env

pytestmark = pytest.mark.machinery


@pytest.mark.parametrize("name", harness.__all__)
def test_every_public_name_resolves(name):
    assert getattr(harness, name) is not None


def test_the_face_is_the_core_objects():
    from harness.core import registry

    assert harness.register is registry.register and harness.KnownDeviation is registry.KnownDeviation


def test_first_release_import_path_warns_and_works():
    sys.modules.pop("harness.registry", None)
    with pytest.warns(DeprecationWarning, match="from harness import register"):
        old = importlib.import_module("harness.registry")
    assert old.register is harness.register


@pytest.mark.host_only
def test_a_plugin_written_for_the_first_release_still_runs(tmp_path):
    module = tmp_path / "old_plugin.py"
    module.write_text(textwrap.dedent("""
        from harness.registry import register
        from kernels.mhc.torch import mhc_post_compute

        @register("mhc_post", "old-plugin")
        def mhc_post(x, residual, post_layer_mix, comb_res_mix):
            return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)
    """))
    proc = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m", "harness",
                           "run", "--profile", "smoke", "--impl", "old-plugin", "--impl-module",
                           str(module), "--output", str(tmp_path / "r"), "--",
                           str(pathlib.Path(__file__).with_name("test_mhc_accuracy.py")),
                           "-k", "test_matches_reference and mhc_post and T7", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "harness.registry is deprecated" in proc.stdout + proc.stderr



def test_the_one_file_plugin_names_still_import():
    from harness.pytest_plugin import OOM_MARKERS, Target, heavy_last

    assert Target.__module__ == "harness.pytest_plugin.sweep" and heavy_last and OOM_MARKERS


def test_an_op_belongs_to_one_family():
    from harness.core.ops import UnknownOpError, declare

    with pytest.raises(UnknownOpError, match="declared by family 'mhc' and again by 'mine'"):
        declare("mine", ["mhc_post"])


def test_a_fault_names_its_detector_by_object():
    from harness.core.detectors import PRECISION_GROWTH
    from harness.core.faults import SeededFaults

    faults = SeededFaults()
    faults.seed("f", "mhc_pre", "large-token precision", PRECISION_GROWTH)(lambda t: None)
    assert [f.detector for f in faults] == ["precision_growth"]
    with pytest.raises(TypeError, match="by object"):
        faults.seed("g", "mhc_pre", "x", "precision_growth")
    from harness.core.registries import RegistryError

    with pytest.raises(RegistryError, match="registered twice"):
        faults.seed("f", "mhc_pre", "again", PRECISION_GROWTH)(lambda t: None)


def test_an_unknown_name_lists_the_known_ones():
    from harness.adapters import ADAPTERS
    from harness.detectors.registry import RUNNERS

    with pytest.raises(KeyError, match="no detector named 'nope'; known: batch_invariance"):
        RUNNERS.get("nope")
    with pytest.raises(KeyError, match="no adapter named 'x'; known: aiter"):
        ADAPTERS.get("x")


def test_the_harness_root_reads_at_a_glance():
    """Top-level modules of ``harness`` are the public surface and the engine's entry points, at
    most twelve, each saying its job in its first docstring line; the rest lives in
    sub-packages (CHANGELOG.md lists what moved)."""
    import ast
    import pathlib

    root = pathlib.Path(harness.__file__).parent
    modules = sorted(p for p in root.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(modules) <= 12, [p.stem for p in modules]
    undocumented = [p.stem for p in modules if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not undocumented, undocumented


PUBLIC_PYTEST_OPTIONS = ("--profile", "--op", "--impl", "--require", "--accept-partial-coverage",
                         "--impl-module", "--ab", "--device", "--shard", "--report-dir",
                         "--interpreted-vendors", "--save-cases")


def test_the_public_pytest_options_are_there(pytestconfig):
    names = {n for o in pytestconfig._parser.getgroup("harness").options for n in o.names()}
    assert set(PUBLIC_PYTEST_OPTIONS) <= names, sorted(set(PUBLIC_PYTEST_OPTIONS) - names)


EARLIER_COMMAND_LINES = [
    ["run", "--profile", "smoke", "--ops", "mhc_post", "--impl", "torch", "--require", "triton",
     "--impl-module", "m.py", "--accept-partial-coverage", "--ab", "torch", "ext", "--device",
     "cpu", "-n", "0", "--shard", "1/2", "--output", "o", "--fuzz", "0", "--self-tests",
     "--compare-to", "none", "--", "-k", "x"],
    ["bisect", "--ops", "mhc_post", "-n", "0", "--profile", "smoke", "--impl", "x",
     "--impl-module", "m.py", "--", "-x"],
    ["fuzz", "--ops", "mhc_post", "--impl", "x", "--impl-module", "m.py", "--faults", "f",
     "--budget", "1", "--examples", "3", "--seed", "1", "--database", "none", "--max-elements",
     "5", "--device", "cpu", "--output", "o"],
    ["replay", "f.pt", "--impl", "x", "--impl-module", "m.py", "--device", "cpu"],
    ["selftest", "--profile", "ci", "--device", "cpu", "--hidden", "64"],
    ["coverage", "--profile", "smoke", "--profile", "ci"], ["vendors"], ["vendors", "d"],
    ["report", "a", "b", "--output", "c"], ["compare", "a", "b"], ["speed", "p", "--output", "o"],
    ["e2e", "--base-url", "http://h:1", "--levels", "1,2", "--limit", "5", "--golden", "g"],
    ["golden", "record", "--like", "g", "--name", "n", "--smollm", "--reruns", "2"],
    ["golden", "update", "--from", "d", "--level", "2", "--name", "n"], ["golden", "list"],
]


@pytest.mark.parametrize("argv", EARLIER_COMMAND_LINES, ids=lambda argv: " ".join(argv[:2]))
def test_earlier_command_lines_still_parse(argv):
    """The ``harness`` command's flags as the earlier releases spelt them (``--ops``, ``--ab A
    B``, ``--fuzz``, ``--budget`` deprecated since) still parse."""
    import warnings

    from harness.cli import build_parser

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        args = build_parser().parse_args(argv)
    assert callable(args.func)
