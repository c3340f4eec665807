"""What produced a set of greedy outputs: server build, model file, hardware.

Greedy outputs are reproducible to the character only on the same server build, model file and
hardware: llama.cpp picks its CPU kernels by instruction set, vLLM its GPU kernels by device. A
golden records this fingerprint; a run demands exact-output identity with the golden only when
every key below matches, and otherwise judges with the statistical tests and the same-run
cross-level identity (which hold on any machine). Unknown values ("unknown": an attached
server's build and hardware cannot be seen from the client) never match.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pathlib
import platform
import re
import subprocess

UNKNOWN = "unknown"
KEYS = ("server_kind", "server_version", "model_sha256", "machine", "cpu", "cpu_flags",
        "cpu_count", "gpu", "system_info", "server_settings")
SERVER_PACKAGES = {"llama-cpp": "llama_cpp_python", "vllm": "vllm"}
ABSENT = {"server_settings": "n/a"}
"""What a key recorded before it existed stands for (llama.cpp's settings are not recorded)."""


@functools.cache
def file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_sha256(server_cmd: list[str] | None) -> str:
    """sha256 of the ``--model`` file of a launched server; the name when it is not a file."""
    if not server_cmd or "--model" not in server_cmd[:-1]:
        return UNKNOWN
    path = pathlib.Path(server_cmd[server_cmd.index("--model") + 1])
    if path.is_dir():
        from harness.e2e.vllm_cpu import folder_sha256

        return folder_sha256(path)
    if not path.is_file():
        return f"name:{path}"
    st = path.stat()
    return file_sha256(str(path), st.st_size, st.st_mtime_ns)


def _cpuinfo() -> tuple[str, str]:
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or UNKNOWN, UNKNOWN
    name = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    flag_hash = (hashlib.sha256(" ".join(sorted(flags.group(1).split())).encode()).hexdigest()[:16]
                 if flags else UNKNOWN)
    return (name.group(1).strip() if name else platform.processor() or UNKNOWN), flag_hash


def _gpus() -> str:
    for cmd in (["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                ["rocm-smi", "--showproductname", "--csv"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return "; ".join(sorted(line.strip() for line in out.stdout.splitlines() if line.strip()))
    return "none"


def system_info(server_log: pathlib.Path | None) -> str:
    """llama.cpp's ``system_info`` line (the CPU features its kernels were built for) from the
    server log; empty when the server does not print one."""
    if server_log is None or not server_log.exists():
        return ""
    for line in server_log.read_text(errors="replace").splitlines():
        if "SSE3 = " in line or "NEON = " in line or line.startswith("system_info:"):
            return line.strip()
    return ""


def collect(server_kind: str, server_cmd: list[str] | None,
            server_log: pathlib.Path | None = None) -> dict[str, str]:
    """The fingerprint of a server launched here; attached servers get ``unknown`` hardware."""
    if server_cmd is None:
        return {key: UNKNOWN for key in KEYS} | {"server_kind": server_kind}
    from harness.e2e import vllm_cpu

    settings = "n/a"
    if server_kind == "vllm" and vllm_cpu.is_vllm_python(server_cmd):
        version = vllm_cpu.version(server_cmd[0])
        settings = vllm_cpu.settings_of(server_cmd)
    else:
        package = SERVER_PACKAGES.get(server_kind)
        try:
            version = importlib.metadata.version(package) if package else UNKNOWN
        except importlib.metadata.PackageNotFoundError:
            version = UNKNOWN
    cpu, flags = _cpuinfo()
    return {"server_kind": server_kind, "server_version": version,
            "model_sha256": model_sha256(server_cmd), "machine": platform.machine(),
            "cpu": cpu, "cpu_flags": flags, "cpu_count": str(os.cpu_count()), "gpu": _gpus(),
            "system_info": (system_info(server_log) or UNKNOWN) if server_kind == "llama-cpp"
            else "n/a", "server_settings": settings}


def _value(fp: dict, key: str) -> str:
    return str(fp.get(key, ABSENT.get(key, UNKNOWN)))


def differences(golden: dict | None, run: dict | None) -> list[str]:
    """Why outputs recorded under ``golden`` need not equal this run's; empty when they must."""
    if not golden:
        return ["the golden records no fingerprint (recorded before fingerprints existed)"]
    if not run:
        return ["this run has no fingerprint"]
    out = []
    for key in KEYS:
        a, b = _value(golden, key), _value(run, key)
        if a == UNKNOWN or b == UNKNOWN:
            out.append(f"{key} unknown")
        elif a != b:
            out.append(f"{key} {_short(a)!r} (golden) vs {_short(b)!r} (here)")
    return out


BUILD_KEYS = ("server_kind", "server_version", "model_sha256", "gpu", "system_info",
              "server_settings")
"""What decides the arithmetic a server does: its build and version, the model file, the GPU,
(llama.cpp) the instruction set its kernels were built for, and (vLLM) the settings of
harness.e2e.vllm_cpu.SETTINGS (dtype, batch size, eager mode; extra ``--vllm-arg`` flags are
not: they stand for a change under test). The CPU's name, flags and count
do not: clean reruns on 1 and 2 threads gave identical logprobs (docs/e2e-drift.md)."""


def same_build(golden: dict | None, run: dict | None) -> bool:
    """Whether a golden's logprobs came from the arithmetic this run does (every BUILD_KEYS
    value known and equal, llama.cpp's instruction-set line included)."""
    if not golden or not run:
        return False
    values = [(_value(golden, k), _value(run, k)) for k in BUILD_KEYS]
    return all(a == b and a not in (UNKNOWN, "") for a, b in values)


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
