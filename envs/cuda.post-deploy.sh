#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cuda.yaml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pip install -r "$here/cuda.requirements.txt"
pip install --no-deps --no-build-isolation -e "$here/.."
