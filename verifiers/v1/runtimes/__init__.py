"""Runtimes: where an agent's programs run. ``[env.<role>.runtime]``, selected by ``type``.

Two run here: ``subprocess`` (local processes, not isolated; the embedded default when a run
names none) and ``sandbox`` (each rollout in its own bubblewrap sandbox, ``verifiers.sandbox``:
no network, no host files, resource limits). The container and hosted runtimes' configs load, so
a config written for the original is checked, but starting one is refused with one line saying
what is missing.

``run_uv_script`` runs a PEP 723 script through the ``uv`` next to this interpreter (the
venv's): packages come from the package registries only, and with ``offline=True`` from a warm
uv cache (``prepare_uv_script`` warms it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess as _subprocess  # not `subprocess`: the submodule runtimes.subprocess (the original's path) takes that name in this package
import tempfile
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, PositiveFloat, field_validator

from verifiers.utils.async_utils import wait_for
from verifiers.v1.configs import BaseConfig
from verifiers.v1.errors import SandboxError
from verifiers.v1.fields import new_id
from verifiers.v1.task import TaskResources

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


class SandboxConfig(RuntimeConfig):
    """Each rollout in its own local sandbox (``verifiers.sandbox``, bubblewrap by default): a
    fresh work folder at ``/workspace``, the host's ``/usr`` read-only, no network, limits."""

    type: Literal["sandbox"] = "sandbox"
    backend: Literal["bwrap", "nsjail"] = "bwrap"
    """The isolating backend (never the unisolated ``subprocess`` one: use that runtime instead)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the sandboxed programs (nothing of the host's is passed)."""
    timeout: PositiveFloat = 600.0
    """Wall-clock seconds a program may run when its caller gives no timeout."""
    limits: dict[str, float | int | None] = Field(default_factory=dict)
    """``verifiers.sandbox.Limits`` fields: ``memory_mb``, ``cpu_seconds``, ``processes``,
    ``file_size_mb``, ``open_files``, ``output_bytes``, ``tmp_size_mb``, ``disk_mb``."""
    uv_cache_dir: Path | None = None
    """A uv cache shared by the runtimes that name it (warm: ``prepare_uv_script`` then needs no
    registry); it must be writable by the sandbox's uid. None: a fresh cache per rollout."""
    warm: bool = False
    """Each rollout in a pre-started sandbox (``verifiers.sandbox.warm``) that is reset between
    rollouts and never shares state between them: a rollout's box starts in milliseconds. The
    runtimes of one config (in one process) share one pool, and the uv cache is then shared by
    them too (``uv_cache_dir``, else one made for the process). Tool folders and task
    environments (``prepare_tools`` / ``prepare_environment`` with requirements) change a box's
    mounts, so a warm runtime refuses them: use ``warm = false`` for such tasks."""
    registries: list[str] = Field(default_factory=lambda: list(PACKAGE_REGISTRIES))
    """The hosts ``prepare_uv_script`` may reach through the allow-listed egress proxy, as
    ``http(s)://host[:port]`` (an index named in ``env``, ``UV_INDEX_URL``, must be listed too);
    ``[]``: preparing is offline, from the warm cache only."""

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        from verifiers.sandbox.types import Limits

        Limits().merged(value)  # unknown names are a ValueError
        out: dict[str, Any] = {}
        for name, v in value.items():
            if name == "cpu_seconds" and v is None:
                out[name] = None
            elif v is None or v <= 0 or (name != "cpu_seconds" and v != int(v)):
                raise ValueError(f"limits.{name} must be a positive {'number' if name == 'cpu_seconds' else 'whole number'}, not {v!r}")
            else:
                out[name] = v if name == "cpu_seconds" else int(v)
        return out

    @field_validator("registries")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        from verifiers.sandbox.egress import hosts_of

        hosts_of(value)  # each must be an http(s) URL
        return value


PACKAGE_REGISTRIES = ("https://pypi.org", "https://files.pythonhosted.org")

# warm sandbox runtimes: one Sandbox (and so one pool of warm boxes) and one uv cache per config
_WARM_SANDBOXES: dict[str, Any] = {}
_WARM_CACHES: dict[str, Path] = {}
_WARM_LOCK = threading.Lock()


def _warm_key(config: SandboxConfig) -> str:
    return config.model_dump_json()


def _warm_sandbox(config: SandboxConfig, env: dict[str, str], binds: dict[str, str]) -> Any:
    """The process's shared warm ``Sandbox`` for ``config`` (made on first use; its boxes stop at
    interpreter exit, or with ``close_warm_sandboxes``)."""
    from verifiers.sandbox import Sandbox

    with _WARM_LOCK:
        sandbox = _WARM_SANDBOXES.get(_warm_key(config))
        if sandbox is None:
            sandbox = Sandbox(config.backend, limits=dict(config.limits), timeout=config.timeout, env=env, ro_binds=binds, warm=True)
            _WARM_SANDBOXES[_warm_key(config)] = sandbox
        return sandbox


def _warm_cache(runtime: SandboxRuntime, root: Path, uid: int | None) -> Path:
    """The uv cache of the warm runtimes of one config: ``uv_cache_dir``, else one folder made
    for this process (removed by ``close_warm_sandboxes`` or the next process's sweep)."""
    key = _warm_key(runtime.config)
    with _WARM_LOCK:
        path = _WARM_CACHES.get(key)
        if path is None:
            path = runtime._cache_dir(root, uid)
            runtime._own_cache = False  # shared: not removed when one rollout stops
            _WARM_CACHES[key] = path
        return path


