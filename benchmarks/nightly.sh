#!/usr/bin/env bash
# The nightly's speed part (a GPU host): every benchmark once, each run's --json kept under
# reports/bench (one file per benchmark and run), then `harness speed` over all kept runs:
# reports/speed/speed.html, speed.md, speed.csv and the plots. A benchmark that crashes stops
# the script; a slower figure does not (timings are reported, never asserted).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=${HARNESS_BENCH_DIR:-reports/bench}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$keep"
for bench in bench_mhc bench_topk bench_indexer; do
  python3 "benchmarks/$bench.py" --json "$keep/$stamp-$bench.json"
done
python3 -m harness speed "$keep" --output "${HARNESS_SPEED_DIR:-reports/speed}"
