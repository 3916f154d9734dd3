#!/usr/bin/env bash
# A local stand-in for a cluster's submit command (sbatch, qsub): runs the job script as a
# detached process of its own and prints its id, as a scheduler would print a job id.
set -euo pipefail
jobscript="$1"
setsid bash "$jobscript" > "$jobscript.out" 2>&1 < /dev/null &
echo "$!" | tee -a "${LOCAL_SUBMIT_LOG:-/dev/null}"
