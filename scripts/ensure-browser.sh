#!/usr/bin/env bash
# The live dashboard's browser test (tests/e2e/test_live_dashboard.py) drives Debian's headless
# Chromium through its chromedriver. Install both when either is missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
echo "ensure-browser: chromium or chromedriver missing; installing Debian's chromium and chromium-driver" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
chromium --version 2>/dev/null | head -1
