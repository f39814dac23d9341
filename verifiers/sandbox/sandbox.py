"""`Sandbox`: run untrusted commands and Python programs, one-shot or in a persistent session.

Every run gets a fresh work dir on the host (under `sandbox_root()`), mounted writable at
``/workspace`` inside; it is deleted when the run ends, however it ends. A `SandboxSession` keeps
one work dir (and, on demand, one live Python interpreter) across calls, for tool environments
whose tools must see each other's files and variables during a rollout. With ``warm``, runs and
sessions use pre-started sandboxes instead (`verifiers.sandbox.warm`), reset between uses.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import errno
import functools
import json
import os
import stat
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from verifiers.sandbox.backends import WORKDIR, Backend, get_backend, sandbox_root
from verifiers.sandbox.binds import readable_binds
from verifiers.sandbox.packages import PACKAGES_DIR, host_package_binds
from verifiers.sandbox.process import ProcessOutcome, kill_tree, poll_flag, run_process, wait_exit
from verifiers.sandbox.types import KillReason, Limits, RunResult, SandboxError
from verifiers.sandbox.warm import WarmLease, WarmPool, WarmProcess
from verifiers.sandbox.workdirs import remove_tree as _remove_tree
from verifiers.sandbox.workdirs import work_dir_exceeds
from verifiers.utils.async_utils import wait_for

__all__ = ["Files", "Sandbox", "SandboxSession", "run_sync"]

Files = Mapping[str, str | bytes]
T = TypeVar("T")

_REPL_SOURCE = (Path(__file__).with_name("_repl.py")).read_text()
_MIB = 1024 * 1024
_INLINE_PROGRAM_MAX = 100_000  # bytes; a single argv string may hold 128 KiB on Linux
_MEMORY_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _safe_relative(path: str) -> PurePosixPath:
    """A work-dir-relative path, refusing anything that would land outside the work dir."""
    p = PurePosixPath(path)
    if p.is_absolute():
        try:
            p = p.relative_to(WORKDIR)
        except ValueError:
            raise ValueError(f"sandbox file paths must be relative or under {WORKDIR}: {path!r}") from None
    if not p.parts or any(part in ("..", "") for part in p.parts):
        raise ValueError(f"invalid sandbox file path: {path!r}")
    return p


def _classify(
    exit_code: int, stderr: bytes, reason: KillReason | None, duration: float, cpu: int | None
) -> KillReason | None:
    if reason is not None or exit_code == 0:
        return reason
    if exit_code == 128 + 24:  # SIGXCPU: the CPU-seconds limit
        return "timeout"
    if exit_code == 137 and cpu is not None and duration >= cpu:
        return "timeout"  # the CPU limit's hard SIGKILL
    if exit_code == 137:
        return "memory"  # nothing of ours killed it: the kernel's OOM killer did
    if any(m in stderr[-4096:] for m in _MEMORY_MARKERS):
        return "memory"
    return None


class Sandbox:
    """Runs untrusted code in isolation. Stateless between runs; safe to share and to use concurrently.

    Args:
        backend: ``"bwrap"`` (default; also taken from ``VF_SANDBOX_BACKEND``), ``"nsjail"``, or
            ``"subprocess"`` (no isolation, development only, warns on every run).
        limits: default `Limits` (or a dict of fields to change); each run may override them.
        timeout: default wall-clock seconds per run (and per session call).
        python: the interpreter inside the sandbox (a host path under a read-only mount).
        env: extra environment variables inside the sandbox.
        ro_binds: extra host paths to mount read-only, ``{host_path: sandbox_path}``. Never mount
            secrets or the project.
        python_packages: host-installed packages (e.g. ``["numpy", "sympy"]``) to make importable
            inside, mounted read-only with their requirements (see `host_package_binds`).
        warm: one-shot runs (`run`) use warm sandboxes (pre-started, reset between uses; see
            `verifiers.sandbox.warm`) by default. None: `run` is cold unless asked, and
            `run_python_tests` and `session(warm=None)` are warm (``VF_SANDBOX_WARM=0`` turns that
            off); False: never warm. Only backends that can host them (bwrap) go warm; others, and
            runs whose limits exceed the sandbox's defaults, run cold.
        warm_size: how many warm sandboxes at most (default ``VF_SANDBOX_WARM_SIZE``, else one
            per core); they start on first use and stop at `close` or interpreter exit.
    """

    def __init__(
        self,
        backend: str | Backend | None = None,
        *,
        limits: Limits | Mapping[str, Any] | None = None,
        timeout: float = 10.0,
        python: str = "/usr/bin/python3",
        env: Mapping[str, str] | None = None,
        ro_binds: Mapping[str, str] | None = None,
        python_packages: Sequence[str] = (),
        warm: bool | None = None,
        warm_size: int | None = None,
    ) -> None:
        self.backend = get_backend(backend)
        self.limits = Limits().merged(dict(limits) if isinstance(limits, Mapping) else limits)
        self.timeout = timeout
        self.python = python
        self.env = dict(env or {})
        self.ro_binds = dict(ro_binds or {})
        if python_packages:
            self.ro_binds.update(host_package_binds(python_packages, python))
            self.env.setdefault("PYTHONPATH", PACKAGES_DIR)
        self._checked = False
        self._mounted: tuple[tuple[tuple[str, str], ...], dict[str, str]] = ((), {})
        self.warm = warm
        self.warm_size = warm_size
        self._pool: WarmPool | None = None
        self._pool_key: tuple[Any, ...] = ()
        self._pool_lock = threading.Lock()

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def __repr__(self) -> str:
        return f"Sandbox(backend={self.backend.name!r}, timeout={self.timeout})"

    def check(self) -> None:
        """Raise `SandboxUnavailableError` (saying how to fix it) if the backend cannot run here."""
        if not self._checked:
            self.backend.check()
            sweep_stale_workdirs()
            self._checked = True

    def _host_binds(self) -> dict[str, str]:
        """`ro_binds` as the backend mounts them: a source that the sandbox's identity cannot reach
        (inside a private folder) is replaced by its world-readable mirror (see `readable_binds`)."""
        wanted = tuple(self.ro_binds.items())
        if self._mounted[0] != wanted:
            self._mounted = (wanted, readable_binds(self.ro_binds))
        return self._mounted[1]

    async def _host_binds_async(self) -> dict[str, str]:
        """`_host_binds` without blocking the event loop while a mirror is first built."""
        if self._mounted[0] != tuple(self.ro_binds.items()):
            return await asyncio.to_thread(self._host_binds)
        return self._mounted[1]

    # -- warm sandboxes ------------------------------------------------------------------------

    def warm_by_default(self, requested: bool | None = None) -> bool:
        """Whether a caller that prefers warm sandboxes (``requested`` None) gets them: not when
        this sandbox was built with ``warm=False``, ``VF_SANDBOX_WARM=0`` is set, or the backend
        cannot host them."""
        if requested is not None:
            return requested and self.backend.warm_capable
        if self.warm is not None:
            return self.warm and self.backend.warm_capable
        return os.environ.get("VF_SANDBOX_WARM", "1").strip() != "0" and self.backend.warm_capable

    @property
    def pool(self) -> WarmPool:
        """This sandbox's warm pool, created on first use (and again, after closing the old one,
        when the interpreter, environment, mounts or default limits changed)."""
        key = (self.python, tuple(self.env.items()), tuple(self.ro_binds.items()), self.limits)
        with self._pool_lock:
            old = None
            if self._pool is not None and (self._pool_key != key or self._pool.closed):
                old, self._pool = self._pool, None
            if self._pool is None:
                self._pool = WarmPool(self, self.warm_size)
                self._pool_key = key
            pool = self._pool
        if old is not None:
            old.close()
        return pool

    def close(self) -> None:
        """Stop this sandbox's warm sandboxes (if any). The sandbox stays usable; a later warm run
        starts new ones."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- one-shot runs -------------------------------------------------------------------------

    async def run(
        self,
        command: str | Sequence[str] | None = None,
        *,
        python: str | None = None,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        warm: bool | None = None,
    ) -> RunResult:
        """Run a shell command (a string, run by bash), an argv list, or a Python program (``python=``).

        ``files`` are written into the fresh work dir first (paths relative to it). The work dir and
        every process of the run are gone when this returns, raises, or is cancelled.
        ``warm``: run it in a warm sandbox (default: as the constructor's ``warm`` says; True
        falls back to a cold run where a warm one cannot be had, see `Sandbox`).
        """
        self.check()
        if warm is None:
            warm = self.warm is True
        lim = self._limits(limits)
        if warm and self.backend.warm_capable and self.pool.accepts(lim):
            wall = self.timeout if timeout is None else timeout
            outcome = await self.pool.run(
                command,
                python=python,
                files=files,
                stdin=stdin.encode() if isinstance(stdin, str) else stdin,
                timeout=wall,
                limits=lim,
                env=env,
            )
            return _result(outcome, lim.cpu_limit(wall))
        workdir = self._new_workdir()
        try:
            self._write_files(workdir, files or {})
            return await self._run_in(workdir, command, python, stdin, timeout, limits, env, session=False)
        finally:
            _remove_tree(workdir)

    def run_sync(self, command: str | Sequence[str] | None = None, **kwargs: Any) -> RunResult:
        """`run` for synchronous callers."""
        return run_sync(self.run(command, **kwargs))

    async def run_python(self, code: str, **kwargs: Any) -> RunResult:
        """Shorthand for ``run(python=code, ...)``."""
        return await self.run(python=code, **kwargs)

    # -- sessions ------------------------------------------------------------------------------

    def session(
        self,
        *,
        files: Files | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        timeout: float | None = None,
        warm: bool | None = None,
    ) -> SandboxSession:
        """A persistent work dir plus a lazily started Python interpreter; use ``async with``.

        ``warm``: hold one warm sandbox for the session's life (its interpreter starts by a fork
        instead of a new sandbox and interpreter; the sandbox is reset and reused after `close`).
        None: as the constructor's ``warm`` says. Sessions whose limits exceed the sandbox's
        defaults are cold."""
        use = (self.warm is True if warm is None else warm) and self.backend.warm_capable
        return SandboxSession(self, files=files, limits=limits, timeout=timeout, warm=use)

    # -- internals -----------------------------------------------------------------------------

    def _limits(self, overrides: Limits | Mapping[str, Any] | None) -> Limits:
        return self.limits.merged(dict(overrides) if isinstance(overrides, Mapping) else overrides)

    def _new_workdir(self, kind: str = "run") -> Path:
        # the owner's pid in the name lets a later process remove what a killed one left behind
        path = Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=sandbox_root()))
        self.backend.prepare_workdir(path)
        return path

    def _write_files(self, workdir: Path, files: Files) -> None:
        owner = _owner(workdir)
        for name, content in files.items():
            rel = _safe_relative(name)
            data = content.encode() if isinstance(content, str) else bytes(content)
            fd = _open_beneath(workdir, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, owner=owner)
            with os.fdopen(fd, "wb") as f:
                f.write(data)

    def _argv(self, workdir: Path, command: str | Sequence[str] | None, python: str | None) -> list[str]:
        if (command is None) == (python is None):
            raise ValueError("give exactly one of `command` and `python`")
        if python is not None:
            if len(python.encode()) <= _INLINE_PROGRAM_MAX:
                return [self.python, "-c", python]
            self._write_files(workdir, {".program.py": python})
            return [self.python, ".program.py"]
        if isinstance(command, str):
            return ["/bin/bash", "-c", command]
        assert command is not None
        return list(command)

    async def _run_in(
        self,
        workdir: Path,
        command: str | Sequence[str] | None,
        python: str | None,
        stdin: str | bytes | None,
        timeout: float | None,
        limits: Limits | Mapping[str, Any] | None,
        env: Mapping[str, str] | None,
        *,
        session: bool,
        rw_binds: Mapping[str, str] | None = None,
    ) -> RunResult:
        lim = self._limits(limits)
        wall = self.timeout if timeout is None else timeout
        cpu = lim.cpu_limit(wall)
        argv = self._argv(workdir, command, python)
        ro_binds = await self._host_binds_async()
        launch = self.backend.launch(
            argv,
            workdir=workdir,
            limits=lim,
            cpu_seconds=cpu,
            env={**self.env, **(env or {})},
            ro_binds=ro_binds,
            rw_binds=rw_binds,
        )
        data = stdin.encode() if isinstance(stdin, str) else stdin
        outcome = await run_process(
            launch,
            stdin=data,
            timeout=wall,
            output_cap=lim.output_bytes,
            over_limit=functools.partial(work_dir_exceeds, workdir, lim.disk_mb * _MIB),
        )
        return _result(outcome, cpu)


