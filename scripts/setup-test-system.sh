#!/usr/bin/env bash
# System packages the tests need beyond the Python environment: Debian's Chromium, which the
# browser test drives through Playwright (Playwright's own browser download is not used), and,
# with the argument `cluster`, SLURM and munge for the cluster tests (`make test-cluster`;
# tests/slurm.py starts a one-node cluster from them and stops it afterwards).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
packages=()
command -v chromium >/dev/null 2>&1 || packages+=(chromium fonts-dejavu-core)
if [ "${1:-}" = cluster ]; then
    command -v slurmctld >/dev/null 2>&1 || packages+=(slurm-wlm munge)
fi
if [ ${#packages[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: the tests need Debian's ${packages[*]}; run: sudo apt-get install -y ${packages[*]}" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi
chromium --version
if [ "${1:-}" = cluster ]; then slurmctld -V; fi
