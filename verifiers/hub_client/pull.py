"""``vf pull``: download a version's source archive (sdist) and extract it safely.

The archive is hostile input even from our own hub: every member must be a regular file or folder
whose path stays inside the target folder (no absolute paths, no ``..``, no links, no devices), the
total size is bounded, and extraction happens in a temporary folder that is moved into place only
when complete, so a failure never leaves a half-written tree.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from verifiers.hub_client.api import EnvRef, HubClient, HubClientError

MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 20_000


def safe_extract_sdist(archive: Path, dest: Path) -> list[str]:
    """Extract ``archive`` (a .tar.gz sdist) into ``dest`` without its top folder; return the paths."""
    written: list[str] = []
    total = 0
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        if len(members) > MAX_MEMBERS:
            raise HubClientError(f"{archive.name} has {len(members)} members (limit {MAX_MEMBERS})")
        for m in members:
            p = PurePosixPath(m.name)
            if p.is_absolute() or ".." in p.parts or m.name.startswith(("/", "\\")) or "\\" in m.name:
                raise HubClientError(f"refusing {archive.name}: unsafe path {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise HubClientError(f"refusing {archive.name}: {m.name!r} is a link or special file")
            rel = PurePosixPath(*p.parts[1:]) if len(p.parts) > 1 else None
            if rel is None or str(rel) in ("", "."):
                continue
            target = dest.joinpath(*rel.parts)
            if not target.resolve().is_relative_to(dest.resolve()):
                raise HubClientError(f"refusing {archive.name}: {m.name!r} escapes the target folder")
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            total += m.size
            if total > MAX_TOTAL_BYTES:
                raise HubClientError(f"refusing {archive.name}: more than {MAX_TOTAL_BYTES >> 20} MiB unpacked")
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None
            with src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 16)
            os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)
            written.append(str(rel))
    return written


def pull(client: HubClient, ref: EnvRef, dest: Path | None = None) -> tuple[Path, str, list[str]]:
    """Download and extract ``ref``'s sdist; return (folder, version, files)."""
    detail = client.version(ref)
    sdist = next((f for f in detail.get("files", []) if f.get("kind") == "sdist"), None)
    if sdist is None:
        raise HubClientError(f"{ref.id} {detail['version']} has no source archive on the hub")
    version = detail["version"]
    dest = (dest or Path(f"{ref.name}-{version}")).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise HubClientError(f"{dest} already exists and is not empty")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".vf-pull-", dir=dest.parent) as tmp:
        archive = Path(tmp) / sdist["filename"]
        client.download(sdist["url"], archive, expected_sha256=sdist["sha256"])
        staging = Path(tmp) / "tree"
        staging.mkdir()
        files = safe_extract_sdist(archive, staging)
        if dest.exists():
            dest.rmdir()
        os.replace(staging, dest)
    return dest, version, files
