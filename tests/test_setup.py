"""Setting up: where the pinned CPU torch comes from, and conda environments that follow their lock."""

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO

SETUP = REPO / "envs" / "setup-venv.sh"
TORCH_PIN = next(line for line in (REPO / "envs/cpu.lock.txt").read_text().splitlines() if line.startswith("torch=="))


def fake_torch_wheel(folder: Path) -> Path:
    """A wheel that says it is the pinned torch build: enough for pip to resolve it."""
    version = TORCH_PIN.removeprefix("torch==")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        info = f"torch-{version}.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def check_torch(tmp_path: Path, find_links: Path, **env) -> str:
    """Where setup would take torch from, with pip seeing only `find_links` and an empty local
    index (no network, no pip.conf): its one-line decision."""
    index = tmp_path / "empty-index"
    index.mkdir(exist_ok=True)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    environment.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=index.as_uri(),
        PIP_FIND_LINKS=str(find_links),
        PYTHON=sys.executable,
        **env,
    )
    result = subprocess.run(
        ["bash", str(SETUP), "--check-torch"], capture_output=True, text=True, env=environment, timeout=120, check=True
    )
    return result.stdout + result.stderr


def test_pinned_torch_from_the_configured_sources_adds_no_index(tmp_path):
    fake_torch_wheel(tmp_path / "wheels")
    decision = check_torch(tmp_path, tmp_path / "wheels", TORCH_INDEX_URL="https://torch.invalid/whl/cpu")
    assert f"{TORCH_PIN} is available from pip's configured sources" in decision
    assert "--extra-index-url" not in decision


def test_pinned_torch_missing_adds_the_pytorch_index(tmp_path):
    (tmp_path / "no-wheels").mkdir()
    decision = check_torch(tmp_path, tmp_path / "no-wheels", TORCH_INDEX_URL="https://torch.invalid/whl/cpu")
    assert "adding https://torch.invalid/whl/cpu" in decision
    assert "--extra-index-url https://torch.invalid/whl/cpu" in decision
    default = check_torch(tmp_path, tmp_path / "no-wheels")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in default


def test_pinned_torch_missing_and_no_index_says_what_to_set(tmp_path):
    (tmp_path / "no-wheels").mkdir()
    decision = check_torch(tmp_path, tmp_path / "no-wheels", TORCH_INDEX_URL="")
    assert "--extra-index-url" not in decision
    assert "set TORCH_INDEX_URL or PIP_FIND_LINKS" in decision


def test_pips_configured_sources_are_the_sources_uv_installs_from(tmp_path):
    """uv reads neither PIP_* variables nor pip.conf: setup hands it pip's sources as flags, each
    setting as pip's install command takes it (a variable over [install] over [global], never
    merged), each list item its own flag, and none where pip has none."""
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://global.invalid/simple\nextra-index-url = https://g.invalid/simple\n"
        "[install]\nextra-index-url = https://a.invalid/simple https://b.invalid/simple\n"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    run = ["bash", str(SETUP), "--uv-sources"]
    configured = {**environment, "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": str(tmp_path / "wheels"),
                  "PIP_INDEX_URL": "https://index.invalid/simple", "PYTHON": sys.executable}  # fmt: skip
    lines = subprocess.run(run, capture_output=True, text=True, env=configured, check=True).stdout.split()
    pairs = sorted(zip(lines[::2], lines[1::2]))
    assert pairs == [
        ("--extra-index-url", "https://a.invalid/simple"),
        ("--extra-index-url", "https://b.invalid/simple"),
        ("--find-links", str(tmp_path / "wheels")),
        ("--index-url", "https://index.invalid/simple"),
    ]
    offline = {**configured, "PIP_NO_INDEX": "1"}
    assert (
        subprocess.run(run, capture_output=True, text=True, env=offline, check=True).stdout.split()[-1] == "--no-index"
    )
    bare = {**environment, "PIP_CONFIG_FILE": os.devnull, "PYTHON": sys.executable}
    assert subprocess.run(run, capture_output=True, text=True, env=bare, check=True).stdout == ""


def test_conda_post_deploy_scripts_name_what_they_install():
    """Snakemake rebuilds a conda environment when its YAML or post-deploy script changes:
    each post-deploy script carries the checksum of the file it installs (`make lock-checksums`)."""
    for script, installed, variable in (
        ("cpu.post-deploy.sh", "cpu.lock.txt", "LOCK_SHA256"),
        ("cuda.post-deploy.sh", "cuda.requirements.txt", "REQUIREMENTS_SHA256"),
    ):
        text = (REPO / "envs" / script).read_text()
        recorded = re.search(rf"^{variable}=([0-9a-f]{{64}})$", text, flags=re.M).group(1)
        assert recorded == hashlib.sha256((REPO / "envs" / installed).read_bytes()).hexdigest(), (
            f"envs/{installed} changed without envs/{script}: run `make lock-checksums`"
        )


def test_post_deploy_refuses_a_lock_it_does_not_name(tmp_path):
    envs = tmp_path / "envs"
    envs.mkdir()
    script = (REPO / "envs/cpu.post-deploy.sh").read_text()
    (envs / "cpu.post-deploy.sh").write_text(script)
    (envs / "cpu.lock.txt").write_text((REPO / "envs/cpu.lock.txt").read_text() + "extra-package==1.0\n")
    result = subprocess.run(
        ["bash", str(envs / "cpu.post-deploy.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "CONDA_PREFIX": str(tmp_path / "env")},
        timeout=60,
    )
    assert result.returncode == 1
    assert "run: make lock-checksums" in result.stderr
