#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cpu.yaml.
# Snakemake rebuilds an environment when its YAML or this script changes, not when the lock
# this script installs does: the lock's checksum below ties them together. `make lock`
# rewrites it, and a lock edited by hand stops here instead of installing a stale mix.
set -euo pipefail
LOCK_SHA256=05fd83cf3c98cb52ed775a365a7c7e86ecec1c3305d7a44ac43df63a2f9b9c39
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! echo "$LOCK_SHA256  $here/cpu.lock.txt" | sha256sum --check --status; then
    echo "error: envs/cpu.lock.txt changed but envs/cpu.post-deploy.sh still names the old lock; run: make lock-checksums" >&2
    exit 1
fi
"$here/setup-venv.sh" "${CONDA_PREFIX:?the conda environment is not active}"