def close_warm_sandboxes() -> None:
    """Stop every warm box of the warm sandbox runtimes and remove the caches made for them."""
    with _WARM_LOCK:
        sandboxes, caches = list(_WARM_SANDBOXES.values()), [
            (key, path) for key, path in _WARM_CACHES.items() if json.loads(key).get("uv_cache_dir") is None
        ]
        _WARM_SANDBOXES.clear()
        _WARM_CACHES.clear()
    for sandbox in sandboxes:
        sandbox.close()
    for _, path in caches:
        shutil.rmtree(path, ignore_errors=True)


class _ContainerConfig(RuntimeConfig):
    # the original's container knobs are many; they are kept as given until the runtime exists
    model_config = ConfigDict(extra="allow")
    MISSING: ClassVar[str] = ""


class DockerConfig(_ContainerConfig):
    type: Literal["docker"] = "docker"
    MISSING: ClassVar[str] = "the docker runtime is not available in this version yet (use type = \"sandbox\" to isolate model code locally, or \"subprocess\")"


class PodmanConfig(_ContainerConfig):
    type: Literal["podman"] = "podman"
    MISSING: ClassVar[str] = "the podman runtime is not available in this version yet (use type = \"sandbox\" to isolate model code locally, or \"subprocess\")"


class ApptainerConfig(_ContainerConfig):
    type: Literal["apptainer"] = "apptainer"
    MISSING: ClassVar[str] = "the apptainer runtime is not available in this version yet (use type = \"sandbox\" to isolate model code locally, or \"subprocess\")"


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
    for c in (SubprocessConfig, SandboxConfig, DockerConfig, PodmanConfig, ApptainerConfig, PrimeConfig, ModalConfig, E2BConfig)
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


def placement_refusal(config: RuntimeConfig, data: Any) -> str | None:
    """Why a run of the task ``data`` describes cannot start on the runtime ``config``, None when
    it can. As in the original, the runtime is checked against what the task asks for, in this
    order, and a runtime that cannot give it refuses the task rather than run it on something else:

    - a Docker ``image``: the subprocess runtime (the host itself, no container) refuses it (the
      sandbox runtime refuses it when it is made, ``SandboxRuntime.refuse_task``);
    - a network policy (``network_allow`` other than ``["*"]``, or any ``network_block``): the
      subprocess runtime (the host's network) refuses every policy; the sandbox runtime (no network
      at all) keeps any policy that asks for no host (an empty allow list, or blocks only) and
      refuses one that names hosts to reach."""
    image = getattr(data, "image", None)
    if image and isinstance(config, SubprocessConfig):
        return (f"task {getattr(data, 'idx', None)!r} requires image {image!r}, but the subprocess runtime has no "
                "container; use a container runtime (docker, podman) or [env.<role>.runtime] type = \"sandbox\" with "
                "the task's environment as files")  # fmt: skip
    allow = list(getattr(data, "network_allow", None) or [])
    block = list(getattr(data, "network_block", None) or [])
    if "*" in allow and not block:
        return None
    if isinstance(config, SandboxConfig):
        named = [h for h in allow if h != "*"]
        if not named:
            return None
        return (f"task {getattr(data, 'idx', None)!r} allows network hosts {named}, but the sandbox runtime has no network "
                "(its programs reach only the model proxy)")  # fmt: skip
    if not isinstance(config, SubprocessConfig):
        return None  # a container or hosted runtime: refused at start here when its engine or service is absent
    return (f"task {getattr(data, 'idx', None)!r} requires a network policy, but the {config.type} runtime does not "
            "support framework-aware policies")  # fmt: skip


@dataclass(slots=True, init=False)
class ProgramResult:
    """A finished program: its exit status and output (text, decoded as UTF-8 with replacement).
    Built as ``ProgramResult(returncode, stdout, stderr)`` or, as harnesses written for the
    original do, ``ProgramResult(exit_code=..., stdout=..., stderr=...)``."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    def __init__(
        self, returncode: int | None = None, stdout: str = "", stderr: str = "", timed_out: bool = False, *,
        exit_code: int | None = None,
    ) -> None:  # fmt: skip
        if exit_code is not None:
            if returncode is not None and returncode != exit_code:
                raise TypeError(f"ProgramResult got returncode={returncode} and exit_code={exit_code}: give one")
            returncode = exit_code
        if returncode is None:
            raise TypeError("ProgramResult needs the program's exit status (returncode, or exit_code)")
        self.returncode, self.stdout, self.stderr, self.timed_out = returncode, stdout, stderr, timed_out

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def exit_code(self) -> int:
        """The original's name for ``returncode`` (tasksets written for 0.3/0.4 read this one)."""
        return self.returncode


def command_argv(command: str | Sequence[str], shell: str) -> list[str]:
    """``Runtime.run``'s command as an argv: a str is one shell command line (``shell -c``); a
    list is the argv itself, run without a shell (the original 0.3/0.4 call shape)."""
    if isinstance(command, str):
        return [shell, "-c", command]
    argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("Runtime.run takes a command line (str) or a non-empty argv (list of str)")
    return argv


class RuntimeProcess(ABC):
    """A program started with ``Runtime.open_process`` that runs while its caller talks to it:
    write to its stdin, read its ``stdout`` / ``stderr`` (async iterators of byte chunks), wait for
    it or end it. A harness session keeps one across the turns of a run."""

    stdout: AsyncIterator[bytes]
    stderr: AsyncIterator[bytes]

    @abstractmethod
    async def write(self, data: bytes) -> None:
        """Send ``data`` to the program's stdin."""

    @abstractmethod
    async def wait(self) -> int:
        """Wait for the program to end; its exit status."""

    @abstractmethod
    async def poll(self) -> int | None:
        """The program's exit status, or None while it runs (no waiting)."""

    @abstractmethod
    async def terminate(self) -> None:
        """Ask the program to end (SIGTERM to its process group)."""

    @abstractmethod
    async def kill(self) -> None:
        """End the program at once (SIGKILL to its process group)."""


