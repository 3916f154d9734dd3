#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda environment envs/cpu.yaml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pip install --no-deps -r "$here/cpu.lock.txt"
pip install --no-deps --no-build-isolation -e "$here/.."