def _result(outcome: ProcessOutcome, cpu: int | None) -> RunResult:
    reason = _classify(outcome.exit_code, outcome.stderr, outcome.kill_reason, outcome.duration_s, cpu)
    return RunResult(
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        exit_code=outcome.exit_code,
        duration_s=outcome.duration_s,
        killed=reason is not None,
        kill_reason=reason,
    )


class _DiskLimitExceeded(Exception):
    pass


def sweep_stale_workdirs() -> list[Path]:
    """Delete work dirs whose owning process is gone (it was killed before it could clean up)."""
    removed = []
    for path in [*sandbox_root().glob("run-*-*"), *sandbox_root().glob("warm-*-*")]:
        pid = path.name.split("-")[1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or a reused pid: leave it alone)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _remove_tree(path)
        removed.append(path)
    return removed


def _open_beneath(root: Path, rel: PurePosixPath, flags: int, owner: tuple[int, int] | None = None) -> int:
    """Open ``root/rel`` without following any symlink on the way (files in a work dir the sandbox
    has written to are untrusted: a planted ``d -> /etc`` must not turn ``d/shadow`` into the host's
    file). With ``os.O_CREAT``, missing folders are created (and given to ``owner``)."""
    creating = bool(flags & os.O_CREAT)
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in rel.parts[:-1]:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except FileNotFoundError:
                if not creating:
                    raise
                os.mkdir(part, 0o755, dir_fd=dir_fd)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                if owner is not None:
                    os.fchown(next_fd, *owner)
            os.close(dir_fd)
            dir_fd = next_fd
        # O_NONBLOCK: a FIFO planted by the sandbox must not hold this open() (and the event loop)
        # waiting for a writer or reader; only regular files are read or written
        fd = os.open(rel.parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644, dir_fd=dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file (the sandbox put something else there)", str(rel))
        os.set_blocking(fd, True)
        if creating and owner is not None:
            os.fchown(fd, *owner)
        return fd
    finally:
        os.close(dir_fd)


def _owner(workdir: Path) -> tuple[int, int] | None:
    """The (uid, gid) files written for the sandbox must belong to, if not ours."""
    st = workdir.stat()
    if st.st_uid != os.geteuid():
        return st.st_uid, st.st_gid
    return None


async def _release(proc: asyncio.subprocess.Process) -> None:
    """After a kill: wait for the child watcher to see the exit, then close our pipe ends. Closing
    first would make the transport reap the process itself, racing the watcher."""
    await wait_exit(proc, 5.0)
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


# Sessions still open at interpreter exit are closed then (their processes killed, dirs removed).
_open_sessions: weakref.WeakSet[SandboxSession] = weakref.WeakSet()


@atexit.register
def _close_leftover_sessions() -> None:
    for session in list(_open_sessions):
        session._close_now()


class SandboxSession:
    """A work dir that persists across calls, plus one persistent Python interpreter started on demand.

    ``run(...)`` runs one-shot commands (a fresh sandbox each time) in the shared work dir, so files
    persist between calls but processes do not. ``run_python(code)`` sends a cell to a long-lived
    interpreter in its own sandbox: variables, imports and functions persist across calls, and a
    trailing expression's ``repr`` comes back as ``RunResult.value``. A cell that passes its
    timeout kills the interpreter (its state is lost; the next cell starts a fresh one and says so
    in its stderr). ``close()`` (or leaving ``async with``, also on error or cancellation) kills
    every process and deletes the work dir.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        files: Files | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        timeout: float | None = None,
        warm: bool = False,
    ) -> None:
        self.sandbox = sandbox
        self.limits = sandbox._limits(limits)
        self.warm = warm and sandbox.backend.warm_capable
        self._lease: WarmLease | None = None
        self.timeout = sandbox.timeout if timeout is None else timeout
        self._initial_files = dict(files or {})
        self._workdir: Path | None = None
        self._proc: asyncio.subprocess.Process | WarmProcess | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr_tail = bytearray()
        self._lock = asyncio.Lock()
        self._closed = False
        self.restarts = 0
        self._lost_state = False
        self.cells = 0
        self._reapers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SandboxSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def workdir(self) -> Path:
        """The host path of the work dir (for reading results after a run)."""
        if self._workdir is None:
            raise SandboxError("the session is not started")
        return self._workdir

    async def start(self) -> None:
        """Create the work dir and write the initial files (the interpreter starts on first use)."""
        if self._closed:
            raise SandboxError("the session is closed")
        if self._workdir is not None:
            return
        self.sandbox.check()
        if self.warm and self.sandbox.pool.accepts(self.limits):
            self._lease = await self.sandbox.pool.lease()
            self._workdir = self._lease.workdir
        else:
            self._workdir = self.sandbox._new_workdir()
        _open_sessions.add(self)
        self.sandbox._write_files(self._workdir, self._initial_files)

    async def write_files(self, files: Files) -> None:
        await self.start()
        self.sandbox._write_files(self.workdir, files)

    async def read_file(self, path: str) -> bytes:
        """Read a file the sandbox wrote (refusing links, which could point at host files)."""
        fd = _open_beneath(self.workdir, _safe_relative(path), os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    async def run(
        self,
        command: str | Sequence[str] | None = None,
        *,
        python: str | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        rw_binds: Mapping[str, str] | None = None,
    ) -> RunResult:
        """A one-shot command in this session's work dir (files persist, processes do not).

        ``rw_binds`` (``{host_path: sandbox_path}``) are mounted writable for this call only (a
        setup step filling a package cache); the source must be writable by the sandboxed uid and
        must never be the project or hold secrets."""
        await self.start()
        wall = self.timeout if timeout is None else timeout
        lim = self.limits if limits is None else self.limits.merged(dict(limits) if isinstance(limits, Mapping) else limits)
        if self._lease is not None and not rw_binds and self._lease.pool.accepts(lim):
            # in the leased warm sandbox, unless it is busy (the interpreter runs): then cold
            outcome = await self._lease.run(
                command,
                python,
                stdin=stdin.encode() if isinstance(stdin, str) else stdin,
                timeout=wall,
                limits=lim,
                env=env,
            )
            if outcome is not None:
                return _result(outcome, lim.cpu_limit(wall))
        return await self.sandbox._run_in(
            self.workdir, command, python, stdin, wall, lim, env, session=True, rw_binds=rw_binds
        )

    async def run_python(self, code: str, *, timeout: float | None = None) -> RunResult:
        """Run a cell in the persistent interpreter (state persists across calls)."""
        await self.start()
        async with self._lock:
            return await self._cell(code, self.timeout if timeout is None else timeout)

    async def close(self) -> None:
        """Kill the interpreter and delete the work dir (a warm session's sandbox is reset and
        handed back instead). Idempotent; safe to call when cancelled."""
        lease, self._lease = self._lease, None
        if lease is None:
            self._close_now()
        else:
            self._closed = True
            self._kill_interpreter()
            _open_sessions.discard(self)
        reapers = list(self._reapers)
        try:
            if reapers:
                with contextlib.suppress(Exception):
                    await asyncio.shield(asyncio.gather(*reapers, return_exceptions=True))
            if lease is not None:
                await lease.release()
        except BaseException:
            if lease is not None:
                lease.discard()
            raise

    # -- internals -----------------------------------------------------------------------------

    def _close_now(self) -> None:
        self._closed = True
        self._kill_interpreter()
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.discard()  # no event loop to reset it with (interpreter exit)
        elif self._workdir is not None:
            _remove_tree(self._workdir)
        _open_sessions.discard(self)

    def _kill_interpreter(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if isinstance(proc, WarmProcess):
                proc.kill()
            elif proc.returncode is None:
                kill_tree(proc.pid)
            try:
                loop = asyncio.get_running_loop()
                reaper = loop.create_task(proc.finish() if isinstance(proc, WarmProcess) else _release(proc))
            except RuntimeError:  # no loop (interpreter exit): the kill is all that is left to do
                pass
            else:
                self._reapers.add(reaper)
                reaper.add_done_callback(self._reapers.discard)
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            self._stderr_task = None

    async def _start_interpreter(self) -> None:
        if self._lease is not None:
            self._proc = await self._lease.start_python(_REPL_SOURCE, env={}, limits=self.limits)
        else:
            ro_binds = await self.sandbox._host_binds_async()
            launch = self.sandbox.backend.launch(
                [self.sandbox.python, "-u", "-c", _REPL_SOURCE],
                workdir=self.workdir,
                limits=self.limits,
                cpu_seconds=self.limits.cpu_limit(None),
                env=self.sandbox.env,
                ro_binds=ro_binds,
            )
            self._proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                **launch.popen_kwargs,
            )
        self._stderr_tail.clear()
        self._stderr_task = asyncio.create_task(self._drain_stderr(self._proc))
        ready = await wait_for(self._receive(), timeout=max(30.0, self.timeout))
        if ready.get("status") != "ready":
            raise SandboxError(f"the sandboxed Python interpreter did not start: {ready}")

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            self._stderr_tail += chunk
            del self._stderr_tail[:-8192]

    async def _receive(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            header = await self._proc.stdout.readexactly(4)
            (size,) = struct.unpack(">I", header)
            if size > 8 * self.limits.output_bytes + 65536:
                raise SandboxError("the sandboxed interpreter sent an oversized message")
            return json.loads(await self._proc.stdout.readexactly(size))
        except asyncio.IncompleteReadError:
            raise EOFError from None

    async def _reply(self, timeout: float) -> dict[str, Any]:
        """The interpreter's answer to a cell; raises TimeoutError, or _DiskLimitExceeded when the
        work dir grows past ``disk_mb`` meanwhile."""
        receive = asyncio.create_task(self._receive())
        over = asyncio.Event()
        check = functools.partial(work_dir_exceeds, self.workdir, self.limits.disk_mb * _MIB)
        watch = asyncio.create_task(poll_flag(check, over))
        try:
            done, _ = await asyncio.wait(
                {receive, watch}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if receive in done:
                return receive.result()
            if over.is_set():
                raise _DiskLimitExceeded
            raise TimeoutError
        finally:
            for task in (receive, watch):
                task.cancel()

    async def _cell(self, code: str, timeout: float) -> RunResult:
        started = time.perf_counter()
        note = ""
        if self._proc is None or self._proc.returncode is not None:
            if self._lost_state:
                self.restarts += 1
                note = "[sandbox] the Python session was restarted; variables from earlier calls are gone\n"
            try:
                await self._start_interpreter()
            except (EOFError, TimeoutError, OSError) as exc:
                self._kill_interpreter()
                detail = self._stderr_tail.decode("utf-8", "replace").strip()
                raise SandboxError(
                    f"the sandboxed Python interpreter did not start: {exc!r} {detail}"
                ) from exc
            self._lost_state = False
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        body = json.dumps({"code": code, "cap": self.limits.output_bytes}).encode()
        try:
            proc.stdin.write(struct.pack(">I", len(body)) + body)
            await proc.stdin.drain()
            reply = await self._reply(timeout)
        except TimeoutError:
            self._kill_interpreter()
            self._lost_state = True
            return RunResult("", note, 137, time.perf_counter() - started, True, "timeout")
        except _DiskLimitExceeded:
            self._kill_interpreter()
            self._lost_state = True
            return RunResult("", note, 137, time.perf_counter() - started, True, "output")
        except (EOFError, BrokenPipeError, ConnectionResetError, ValueError, SandboxError):
            # the interpreter died mid-cell (os._exit, a signal, a broken protocol)
            with contextlib.suppress(Exception):
                await (proc.wait(2.0) if isinstance(proc, WarmProcess) else wait_exit(proc, 2.0))
            code_ = proc.returncode
            self._kill_interpreter()
            self._lost_state = True
            status = 137 if code_ is None else (128 - code_ if code_ < 0 else code_)
            reason: KillReason | None = "memory" if status == 137 else None
            detail = self._stderr_tail.decode("utf-8", "replace")
            return RunResult(
                "", note + detail, status or 1, time.perf_counter() - started, reason is not None, reason
            )
        except BaseException:
            # cancelled (or worse) mid-cell: the interpreter's position in the protocol is unknown
            self._kill_interpreter()
            self._lost_state = True
            raise
        self.cells += 1
        reason = "memory" if reply.get("memory") else ("output" if reply.get("truncated") else None)
        return RunResult(
            stdout=reply.get("stdout", ""),
            stderr=note + reply.get("stderr", ""),
            exit_code=0 if reply.get("status") == "ok" else 1,
            duration_s=time.perf_counter() - started,
            killed=reason is not None,
            kill_reason=reason,
            value=reply.get("value"),
        )