class Runtime:
    """The box one rollout's programs run in."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config

    @property
    def info(self) -> dict[str, Any]:
        return {"type": self.config.type}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def refuse_task(self, data: Any) -> str | None:
        """Why this runtime cannot run the task ``data`` describes (None: it can)."""
        return None

    async def open_process(self, argv: list[str], env: dict[str, str] | None = None) -> RuntimeProcess:
        """Start ``argv`` as a live process (``RuntimeProcess``) that ends with the runtime."""
        raise NotImplementedError(f"{type(self).__name__} does not support live processes")

    async def prepare_execution(self, routes: list[str] | None) -> None:
        """The last setup step before the agent's program starts: ``routes`` are the host URLs it
        must reach (the interception proxy); None lifts the grant. A local runtime on the host's
        network has nothing to do."""

    def host_url(self, url: str) -> str:
        """The URL a program inside this runtime uses to reach the host's ``url``."""
        return url

    async def _script_file(self, script: str | bytes | os.PathLike[str]) -> str | os.PathLike[str]:
        """A script named by its path, or given as its source (the original's form: text with a
        newline, or bytes), as a path in the work folder (``.vf-scripts/<sha256>.py``, named by its
        content). The source is written again on every use: a program of the box may have changed
        the file since, and what runs must be the caller's script."""
        data = _script_source(script)
        if data is None:
            return script
        path = f"{SCRIPTS_DIR}/{hashlib.sha256(data).hexdigest()}.py"
        await self.write(path, data)  # type: ignore[attr-defined]
        return path


def _script_source(script: Any) -> bytes | None:
    """A script's source when it is given by its source (bytes, or text with a newline), else None
    (a path)."""
    if isinstance(script, bytes):
        return script
    if isinstance(script, str) and "\n" in script:
        return script.encode()
    return None


SCRIPTS_DIR = ".vf-scripts"
"""Where a script given by its source is written in the work folder."""


IN_PROCESS_MARK = "# verifiers: the shared chat program, run in the harness's process"
"""The line that marks ``harnesses.utils.launch.CHAT_PROGRAM_SOURCE`` (and a text built on it)."""


def is_in_process_program(script: Any) -> bool:
    """A program the harness runs in this process (``harnesses.utils.launch.CHAT_PROGRAM_SOURCE``,
    or a text built on it): nothing to prepare, and no argv runs it."""
    if isinstance(script, bytes):
        return IN_PROCESS_MARK.encode() in script
    return isinstance(script, str) and IN_PROCESS_MARK in script



def _uv() -> str:
    """The ``uv`` of this interpreter's venv (else the one on PATH): the version the project pins."""
    from verifiers.sandbox.toolenv import uv_binary
    from verifiers.sandbox.types import SandboxError as Missing

    try:
        return uv_binary()
    except Missing as exc:
        raise SandboxError(str(exc)) from None


