"""GSM8K for offline runs: the local jsonl splits, and an lm-eval task that reads them.

The task is lm-eval's own ``gsm8k`` task (prompt, few-shot split, generation settings, the
``strict-match`` and ``flexible-extract`` filters), loaded from the installed lm-eval and
re-pointed at local files, so scores are comparable with published lm-eval GSM8K numbers.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

import yaml

TASK_NAME = "gsm8k_local"
TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"


class DataError(RuntimeError):
    pass


def default_data_dir() -> pathlib.Path:
    root = pathlib.Path(__file__).resolve().parents[2]
    env = os.environ.get("HARNESS_GSM8K_DIR")
    return pathlib.Path(env) if env else root.parent / "shared" / "data" / "gsm8k"


def locate(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    folder = pathlib.Path(data_dir) if data_dir else default_data_dir()
    missing = [s for s in ("train.jsonl", "test.jsonl") if not (folder / s).is_file()]
    if missing:
        raise DataError(f"GSM8K data not found: {folder} lacks {', '.join(missing)}. Pass "
                        "--data DIR (a folder with train.jsonl and test.jsonl) or set "
                        "HARNESS_GSM8K_DIR")
    return folder


def test_split_sha256(folder: pathlib.Path) -> str:
    return hashlib.sha256((folder / "test.jsonl").read_bytes()).hexdigest()


def lm_eval_gsm8k_config() -> dict:
    import lm_eval

    path = pathlib.Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    return yaml.safe_load(path.read_text())


def write_task(folder: pathlib.Path, out_dir: pathlib.Path, num_fewshot: int) -> pathlib.Path:
    """A task directory for ``--include_path``: lm-eval's gsm8k with local data files."""
    cfg = lm_eval_gsm8k_config()
    cfg.pop("tag", None)
    cfg.pop("dataset_name", None)
    cfg.update(task=TASK_NAME, dataset_path="json", num_fewshot=num_fewshot,
               dataset_kwargs={"data_files": {"train": str(folder / "train.jsonl"),
                                              "test": str(folder / "test.jsonl")}})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{TASK_NAME}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out_dir
