#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cpu.yaml.
# Snakemake rebuilds an environment when its YAML or this script changes, not when the lock
# this script installs does: the lock's checksum below ties them together. `make lock`
# rewrites it, and a lock edited by hand stops here instead of installing a stale mix.
set -euo pipefail
LOCK_SHA256=bc2c7c831f90b80a4fd62bcecf4d9c6c41d2ebcfa2a2a9db2414a656369ab19b
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! echo "$LOCK_SHA256  $here/cpu.lock.txt" | sha256sum --check --status; then
    echo "error: envs/cpu.lock.txt changed but envs/cpu.post-deploy.sh still names the old lock; run: make lock-checksums" >&2
    exit 1
fi
"$here/setup-venv.sh" "${CONDA_PREFIX:?the conda environment is not active}"
