#!/usr/bin/env bash
# System packages the tests need beyond the Python environment: Debian's Chromium, which the
# browser test drives through Playwright (Playwright's own browser download is not used).
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: the browser test needs Debian's chromium; run: sudo apt-get install -y chromium" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi
chromium --version
