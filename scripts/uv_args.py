"""Print, one per line, the ``uv pip install`` options that make uv read the same package sources
as this machine's pip: its index, extra indexes, find-links folders and constraint files (from
``pip config list``, which merges pip's config files and PIP_* variables), and pip's way of
choosing among several indexes (the best version of any, not the first index's).

scripts/install.sh installs with uv where it can (pip's resolver took ~45 s of CPU for the
harness's ~120 pinned packages on a 2-core machine, uv ~1 s) and must not get other packages
than pip would: uv reads no pip.conf, so what pip is told is handed on here. An option this
cannot translate makes it exit 1, and the install uses pip.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

TRANSLATED = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
"""pip option -> uv pip install option (each value of a space-separated list gets its own)."""
IGNORED = {"cert", "default-timeout", "disable-pip-version-check", "no-compile", "quiet",
           "progress-bar", "no-input", "root-user-action", "timeout", "retries", "no-cache-dir"}
"""pip options that do not choose packages (cert is handed to uv as SSL_CERT_FILE by install.sh)."""


def pip_config(python: str) -> dict[str, str]:
    """pip's effective settings, option -> value; environment variables win over files, as in
    pip."""
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, check=True).stdout
    settings: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if section not in (":env:", "global", "install"):
            continue
        rank = {"global": 0, "install": 1, ":env:": 2}[section]
        if option not in settings or rank >= settings[option][0]:
            settings[option] = (rank, " ".join(shlex.split(value)))
    return {option: value for option, (_, value) in settings.items()}


def uv_args(settings: dict[str, str]) -> list[str]:
    unknown = sorted(set(settings) - set(TRANSLATED) - IGNORED)
    if unknown:
        raise ValueError(f"pip is configured with {', '.join(unknown)}, which uv is not told")
    args = ["--index-strategy", "unsafe-best-match"]
    for option, flag in TRANSLATED.items():
        for value in settings.get(option, "").split():
            args += [flag, value]
    return args


def main(argv: list[str]) -> int:
    """``uv_args.py PYTHON``: the options; ``uv_args.py PYTHON --cert``: pip's CA bundle, if
    any (uv reads it from SSL_CERT_FILE)."""
    python = argv[0] if argv else sys.executable
    try:
        settings = pip_config(python)
        lines = [settings.get("cert", "")] if "--cert" in argv[1:] else uv_args(settings)
    except (subprocess.CalledProcessError, ValueError, OSError) as exc:
        print(f"uv_args: {exc}", file=sys.stderr)
        return 1
    print("\n".join(line for line in lines if line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
