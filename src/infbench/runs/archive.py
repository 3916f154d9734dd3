"""A run's results in one archive, to share and compare elsewhere without rerunning anything:
the artifacts (each with its provenance), the report, the config it ran with, Snakemake's
run-time records, the logs and each model's facts (model.json, never the weights), with a
manifest of SHA-256 checksums that unpacking verifies."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from infbench.core.errors import UserError
from infbench.core.provenance import now_iso

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
MANIFEST = "MANIFEST.json"
# What a run leaves that a comparison or a reader needs; resources/ contributes model.json only.
PACKED_FOLDERS = ("results", "benchmarks", "logs")
PACKED_FILES = ("config/config.yaml",)


class ArchiveError(UserError):
    """An archive that cannot be made or read: the message names it and the fix."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_files(project: Path) -> list[Path]:
    """The files of a finished run, relative to its project folder, in a stable order."""
    if not (project / "results").is_dir():
        raise ArchiveError(
            f"{project} has no results/ folder: pack a project folder after `snakemake --cores 8` has run"
        )
    files = [Path(name) for name in PACKED_FILES if (project / name).is_file()]
    for folder in PACKED_FOLDERS:
        if (project / folder).is_dir():
            files += [
                path.relative_to(project)
                for path in (project / folder).rglob("*")
                if path.is_file() and not path.name.startswith(".")
            ]
    files += [path.relative_to(project) for path in (project / "resources" / "models").glob("*/model.json")]
    return sorted(files)


def pack(project: str | Path, archive: str | Path) -> dict:
    """Write the run in `project` to `archive` (.tar.gz) through a temporary file; returns the manifest."""
    project, archive = Path(project), Path(archive)
    if not archive.name.endswith(ARCHIVE_SUFFIXES):
        raise ArchiveError(f"{archive}: name the archive *.tar.gz")
    files = run_files(project)
    manifest = {"packed": now_iso(), "source": str(project.resolve()), "files": {}}
    archive.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{archive.name}.", dir=archive.parent)
    os.close(handle)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name in files:
                data = (project / name).read_bytes()
                manifest["files"][name.as_posix()] = sha256(data)
                add_bytes(tar, name.as_posix(), data)
            add_bytes(tar, MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        os.chmod(tmp, 0o644)
        os.replace(tmp, archive)
    except BaseException:
        os.unlink(tmp)
        raise
    return manifest


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def unpack(archive: str | Path, destination: str | Path) -> dict:
    """Extract `archive` into `destination` (absent or empty), after checking that every member is
    a plain file at a relative path inside it and that every checksum matches the manifest."""
    archive, destination = Path(archive), Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise ArchiveError(f"{destination} is not empty: unpack into a new folder")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            contents = {}
            for member in members:
                path = PurePosixPath(member.name)
                if not member.isfile() or path.is_absolute() or ".." in path.parts:
                    raise ArchiveError(f"{archive}: member {member.name!r} is not a plain file inside the archive")
                contents[member.name] = tar.extractfile(member).read()
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ArchiveError(f"{archive} is not a readable .tar.gz ({error}); pack the run again") from None
    if MANIFEST not in contents:
        raise ArchiveError(f"{archive} has no {MANIFEST}: it was not made by `scripts/runs.py pack`")
    manifest = json.loads(contents.pop(MANIFEST))
    if set(manifest["files"]) != set(contents):
        extra = sorted(set(contents) ^ set(manifest["files"]))
        raise ArchiveError(f"{archive}: files and manifest disagree ({', '.join(extra[:5])}); pack the run again")
    for name, data in contents.items():
        if sha256(data) != manifest["files"][name]:
            raise ArchiveError(f"{archive}: {name} does not match its checksum (damaged); copy the archive again")
    # Written beside the destination and renamed onto it: a failure leaves no half-unpacked run.
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        for name, data in contents.items():
            target = scratch / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if destination.exists():
            destination.rmdir()
        scratch.chmod(0o755)
        os.replace(scratch, destination)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return manifest
