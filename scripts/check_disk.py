"""Stop an install that would run out of disk half-way, before it starts.

pip's own failure ("[Errno 28] No space left on device") comes minutes in and leaves a broken
environment; this says where the space is short, by how much, and what to do. The sizes are what
a fresh install put in site-packages (2026-11-28: torch 0.75 GB, triton 0.65, vLLM 0.9, amd-aiter
0.18 (the HIP sources it ships), the rest 1.4, counted as missing while pandas is), rounded up; a package already importable needs
nothing. pip unpacks the largest wheels in the temp folder on the way, hence the extra 1 GB there.
"""
import os
import sys
import tempfile
from importlib.util import find_spec
from shutil import disk_usage

GB_BY_PACKAGE = {"torch": 0.8, "triton": 0.7, "vllm": 0.9, "aiter": 0.2, "pandas": 1.4}
TEMP_GB = 1.0


def needed() -> dict[str, float]:
    """GB needed under each folder the install writes to."""
    site = sum(gb for mod, gb in GB_BY_PACKAGE.items() if find_spec(mod) is None)
    if not site:
        return {}
    tmp = tempfile.gettempdir()
    if os.stat(sys.prefix).st_dev == os.stat(tmp).st_dev:
        return {sys.prefix: site + TEMP_GB}
    return {sys.prefix: site, tmp: TEMP_GB}


def main() -> int:
    for where, gb in needed().items():
        free = disk_usage(where).free / 1e9
        if free < gb:
            print(f"install: only {free:.1f} GB free under {where}; this install needs about "
                  f"{gb:.1f} GB there. Free some space (old virtual environments, ~/.cache/pip), "
                  "or make the virtual environment (or TMPDIR, for the temp folder) on a disk with "
                  "room, then run scripts/install.sh again.", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
