#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cuda.yaml.
# Snakemake rebuilds an environment when its YAML or this script changes, not when the
# requirements this script installs do: their checksum below ties them together.
set -euo pipefail
REQUIREMENTS_SHA256=cc2a1fb5ef88514e7cd253d018b2ae08aadd5cb9eb84314d6e1d203bdef88309
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! echo "$REQUIREMENTS_SHA256  $here/cuda.requirements.txt" | sha256sum --check --status; then
    echo "error: envs/cuda.requirements.txt changed but envs/cuda.post-deploy.sh still names the old file; run: make lock-checksums" >&2
    exit 1
fi
pip install -r "$here/cuda.requirements.txt"
pip install --no-deps --no-build-isolation -e "$here/.."
