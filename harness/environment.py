"""What a run ran on, recorded in run.json and in every saved case: the device, the CPU, the
packages judged (vLLM with its commit, every vendor adapter's release) and the git commit."""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess

from harness.adapters.releases import releases
from harness.core import device


def environment() -> dict[str, str]:
    info = device.describe()
    info["cpu"] = _cpu_model()
    for pkg in ("vllm", "aiter", "lm-eval", "liger-kernel"):
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            info[pkg] = "absent"
    if info["vllm"] != "absent":
        info["vllm_commit"] = _vllm_commit()
    info.update(releases())
    repo = pathlib.Path(__file__).resolve().parents[1]
    info["git_commit"] = _run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]) or "unknown"
    if device.has_gpu():
        info["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"]) or "unknown"
    return info


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _vllm_commit() -> str:
    """The commit vLLM was built from (its ``_version.py``), read without importing vLLM."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_version.py"
    found = re.search(r"__commit_id__\s*=\s*commit_id\s*=\s*['\"]([^'\"]+)",
                      path.read_text()) if path.exists() else None
    return found.group(1) if found else "unknown"


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
