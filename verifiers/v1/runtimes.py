"""Runtimes: where an agent's programs run. ``[env.<role>.runtime]``, selected by ``type``.

Only the local ``subprocess`` runtime runs here (the embedded default when a run names none).
The container and hosted runtimes' configs load, so a config written for the original is
checked, but starting one is refused with one line saying what is missing.

``run_uv_script`` runs a PEP 723 script through the ``uv`` next to this interpreter (the
venv's): packages come from the package registries only, and with ``offline=True`` from a warm
uv cache (``prepare_uv_script`` warms it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from verifiers.v1.configs import BaseConfig
from verifiers.v1.errors import SandboxError

ARTIFACTS_DIR = "/tmp/vf-artifacts"


class RuntimeConfig(BaseConfig):
    """The runtime's ``type`` picks its class; ``id`` names an instance (a shared box)."""

    type: str = "subprocess"
    id: str | None = None


class SubprocessConfig(RuntimeConfig):
    type: Literal["subprocess"] = "subprocess"
    workdir: Path | None = None
    """The folder programs run in; None: a fresh temporary folder per rollout."""
    env: dict[str, str] = Field(default_factory=dict)
    uv_cache_dir: Path | None = None
    """uv's cache (``UV_CACHE_DIR``); None: uv's own default."""


class _ContainerConfig(RuntimeConfig):
    # the original's container knobs are many; they are kept as given until the runtime exists
    model_config = ConfigDict(extra="allow")
    MISSING: ClassVar[str] = ""


class DockerConfig(_ContainerConfig):
    type: Literal["docker"] = "docker"
    MISSING: ClassVar[str] = "the docker runtime is not available in this version yet (use type = \"subprocess\")"


class PodmanConfig(_ContainerConfig):
    type: Literal["podman"] = "podman"
    MISSING: ClassVar[str] = "the podman runtime is not available in this version yet (use type = \"subprocess\")"


class ApptainerConfig(_ContainerConfig):
    type: Literal["apptainer"] = "apptainer"
    MISSING: ClassVar[str] = "the apptainer runtime is not available in this version yet (use type = \"subprocess\")"


class PrimeConfig(_ContainerConfig):
    type: Literal["prime"] = "prime"
    MISSING: ClassVar[str] = "the prime runtime needs a hosted sandbox service, which this offline project has not (use type = \"subprocess\")"


class ModalConfig(_ContainerConfig):
    type: Literal["modal"] = "modal"
    MISSING: ClassVar[str] = "the modal runtime needs Modal's hosted service, which this offline project has not (use type = \"subprocess\")"


class E2BConfig(_ContainerConfig):
    type: Literal["e2b"] = "e2b"
    MISSING: ClassVar[str] = "the e2b runtime needs E2B's hosted service, which this offline project has not (use type = \"subprocess\")"


RUNTIME_CONFIGS: dict[str, type[RuntimeConfig]] = {
    c.model_fields["type"].default: c
    for c in (SubprocessConfig, DockerConfig, PodmanConfig, ApptainerConfig, PrimeConfig, ModalConfig, E2BConfig)
}


def resolve_runtime_config(data: Any) -> RuntimeConfig:
    """A runtime table (or config) validated into the class its ``type`` names."""
    if data is None:
        return SubprocessConfig()
    if isinstance(data, RuntimeConfig) and type(data) is not RuntimeConfig:
        return data
    if isinstance(data, RuntimeConfig):
        data = data.model_dump(exclude_unset=True)
    if not isinstance(data, dict):
        raise ValueError(f"runtime must be a table with a 'type' key, not {type(data).__name__}")
    kind = data.get("type") or "subprocess"
    cls = RUNTIME_CONFIGS.get(kind)
    if cls is None:
        raise ValueError(f"unknown runtime type {kind!r} (known: {', '.join(sorted(RUNTIME_CONFIGS))})")
    return cls.model_validate({**data, "type": kind})


@dataclass(slots=True)
class ProgramResult:
    """A finished program: its exit status and output (text, decoded as UTF-8 with replacement)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Runtime:
    """The box one rollout's programs run in."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config

    @property
    def info(self) -> dict[str, Any]:
        return {"type": self.config.type}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _uv() -> str:
    """The ``uv`` of this interpreter's venv (else the one on PATH): the version the project pins."""
    here = Path(sys.executable).parent / "uv"
    if here.is_file():
        return str(here)
    found = shutil.which("uv")
    if found is None:
        raise SandboxError("uv is not installed in this venv (it runs the harnesses' PEP 723 scripts)")
    return found


