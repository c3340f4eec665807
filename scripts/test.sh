#!/usr/bin/env bash
# The test command: every suite, CPU profile (torch references + Triton under the interpreter).
set -euo pipefail
PY=${PYTHON:-python3}
exec $PY -m pytest suites -n 2 --dist loadgroup -q "$@"
