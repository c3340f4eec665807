"""The public face (``harness``'s ``__all__``) resolves, and a plugin module written against the
first release's import path still registers and runs, with a DeprecationWarning naming the new
one."""

import importlib
import subprocess
import sys
import textwrap

import pytest

import harness
from harness.subprocess_env import child_env


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
                           "-k", "test_matches_reference and mhc_post and T7", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "harness.registry is deprecated" in proc.stdout + proc.stderr