class SubprocessRuntime(Runtime):
    """Programs run as local processes in one working folder (not isolated: for debugging and
    for harnesses that execute nothing)."""

    config: SubprocessConfig

    def __init__(self, config: SubprocessConfig | None = None) -> None:
        super().__init__(config or SubprocessConfig())
        self._workdir: Path = Path(self.config.workdir) if self.config.workdir else Path()
        self._fresh = False  # a temporary folder of this runtime's own, made on first use
        self._made = False

    @property
    def workdir(self) -> Path:
        """The folder programs run in. A fresh one is created on first use: a rollout whose
        harness runs nothing here (the null harness) never touches the disk."""
        if self._fresh and not self._made:
            # a random name under the temp dir, created 0700 and never adopted if it exists
            self._workdir.mkdir(mode=0o700)
            self._made = True
        return self._workdir

    @property
    def info(self) -> dict[str, Any]:
        return {"type": "subprocess", "workdir": str(self._workdir)}

    async def start(self) -> None:
        if self.config.workdir is None:
            if not self._fresh:
                self._workdir = Path(tempfile.gettempdir()) / f"vf-rollout-{uuid.uuid4().hex}"
                self._fresh, self._made = True, False
        else:
            self._workdir.mkdir(parents=True, exist_ok=True)

    async def stop(self) -> None:
        if self._fresh:
            if self._made:
                _remove_tree(self._workdir)
            self._fresh = self._made = False

    def _path(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.workdir / p

    def _env(self, env: dict[str, str] | None) -> dict[str, str]:
        out = {**os.environ, **self.config.env, **(env or {})}
        if self.config.uv_cache_dir is not None:
            out["UV_CACHE_DIR"] = str(self.config.uv_cache_dir)
        return out

    async def run_program(
        self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
        stdin: str | None = None, cwd: str | None = None,
    ) -> ProgramResult:  # fmt: skip
        """Run ``argv`` (no shell) and wait for it; a program past ``timeout`` is killed (its
        whole process group) and reported ``timed_out``."""
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(self._path(cwd) if cwd else self.workdir), env=self._env(env),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc)
            out, err = await proc.communicate()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ProgramResult(proc.returncode if proc.returncode is not None else -9, out.decode(errors="replace"), err.decode(errors="replace"), timed_out=True)
        return ProgramResult(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))

    async def run(self, command: str, *, env: dict[str, str] | None = None, timeout: float | None = None) -> ProgramResult:
        """Run a shell command line (``bash -c``)."""
        return await self.run_program(["bash", "-c", command], env=env, timeout=timeout)

    async def write(self, path: str, content: str | bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        await asyncio.to_thread(target.write_bytes, data)

    async def read(self, path: str) -> str:
        return await asyncio.to_thread(self._path(path).read_text, errors="replace")

    async def prepare_uv_script(self, script: str | os.PathLike[str], *, timeout: float | None = 600.0) -> ProgramResult:
        """Resolve and install a PEP 723 script's dependencies into uv's cache (``uv sync
        --script``), so that later runs can go ``offline``."""
        result = await self.run_program([_uv(), "sync", "--script", str(self._path(script))], timeout=timeout)
        if not result.ok:
            raise SandboxError(f"uv could not prepare {script}: {result.stderr.strip()[-2000:]}")
        return result

    async def run_uv_script(
        self, script: str | os.PathLike[str], args: list[str] | None = None, *, offline: bool = False,
        env: dict[str, str] | None = None, timeout: float | None = None, stdin: str | None = None,
    ) -> ProgramResult:  # fmt: skip
        """``uv run --script`` (``--offline``: only what the cache holds)."""
        argv = [_uv(), "run", *(["--offline"] if offline else []), "--script", str(self._path(script)), *(args or [])]
        return await self.run_program(argv, env=env, timeout=timeout, stdin=stdin)


def _remove_tree(path: Path) -> None:
    """Remove a rollout's folder, read-only entries a program left included."""

    def unlock(func: Any, entry: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(entry), 0o700)
            os.chmod(entry, 0o700)
            func(entry)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def make_runtime(config: RuntimeConfig) -> Runtime:
    """The runtime ``config`` describes; a runtime this version cannot start is one ``SandboxError``."""
    if isinstance(config, SubprocessConfig):
        return SubprocessRuntime(config)
    missing = getattr(type(config), "MISSING", "") or f"the {config.type} runtime is not available"
    raise SandboxError(f"runtime {config.type!r}{f' ({config.id})' if config.id else ''}: {missing}")
