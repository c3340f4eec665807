"""Environment for child processes that run ``python -m harness`` from another directory: the
checkout that holds this package goes first on PYTHONPATH, so it works installed or not."""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""), **extra}
