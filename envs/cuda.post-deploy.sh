#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cuda.yaml.
# Snakemake rebuilds an environment when its YAML or this script changes, not when the
# requirements this script installs do: their checksum below ties them together.
set -euo pipefail
REQUIREMENTS_SHA256=d65d2332fadd0a70df72d67422de156a31e115819e0c0a1e05817d39bece8da6
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! echo "$REQUIREMENTS_SHA256  $here/cuda.requirements.txt" | sha256sum --check --status; then
    echo "error: envs/cuda.requirements.txt changed but envs/cuda.post-deploy.sh still names the old file; run: make lock-checksums" >&2
    exit 1
fi
pip install -r "$here/cuda.requirements.txt"
pip install --no-deps --no-build-isolation -e "$here/.."