class SubprocessRuntime(Runtime):
    """Programs run as local processes in one working folder (not isolated: for debugging and
    for harnesses that execute nothing)."""

    config: SubprocessConfig

    def __init__(self, config: SubprocessConfig | None = None) -> None:
        super().__init__(config or SubprocessConfig())
        given = self.config.workdir
        # the folder as a path is built on first use (a rollout whose harness runs nothing never
        # needs it); ``_where`` is its name as ``info`` records it
        self._path_of: Path | None = Path(given) if given else None
        self._where = str(self._path_of) if given else "."
        self._fresh = False  # a temporary folder of this runtime's own, made on first use
        self._made = False
        self._live: list[asyncio.subprocess.Process] = []  # open_process's, killed at stop

    @property
    def _workdir(self) -> Path:
        if self._path_of is None:
            self._path_of = Path(self._where)
        return self._path_of

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
        return {"type": "subprocess", "workdir": self._where}

    async def start(self) -> None:
        if self.config.workdir is None:
            if not self._fresh:
                # gettempdir() is absolute and normalised, so this string is the path's own str()
                self._where = os.path.join(tempfile.gettempdir(), f"vf-rollout-{new_id()}")
                self._path_of = None
                self._fresh, self._made = True, False
        else:
            self._workdir.mkdir(parents=True, exist_ok=True)

    async def stop(self) -> None:
        live, self._live = self._live, []
        for proc in live:  # a live process ends with its runtime, its whole group with it
            _kill_group(proc)
            with contextlib.suppress(Exception):
                await proc.wait()
        if self._fresh:
            if self._made:
                _remove_tree(self._workdir)
            self._fresh = self._made = False

    def _path(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.workdir / p

    async def _script_file(self, script: str | bytes | os.PathLike[str]) -> str | os.PathLike[str]:
        """A script given by its source is written (atomically, when it changed) to this user's
        cache, ``~/.cache/verifiers/scripts/<sha256>.py``: outside the work folder (never in an
        agent's patch), and one path per script across rollouts, so uv keeps one environment for it."""
        data = _script_source(script)
        if data is None:
            return script
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "verifiers" / "scripts"
        target = folder / f"{hashlib.sha256(data).hexdigest()}.py"

        def put() -> None:
            if target.is_file() and target.read_bytes() == data:
                return
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}"
            tmp.write_bytes(data)
            os.replace(tmp, target)

        await asyncio.to_thread(put)
        return str(target)

    def _env(self, env: dict[str, str] | None) -> dict[str, str]:
        # as the original: what a program inherits from the host leaves out every name holding
        # API_KEY (a key given in the runtime's or the call's own env still reaches it)
        inherited = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
        out = {**inherited, **self.config.env, **(env or {})}
        if self.config.uv_cache_dir is not None:
            out["UV_CACHE_DIR"] = str(self.config.uv_cache_dir)
        return out

    async def open_process(self, argv: list[str], env: dict[str, str] | None = None) -> RuntimeProcess:
        """``argv`` started in the work folder with the runtime's environment, its stdio piped, in
        a process group of its own; killed (the whole group) when the runtime stops."""
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(self.workdir), env=self._env(env), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self._live.append(proc)
        return LocalProcess(proc)

    async def run_program(
        self, argv: list[str], env: dict[str, str] | None = None, *, timeout: float | None = None,
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
            out, err = await wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(proc)
            out, err = await proc.communicate()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ProgramResult(proc.returncode if proc.returncode is not None else -9, out.decode(errors="replace"), err.decode(errors="replace"), timed_out=True)
        return ProgramResult(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))

    async def run(
        self, command: str | Sequence[str], env: dict[str, str] | None = None, *, timeout: float | None = None
    ) -> ProgramResult:
        """Run a shell command line (``bash -c``), or an argv list without a shell."""
        return await self.run_program(command_argv(command, "bash"), env=env, timeout=timeout)

    async def write(self, path: str, content: str | bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        await asyncio.to_thread(target.write_bytes, data)

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes (``max_bytes``: refuse a larger file rather than load it)."""
        target = self._path(path)
        if max_bytes is not None:
            if max_bytes < 0:
                raise ValueError("max_bytes must be non-negative")
            size = (await asyncio.to_thread(target.stat)).st_size
            if size > max_bytes:
                raise SandboxError(f"read {path!r}: {size} bytes, over the {max_bytes} byte limit")
        return await asyncio.to_thread(target.read_bytes)

    async def prepare_tools(self, requirements: Sequence[str], *, timeout: float = 1800.0) -> Any:
        raise SandboxError('tool folders are mounted into sandboxes: use [env.<role>.runtime] type = "sandbox"')

    async def prepare_environment(
        self, requirements: Sequence[str] = (), files: dict[str, str | bytes] | None = None, *, workdir: str | None = None,
    ) -> None:  # fmt: skip
        """A task's files, written into the working folder; Python requirements are built into a
        cached environment by the sandbox runtime only (here they are refused, not installed)."""
        if requirements:
            raise SandboxError(f'the task needs a Python environment ({", ".join(requirements)[:200]}), which the sandbox runtime builds: '
                               'use [env.<role>.runtime] type = "sandbox"')  # fmt: skip
        for path, content in (files or {}).items():
            await self.write(path, content)

    async def prepare_uv_script(
        self, script: str | bytes | os.PathLike[str], env: dict[str, str] | None = None, *, activate: bool = True,
        timeout: float | None = 600.0,
    ) -> list[str]:  # fmt: skip
        """Resolve and install a PEP 723 script's dependencies into uv's cache (``uv sync
        --script``), so that later runs can go ``offline``; the argv that runs it (the original's
        contract). ``script``: a path in the work folder, or the script's source."""
        if is_in_process_program(script):
            return []
        path = await self._script_file(script)
        result = await self.run_program([_uv(), "sync", "--script", str(self._path(path))], env, timeout=timeout)
        if not result.ok:
            raise SandboxError(f"uv could not prepare {path}: {result.stderr.strip()[-2000:]}")
        return [_uv(), "run", "--offline", "--script", str(self._path(path))]

    async def run_uv_script(
        self, script: str | bytes | os.PathLike[str], args: list[str] | None = None, env: dict[str, str] | None = None, *,
        offline: bool = False, timeout: float | None = None, stdin: str | None = None,
    ) -> ProgramResult:  # fmt: skip
        """``uv run --script`` (``--offline``: only what the cache holds); ``script`` as for
        :meth:`prepare_uv_script`."""
        path = await self._script_file(script)
        argv = [_uv(), "run", *(["--offline"] if offline else []), "--script", str(self._path(path)), *(args or [])]
        return await self.run_program(argv, env, timeout=timeout, stdin=stdin)


def _remove_tree(path: Path) -> None:
    """Remove a rollout's folder, read-only entries a program left included."""

    def unlock(func: Any, entry: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(entry), 0o700)
            os.chmod(entry, 0o700)
            func(entry)
        except OSError:
            pass

    try:
        shutil.rmtree(path, onerror=unlock)
    except RecursionError:  # folders nested past Python's recursion limit: rm walks any depth
        _subprocess.run(["rm", "-rf", "--", str(path)], stdin=_subprocess.DEVNULL, capture_output=True, check=False)


async def _chunks(stream: asyncio.StreamReader | None) -> AsyncIterator[bytes]:
    while stream is not None and (chunk := await stream.read(64 * 1024)):
        yield chunk


class LocalProcess(RuntimeProcess):
    """A live process of the subprocess runtime (``SubprocessRuntime.open_process``)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stdout = _chunks(proc.stdout)
        self.stderr = _chunks(proc.stderr)

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def wait(self) -> int:
        return await self.proc.wait()

    async def poll(self) -> int | None:
        return self.proc.returncode

    async def terminate(self) -> None:
        import signal

        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)

    async def kill(self) -> None:
        _kill_group(self.proc)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- the sandbox runtime -------------------------------------------------------------------------

# where the sandbox sees uv, its cache and the CA bundle while setting up (the tool-folder builder's
# paths, verifiers.sandbox.toolenv, not imported here to keep this module's import light)
_UV_INSIDE = "/opt/vf/bin/uv"
_CACHE_INSIDE = "/opt/vf/uv-cache"
_CA_INSIDE = "/opt/vf/ca-certificates.crt"


def _ca_bundle() -> Path | None:
    from verifiers.sandbox.toolenv import ca_bundle

    return ca_bundle()


_EGRESS_SOCKET = ".vf-egress.sock"

# The setup phase: the egress relay (when the proxy is granted), then uv fills the cache and
# names the script's environment. $1: the relay's source, $2: the script, $3: "offline" or "",
# $4: the proxy's socket.
_PREPARE = r"""
set -e
if [ -z "$3" ]; then
  /usr/bin/python3 -I -c "$1" "$4" 3128 > /tmp/relay.log 2>&1 &
  for _ in $(seq 200); do grep -q ready /tmp/relay.log 2>/dev/null && break; sleep 0.05; done
  export HTTPS_PROXY=http://127.0.0.1:3128 HTTP_PROXY=http://127.0.0.1:3128 NO_PROXY=
  /opt/vf/bin/uv sync --script "$2" >&2
else
  /opt/vf/bin/uv sync --offline --script "$2" >&2
fi
/opt/vf/bin/uv python find --offline --script "$2"
"""


# The agent phase's network: a relay per granted port (the sandbox's 127.0.0.1:PORT -> the unix
# socket the host forwards to its own 127.0.0.1:PORT), then the program. $1: the relay's source,
# $2: the ports; the rest: the program's argv.
_ROUTED = r"""
relay=$1; ports=$2; shift 2
for port in $ports; do
  /usr/bin/python3 -I -c "$relay" "/workspace/.vf-route-$port.sock" "$port" > "/tmp/.vf-relay-$port.log" 2>&1 &
  i=0
  until grep -q ready "/tmp/.vf-relay-$port.log" 2>/dev/null; do
    i=$((i+1)); [ $i -gt 500 ] && { echo "[sandbox] the route to port $port did not start" >&2; exit 125; }
    sleep 0.01
  done
done
exec "$@"
"""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class SandboxRuntime(Runtime):
    """Each rollout's programs in a sandbox of their own (``verifiers.sandbox``): one work folder
    (``/workspace``) kept across the rollout's calls, and a fresh sandbox per program, killed with
    everything it started when it returns, passes its wall clock, or is cancelled. No network; the
    host's files outside the work folder are out of reach (``/usr`` read-only aside).

    ``prepare_uv_script`` is the one step that may fetch: uv runs sandboxed with the uv cache
    writable and an allow-listed egress proxy to ``registries`` (``verifiers.sandbox.egress``), or
    offline from a warm cache. ``run_uv_script`` then runs the script in the environment prepared
    for it, with the cache read-only and no network.
    """

    config: SandboxConfig

    def __init__(self, config: SandboxConfig | None = None) -> None:
        from verifiers.sandbox import Sandbox
        from verifiers.sandbox.types import SandboxError as SandboxFailure

        super().__init__(config or SandboxConfig())
        binds: dict[str, str] = {}
        try:
            binds[_uv()] = _UV_INSIDE
        except SandboxError:
            self._uv_missing = True  # only prepare_uv_script needs it; it says so then
        else:
            self._uv_missing = False
        ca = _ca_bundle()
        if ca is not None:
            binds[str(ca)] = _CA_INSIDE
        env = {"UV_CACHE_DIR": _CACHE_INSIDE, "UV_PYTHON": "/usr/bin/python3", "UV_PYTHON_DOWNLOADS": "never",
               "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1", **self.config.env}  # fmt: skip
        try:
            if self.config.warm:
                self._sandbox = _warm_sandbox(self.config, env, binds)
            else:
                self._sandbox = Sandbox(self.config.backend, limits=dict(self.config.limits), timeout=self.config.timeout,
                                        env=env, ro_binds=binds, warm=False)  # fmt: skip
            self._sandbox.check()  # bwrap missing, user namespaces off: refused before any rollout
        except SandboxFailure as exc:
            raise SandboxError(f"the sandbox runtime cannot start here: {_one_line(exc)}") from None
        self._session: Any = None
        self._cache: Path | None = None
        self._own_cache = False
        self._envs: dict[str, str] = {}
        self._routes: list[int] = []
        self._task_env: Any = None  # the task's environment (a ToolEnv), first on PATH
        self._tools: dict[tuple[str, ...], Any] = {}
        self._aliases: dict[str, str] = {}

    @property
    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "sandbox", "backend": self.config.backend}
        if self._session is not None and not self._session.closed:
            out["workdir"] = str(self._session.workdir)
        return out

    @property
    def workdir(self) -> Path:
        """The host folder mounted at ``/workspace`` (for the host's own reading after a run)."""
        if self._session is None:
            raise SandboxError("the sandbox runtime is not started")
        return self._session.workdir

    async def start(self) -> None:
        from verifiers.sandbox.backends import SANDBOX_UID, drop_to_sandbox_uid, sandbox_root

        if self._session is not None:
            return
        if self.config.warm:
            # one cache for the shared pool: a bind that changed per rollout would restart the pool
            self._cache = await asyncio.to_thread(_warm_cache, self, sandbox_root(), SANDBOX_UID if drop_to_sandbox_uid() else None)
        else:
            self._cache = await asyncio.to_thread(self._cache_dir, sandbox_root(), SANDBOX_UID if drop_to_sandbox_uid() else None)
        self._sandbox.ro_binds[str(self._cache)] = _CACHE_INSIDE  # read-only but while preparing
        session = self._sandbox.session(warm=self.config.warm)
        await session.start()
        self._session = session

    def _cache_dir(self, root: Path, uid: int | None) -> Path:
        """The uv cache: the config's, else a fresh one; the sandbox's uid must reach and write it
        (and it is mounted directly, never mirrored: so it must be world-readable)."""
        import stat

        from verifiers.sandbox.binds import reachable_by_sandbox_uid

        if self.config.uv_cache_dir is None:
            # "run-<pid>-" like the work dirs: a killed process's cache is swept by the next one
            path = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-uv", dir=root))
            self._own_cache = True
            created = True
        else:
            path = Path(self.config.uv_cache_dir).resolve()
            created = not path.exists()
            path.mkdir(parents=True, exist_ok=True)
        if created:
            path.chmod(0o755)
            if uid is not None:
                os.chown(path, uid, uid)
        if uid is not None:
            st = path.stat()
            writable = st.st_uid == uid or st.st_mode & (stat.S_IWOTH | stat.S_IXOTH) == stat.S_IWOTH | stat.S_IXOTH
            if not writable or not reachable_by_sandbox_uid(path):
                raise SandboxError(
                    f"the uv cache {path} must be readable and writable by uid {uid}, which the sandbox runs as, "
                    f"under folders it can traverse (chown -R {uid}:{uid} {path}; chmod 755 {path})"
                )
        return path

    async def stop(self) -> None:
        self._routes = []
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        if self._own_cache and self._cache is not None:
            await asyncio.to_thread(shutil.rmtree, self._cache, True)
            self._cache = None

    def _live(self) -> Any:
        if self._session is None or self._session.closed:
            raise SandboxError("the sandbox runtime is not started")
        return self._session

    @staticmethod
    def _inside(path: str | os.PathLike[str]) -> str:
        """``path`` as the sandbox sees it; anything outside the work folder is a ValueError."""
        from verifiers.sandbox.backends import WORKDIR
        from verifiers.sandbox.sandbox import _safe_relative

        return f"{WORKDIR}/{_safe_relative(os.fspath(path))}"

    # -- the container-runtime contract: tool folders, a task's environment, routes -------------

    def refuse_task(self, data: Any) -> str | None:
        image = getattr(data, "image", None)
        if image:
            return (f"task {getattr(data, 'name', None) or getattr(data, 'id', None) or '?'!r} needs the Docker image {image!r}, "
                    "which the sandbox runtime cannot run (no Docker here): declare its environment as files plus Python "
                    "requirements (runtime.prepare_environment), or use a container runtime")  # fmt: skip
        return None

    async def prepare_tools(self, requirements: Sequence[str], *, timeout: float = 1800.0) -> Any:
        """The tool folder of ``requirements`` (``verifiers.sandbox.toolenv``: built once per
        machine from ``registries``, cached by hash), mounted read-only into this runtime's later
        programs at ``/opt/tools/<key>``. Returns its ``ToolEnv`` (``.python``, ``.bin``)."""
        from verifiers.sandbox.toolenv import ensure_toolenv, normalized_requirements

        reqs = normalized_requirements(requirements)
        env = self._tools.get(reqs)
        if env is None and self.config.warm:
            raise SandboxError("a warm sandbox runtime cannot mount tool folders or task environments (they change every "
                               "box's mounts); set [env.<role>.runtime] warm = false for this task")  # fmt: skip
        if env is None:
            try:
                env = await ensure_toolenv(reqs, registries=self.config.registries, backend=self.config.backend, timeout=timeout,
                                           index_url=self.config.env.get("UV_INDEX_URL"))  # fmt: skip
            except ValueError as exc:
                raise SandboxError(f"tool folder: {exc}") from None
            self._tools[reqs] = env
            self._sandbox.ro_binds.update(env.bind)
        return env

    async def prepare_environment(
        self, requirements: Sequence[str] = (), files: dict[str, str | bytes] | None = None, *, workdir: str | None = None,
    ) -> Any:  # fmt: skip
        """A task's environment without Docker: ``files`` written into the work folder, and
        ``requirements`` built into a cached environment (the tool-folder builder) whose ``bin``
        comes first on every later program's ``PATH`` (``python``, ``pytest``...). ``workdir``:
        the work folder is also mounted there (a task written for ``/app``). Returns the
        environment's ``ToolEnv`` (None without requirements)."""
        if workdir and workdir.rstrip("/") not in ("", "/workspace"):
            if not workdir.startswith("/") or ".." in workdir.split("/") or workdir.startswith(("/usr", "/proc", "/dev", "/etc", "/opt/vf", "/opt/tools", "/tmp")):
                raise SandboxError(f"task workdir {workdir!r}: an absolute path outside the system folders is needed")
            self._aliases[str(self._live().workdir)] = workdir.rstrip("/")
        if files:
            await self._live().write_files(files)
        if requirements:
            self._task_env = await self.prepare_tools(requirements)
        return self._task_env

    async def prepare_execution(self, routes: list[str] | None) -> None:
        """Grant the next programs (``run_program``: the harness's) the host loopback ``routes``
        and nothing else: each port is relayed from the sandbox's own ``127.0.0.1`` through a unix
        socket to the host, so the URL is the same inside. None lifts the grant."""
        from urllib.parse import urlsplit

        ports = []
        for url in routes or []:
            parts = urlsplit(url)
            if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
                raise SandboxError(f"the sandbox runtime grants host loopback routes only (http://127.0.0.1:PORT/...), not {url!r}")
            ports.append(parts.port)
        self._routes = sorted(set(ports))

    def host_url(self, url: str) -> str:
        return url.replace("://localhost:", "://127.0.0.1:", 1)

    def _env_for(self, env: dict[str, str] | None) -> dict[str, str] | None:
        if self._task_env is None or "PATH" in self.config.env:
            return env
        from verifiers.sandbox.backends import DEFAULT_PATH

        return {"PATH": f"{self._task_env.bin}:{DEFAULT_PATH}", "VIRTUAL_ENV": self._task_env.inside, **(env or {})}

    async def run_program(
        self, argv: list[str], env: dict[str, str] | None = None, *, timeout: float | None = None,
        stdin: str | None = None, cwd: str | None = None, limits: dict[str, Any] | None = None,
    ) -> ProgramResult:  # fmt: skip
        """Run ``argv`` (no shell) in a fresh sandbox on the work folder; past ``timeout`` (the
        config's ``timeout`` when None) its whole PID namespace is killed and it is ``timed_out``.
        The routes of ``prepare_execution`` are reachable from it (and from what it starts)."""
        argv = list(argv)
        if not self._routes:
            return await self._exec(argv, env=env, timeout=timeout, stdin=stdin, cwd=cwd, limits=limits)
        from verifiers.sandbox.egress import RELAY, LoopbackForward

        workdir = self._live().workdir
        async with contextlib.AsyncExitStack() as stack:
            for port in self._routes:
                await stack.enter_async_context(LoopbackForward(workdir / f".vf-route-{port}.sock", port))
            wrapped = ["/bin/sh", "-c", _ROUTED, "routed", RELAY, " ".join(map(str, self._routes)), *argv]
            return await self._exec(wrapped, env=env, timeout=timeout, stdin=stdin, cwd=cwd, limits=limits)

    async def _exec(
        self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
        stdin: str | None = None, cwd: str | None = None, rw_binds: dict[str, str] | None = None,
        limits: dict[str, Any] | None = None,
    ) -> ProgramResult:  # fmt: skip
        session = self._live()
        if cwd is not None:
            argv = ["/bin/sh", "-c", 'cd -- "$1" && shift && exec "$@"', "sh", self._inside(cwd), *argv]
        if self._aliases:
            rw_binds = {**self._aliases, **(rw_binds or {})}
        r = await session.run(argv, stdin=stdin, timeout=self.config.timeout if timeout is None else timeout,
                              env=self._env_for(env), rw_binds=rw_binds, limits=limits)  # fmt: skip
        stderr = r.stderr
        if r.kill_reason in ("memory", "output"):
            stderr += f"\n[sandbox] stopped at its {r.kill_reason} limit\n"
        return ProgramResult(r.exit_code, r.stdout, stderr, timed_out=r.kill_reason == "timeout")

    async def run(
        self, command: str | Sequence[str], env: dict[str, str] | None = None, *, timeout: float | None = None,
        binds: dict[str, str] | None = None,
    ) -> ProgramResult:  # fmt: skip
        """Run a shell command line (``bash -c``), or an argv list without a shell, in the work folder.
        ``binds`` (``{host_folder: path_inside}``) are mounted writable for this call only (a
        verifier's fresh ``/tests`` and ``/logs``); each must be writable by the sandbox's uid."""
        return await self._exec(command_argv(command, "/bin/bash"), env=env, timeout=timeout, rw_binds=binds)

    async def write(self, path: str, content: str | bytes) -> None:
        """Write a file of the work folder (relative, or under ``/workspace``; links are not followed)."""
        await self._live().write_files({path: content})

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a file of the work folder (relative, or under ``/workspace``; links are refused)."""
        data = await self._live().read_file(path)
        if max_bytes is not None and len(data) > max_bytes:
            raise SandboxError(f"read {path!r}: {len(data)} bytes, over the {max_bytes} byte limit")
        return data

    def _allowed(self) -> set[tuple[str, int]]:
        from verifiers.sandbox.egress import hosts_of

        return hosts_of(self.config.registries)

    async def prepare_uv_script(
        self, script: str | bytes | os.PathLike[str], env: dict[str, str] | None = None, *, activate: bool = True,
        timeout: float | None = 600.0,
    ) -> list[str]:  # fmt: skip
        """Resolve and install a PEP 723 script's dependencies (``uv sync --script``, sandboxed, the
        cache writable): from ``registries`` through the egress proxy, or offline when there are none.
        The argv that runs it here (the original's contract); ``script``: a path in the work folder,
        or the script's source."""
        from verifiers.sandbox.egress import RELAY, EgressProxy

        if is_in_process_program(script):
            return []
        script = await self._script_file(script)
        if self._uv_missing:
            _uv()  # raises, saying what is missing
        session = self._live()
        inside = self._inside(script)
        allowed = self._allowed()
        argv = ["/bin/bash", "-c", _PREPARE, "prepare", RELAY, inside, "" if allowed else "offline", self._inside(_EGRESS_SOCKET)]
        env = {**(env or {}), **({"SSL_CERT_FILE": _CA_INSIDE} if _ca_bundle() is not None else {})}
        assert self._cache is not None
        rw = {str(self._cache): _CACHE_INSIDE}
        denied: list[str] = []
        if allowed:
            async with EgressProxy(session.workdir / _EGRESS_SOCKET, allowed) as proxy:
                result = await self._exec(argv, env=env, timeout=timeout, rw_binds=rw)
            denied = proxy.denied
        else:
            result = await self._exec(argv, env=env, timeout=timeout, rw_binds=rw)
        found = result.stdout.strip().splitlines()[-1:] if result.ok else []
        if not found or not found[0].startswith(_CACHE_INSIDE + "/"):
            why = result.stderr.strip()[-2000:] or result.stdout.strip()[-500:]
            if result.timed_out:
                why = f"it did not finish within {timeout:g} s. {why}"
            if denied:
                why += f" (the sandbox was refused: {', '.join(sorted(set(denied)))}; add them to registries)"
            raise SandboxError(f"uv could not prepare {script} in the sandbox: {why}")
        self._envs[inside] = found[0]
        return [found[0], inside]

    async def run_uv_script(
        self, script: str | bytes | os.PathLike[str], args: list[str] | None = None, env: dict[str, str] | None = None, *,
        offline: bool = False, timeout: float | None = None, stdin: str | None = None,
    ) -> ProgramResult:  # fmt: skip
        """Run a prepared script in its environment (always offline here: programs have no network;
        ``offline`` is accepted for the runtimes' common signature). A script given by its source
        is prepared first, as the original's ``run_uv_script`` does."""
        script = await self._script_file(script)
        inside = self._inside(script)
        if inside not in self._envs and not isinstance(script, os.PathLike) and str(script).startswith(SCRIPTS_DIR + "/"):
            await self.prepare_uv_script(script, env)
        python = self._envs.get(inside)
        if python is None:
            raise SandboxError(f"{script} was not prepared in this sandbox runtime (call prepare_uv_script first; programs here have no network)")
        venv = python.rsplit("/bin/", 1)[0]
        return await self._exec([python, inside, *(args or [])], env={"VIRTUAL_ENV": venv, **(env or {})},
                                timeout=timeout, stdin=stdin)  # fmt: skip


_IGNORED_RESOURCES: set[tuple[str, str]] = set()
# the most a task's declared resources may raise a sandbox limit to: the host's memory, its disk
_HOST_MB = {
    "memory_mb": lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20,
    "disk_mb": lambda: shutil.disk_usage(tempfile.gettempdir()).total // 2**20,
}


def task_runtime_config(config: RuntimeConfig, resources: Any) -> RuntimeConfig:
    """``config`` with a task's declared ``resources`` (``TaskResources``: ``cpu`` cores, ``memory``
    and ``disk`` in GB, ``gpu``) applied where the config leaves that limit at its default: a value
    set in the config (TOML or command line) wins over the task's. On ``sandbox``, ``memory`` sets
    ``limits.memory_mb`` and ``disk`` sets ``limits.disk_mb``; a resource this runtime cannot
    enforce (``cpu`` and ``gpu`` on ``sandbox``, everything on ``subprocess``) is ignored with one
    warning per runtime type and resource."""
    if resources is None or (type(resources) is TaskResources and not resources.model_fields_set):
        return config  # nothing declared: every field of the plain class defaults to None
    declared = resources.model_dump(exclude_none=True)  # a fresh dict: popped below
    if not declared:
        return config
    applied: dict[str, int] = {}
    if isinstance(config, SandboxConfig):
        import math

        for name, limit in (("memory", "memory_mb"), ("disk", "disk_mb")):
            value = declared.pop(name, None)
            if value is not None and limit not in config.limits:
                if not math.isfinite(value) or value <= 0:
                    raise SandboxError(f"task resources.{name} must be a positive number of GB, not {value!r}")
                # a task may ask for less or more than the default, never more than the host has
                applied[limit] = max(1, min(math.ceil(value * 1024), _HOST_MB[limit]()))
    for name in declared:
        if (config.type, name) not in _IGNORED_RESOURCES:
            _IGNORED_RESOURCES.add((config.type, name))
            import logging

            logging.getLogger("verifiers.v1.runtimes").warning(
                "the %s runtime does not enforce the task resource %r (%r); ignoring it", config.type, name, declared[name])
    if not applied:
        return config
    return config.model_copy(update={"limits": {**config.limits, **applied}})


def make_runtime(config: RuntimeConfig) -> Runtime:
    """The runtime ``config`` describes; a runtime this version cannot start is one ``SandboxError``."""
    if isinstance(config, SubprocessConfig):
        return SubprocessRuntime(config)
    if isinstance(config, SandboxConfig):
        return SandboxRuntime(config)
    missing = getattr(type(config), "MISSING", "") or f"the {config.type} runtime is not available"
    raise SandboxError(f"runtime {config.type!r}{f' ({config.id})' if config.id else ''}: {missing}")


def make_task_runtime(config: RuntimeConfig, task: Any) -> Runtime:
    """A runtime for ``task`` outside an agent's run (``vf validate``'s model-free checks, ``vf
    debug``), placed as an agent's run places it: the task's declared resources applied, and a
    task the runtime cannot keep (a Docker image, its network policy, a task class that declares
    ``NEEDS_CONTAINER`` on the host) refused with one ``SandboxError``, before anything starts."""
    placed = task_runtime_config(config, getattr(task.data, "resources", None))
    refused = placement_refusal(placed, task.data)
    if refused is None and getattr(type(task), "NEEDS_CONTAINER", False) and isinstance(placed, SubprocessConfig):
        refused = (f"{type(task).__name__} needs a container runtime (NEEDS_CONTAINER), but the subprocess runtime runs "
                   "on the host: pass --runtime.type sandbox, or a container runtime (docker, podman)")  # fmt: skip
    runtime = make_runtime(placed)
    refused = refused or runtime.refuse_task(task.data)
    if refused is not None:
        raise SandboxError(refused)
    return runtime
