#!/usr/bin/env bash
# Installs Debian's Chromium for the page tests (suites/browser.py) when no Chromium is on PATH.
# Needs root and Debian's package registry; where either is missing it says so and exits 0: the
# page tests then skip with that reason instead of failing for a reason of the machine.
set -uo pipefail
for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null 2>&1 && { echo "browser: $(command -v "$b")"; exit 0; }
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: none, and no root apt-get to install one: the page tests will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if apt-get update -qq >"$log" 2>&1 && apt-get install -y -qq --no-install-recommends chromium >>"$log" 2>&1; then
  echo "browser: installed $(command -v chromium)"
else
  tail -n 20 "$log" >&2
  echo "browser: 'apt-get install chromium' failed (above): the page tests will skip" >&2
fi
rm -f "$log"
exit 0
