"""Artifacts: paths a task declares (``TaskData.artifacts``) carried from one runtime to another,
as the isolated judge envs do (the solver's box -> a fresh one for the judge or verifier).

``collect(runtime, artifacts)`` archives each declared path (a tar per path, keyed by the path),
``restore(runtime, collected)`` extracts them at the same paths in another runtime. Archive bytes
are untrusted (the agent wrote the files): every archive is checked before anything is written,
and only regular files and directories travel (no links, devices or paths leaving the folder).

On the ``subprocess`` runtime (the only one that runs here) an artifact is a path relative to the
rollout's working folder: an absolute path would be read from, or written onto, this machine's
own filesystem, so it is refused. The original's implicit sweep of its artifact folder (an
absolute path inside a container) is skipped here for the same reason.
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from verifiers.v1.errors import SandboxError
from verifiers.v1.task import MAX_ARTIFACT_BYTES, Artifact

if TYPE_CHECKING:
    from verifiers.v1.runtimes import Runtime


def _workdir(runtime: Runtime) -> Path:
    workdir = getattr(runtime, "workdir", None)
    if not isinstance(workdir, Path):
        raise SandboxError(f"artifacts: the {runtime.config.type} runtime has no local working folder to carry them from")
    return workdir.resolve()


def _relative(source: str) -> PurePosixPath:
    path = PurePosixPath(source)
    if path.is_absolute():
        raise SandboxError(
            f"artifact {source!r} is an absolute path: on the subprocess runtime it would be read from this "
            "machine's filesystem; declare it relative to the rollout's working folder"
        )
    if not path.parts or ".." in path.parts:
        raise SandboxError(f"artifact {source!r} is not a path inside the working folder")
    return path


def _collect_sync(workdir: Path, artifacts: list[Artifact], max_bytes: int) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    budget = max_bytes
    for artifact in artifacts:
        rel = _relative(artifact.source)
        key = str(rel)
        if key in out:
            raise SandboxError(f"artifact {key!r} is declared twice")
        target = workdir / rel
        if not target.exists() and not target.is_symlink():
            if artifact.required:
                raise SandboxError(f"artifact {key!r} is missing: the task declared it, so grading needs it")
            out[key] = None
            continue
        if target.is_symlink() or not target.resolve().is_relative_to(workdir):
            raise SandboxError(f"artifact {key!r} is a link (or leads out of the working folder); only files and folders travel")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            members = [target] if target.is_file() else [target, *sorted(target.rglob("*"))]
            for path in members:
                inner = path.relative_to(target).as_posix()
                if inner != "." and any(fnmatch.fnmatch(inner, pat) or fnmatch.fnmatch(path.name, pat) for pat in artifact.exclude):
                    continue
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    raise SandboxError(f"artifact {key!r} holds {path.relative_to(workdir)}, which is not a regular file or folder")
                if path.is_file():
                    budget -= path.stat().st_size
                    if budget < 0:
                        raise SandboxError(f"artifacts exceed {max_bytes} bytes (at {key!r}); raise the task's artifact_max_bytes")
                tar.add(path, arcname=(rel / inner).as_posix() if inner != "." else key, recursive=False)
        out[key] = buf.getvalue()
    return out


async def collect(
    runtime: Runtime, artifacts: list[Artifact] | None = None, *, max_bytes: int = MAX_ARTIFACT_BYTES, sweep: bool = True
) -> dict[str, bytes | None]:
    """Archive each declared artifact out of ``runtime`` (in declaration order, keyed by its
    path); a missing required one, a link, or more than ``max_bytes`` in all is a ``SandboxError``.
    ``sweep`` is accepted for the original's signature (see the module note)."""
    workdir = _workdir(runtime)
    return await asyncio.to_thread(_collect_sync, workdir, list(artifacts or []), max_bytes)


def _check(key: str, archive: bytes) -> list[tarfile.TarInfo]:
    rel = _relative(key)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as exc:
        raise SandboxError(f"artifact {key!r}: not a readable archive ({exc})") from None
    for m in members:
        path = PurePosixPath(m.name)
        if path.is_absolute() or ".." in path.parts or not (path == rel or path.is_relative_to(rel)):
            raise SandboxError(f"artifact {key!r}: the archive holds {m.name!r}, outside {key!r}")
        if not (m.isfile() or m.isdir()):
            raise SandboxError(f"artifact {key!r}: the archive holds {m.name!r}, which is not a regular file or folder")
    return members


def _restore_sync(workdir: Path, collected: dict[str, bytes | None]) -> None:
    checked = {key: _check(key, archive) for key, archive in collected.items() if archive is not None}
    for key in collected:  # clear every root first: what the new box had there is replaced
        target = workdir / _relative(key)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    for key, members in checked.items():
        archive = collected[key]
        assert archive is not None
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            tar.extractall(workdir, members=members, filter="data")


async def restore(runtime: Runtime, collected: dict[str, bytes | None]) -> None:
    """Extract ``collected`` (from :func:`collect`) into ``runtime`` at the same paths; every
    archive is checked before anything is written (``SandboxError`` on anything but files and
    folders under their own path)."""
    if not collected:
        return
    await asyncio.to_thread(_restore_sync, _workdir(runtime), dict(collected))


__all__ = ["collect", "restore"]
