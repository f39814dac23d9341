"""Warm sandboxes: pre-started bubblewrap sandboxes, reset between uses, never sharing state.

A cold run pays for a new sandbox and a new interpreter every time (bubblewrap's namespaces and
mounts, then Python's start-up: tens of milliseconds). A `WarmPool` keeps a few sandboxes running
instead. Each runs a small supervisor (``_warm_init.py``) as PID 1 of its own PID namespace; per job
it forks a fresh child that sets the job's limits and runs the job (a Python job runs in that child
without a new interpreter start; a command is exec'd), then it resets the sandbox: every other
process killed and reaped, the work folder, ``/tmp`` and ``/dev/shm`` emptied and their roots
restored, System V IPC removed, its own limits checked. Only a reset that proves a clean state puts
the sandbox back in the pool; any doubt (a failed reset, a job that would not die, a supervisor that
stops answering, a cancelled job) throws the whole sandbox away, and a fresh one is started on
demand.

What a job cannot share with the next one, and why:

* processes: all killed by ``kill(-1)`` from PID 1 (it reaches exactly the sandbox's namespace);
  the supervisor checks ``/proc`` holds nothing else before reuse;
* files: the only writable places (work folder, ``/tmp``, ``/dev/shm``) are emptied, and the host
  checks the work folder is empty too;
* the supervisor itself: PID 1 receives no signal from inside its namespace it has no handler for
  (SIGKILL and SIGSTOP included), it is not dumpable (no ptrace, no ``/proc/1/mem``, no
  ``pidfd_getfd``), and a job that lowers its limits, priority or CPU set gets the sandbox discarded;
* kernel keyrings (shared by one user namespace): a seccomp filter, loaded by bubblewrap before the
  supervisor starts, makes ``add_key``, ``request_key`` and ``keyctl`` fail with EPERM;
* POSIX message queues: ``RLIMIT_MSGQUEUE`` is 0 for jobs; System V IPC objects are removed;
* environment variables and Python state: each job is a fresh fork of a supervisor that never ran
  job code, so what a job changes dies with it.

Per-job limits are those of a cold run (address space, CPU seconds, processes, file size, open
files, output bytes, work-folder disk, wall clock); ``/tmp`` and ``/dev/shm`` are sized when the
sandbox starts, and a job asking for limits above the pool's runs cold instead (see
`WarmPool.accepts`).
"""

from __future__ import annotations

import array
import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import json
import os
import platform
import queue
import socket
import struct
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifiers.sandbox.backends import _env_items
from verifiers.sandbox.process import ProcessOutcome, kill_tree, poll_flag
from verifiers.sandbox.types import KillReason, Limits, SandboxError, SandboxUnavailableError
from verifiers.sandbox.workdirs import remove_tree, work_dir_exceeds
from verifiers.utils.async_utils import wait_for

if TYPE_CHECKING:
    from verifiers.sandbox.sandbox import Sandbox

__all__ = ["WarmPool", "default_pool_size", "keyring_filter"]

_INIT_SOURCE = Path(__file__).with_name("_warm_init.py").read_text()
_MIB = 1024 * 1024
_READY_TIMEOUT_S = 30.0
_KILL_GRACE_S = 5.0  # how long a supervisor may take to kill a job and reset before it is discarded
_RESET_TIMEOUT_S = 10.0
_DRAIN_GRACE_S = 1.0
_MAX_MESSAGE = 160 * 1024  # a SOCK_SEQPACKET message must fit the socket's send buffer (~208 KiB)
_INLINE_MAX = 96 * 1024  # programs whose JSON form is longer travel as a file in the work folder
_CHUNK = 65536

class _Spawner:
    """One long-lived daemon thread that starts (and gracefully stops) every warm sandbox.

    The backend's parent-death signal fires when the *thread* that started it ends, and callers
    may live on short-lived threads (`run_sync`). A daemon thread: it never holds the interpreter
    open, and environment checks do not count it as something left running."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Any, tuple[Any, ...]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="vf-warm-sandbox", daemon=True)
                self._thread.start()
        return future

    def _work(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)


_spawner = _Spawner()


def default_pool_size() -> int:
    """``VF_SANDBOX_WARM_SIZE``, else two warm sandboxes per core.

    Two per core because a sandbox is busy for its job's round trip (host -> supervisor -> job ->
    reset -> host), not only while its job computes: on 2 cores, 4 sandboxes ran the HumanEval
    benchmark about 1.5-2x faster than 2 (benchmarks/sandbox.py); an idle one costs about 10 MB."""
    raw = os.environ.get("VF_SANDBOX_WARM_SIZE", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"VF_SANDBOX_WARM_SIZE must be a positive integer, not {raw!r}")
        return int(raw)
    return 2 * max(1, os.cpu_count() or 1)


# -- the seccomp filter ----------------------------------------------------------------------------

# (AUDIT_ARCH, syscall-number mask, numbers of add_key, request_key, keyctl)
_KEYRING_SYSCALLS = {
    "x86_64": [(0xC000003E, 0xBFFFFFFF, (248, 249, 250)), (0x40000003, 0xFFFFFFFF, (286, 287, 288))],
    "aarch64": [(0xC00000B7, 0xFFFFFFFF, (217, 218, 219))],
}
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_EPERM = 0x00050000 | 1
_LD_W_ABS, _JEQ_K, _AND_K, _RET_K = 0x20, 0x15, 0x54, 0x06


def keyring_filter(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp program (``struct sock_filter`` array) that fails the kernel-keyring
    system calls with EPERM and allows everything else; None on an architecture not listed (warm
    sandboxes are then not offered: a user namespace's keyrings would be shared between jobs)."""
    arches = _KEYRING_SYSCALLS.get(machine or platform.machine())
    if arches is None:
        return None
    insns: list[tuple[int, int, int, int]] = []
    for arch, mask, numbers in arches:
        block = [(_LD_W_ABS, 0, 0, 0), (_AND_K, 0, 0, mask)]
        for i, number in enumerate(numbers):
            # equal: skip the remaining comparisons and the ALLOW, land on the EPERM
            block.append((_JEQ_K, len(numbers) - i, 0, number))
        block += [(_RET_K, 0, 0, _SECCOMP_RET_ALLOW), (_RET_K, 0, 0, _SECCOMP_RET_EPERM)]
        # arch check: on mismatch skip this whole block
        insns += [(_LD_W_ABS, 0, 0, 4), (_JEQ_K, 0, len(block), arch), *block]
    insns.append((_RET_K, 0, 0, _SECCOMP_RET_ALLOW))
    return b"".join(struct.pack("=HBBI", *insn) for insn in insns)


# -- one warm sandbox ------------------------------------------------------------------------------


class _Dead(Exception):
    """The sandbox can no longer be trusted or reached; it must be discarded."""


class WarmSandbox:
    """One running sandbox with its supervisor, used by one job at a time."""

    def __init__(self, proc: subprocess.Popen[bytes], ctl: socket.socket, workdir: Path) -> None:
        self.proc = proc
        self.ctl = ctl
        self.workdir = workdir
        self.jobs = 0
        self.dead = False
        self.problem: str | None = None  # why it was discarded

    def discard(self, graceful: bool = False) -> None:
        """Kill the sandbox (its PID namespace dies with the supervisor) and delete its work folder.

        ``graceful`` (a pool closing, a surplus sandbox): first close the control socket, on which
        the supervisor kills everything and exits (so the host reaps it, with its CPU accounted),
        and kill it only if it has not after a moment. A sandbox in doubt is killed at once."""
        if self.dead:
            return
        self.dead = True
        with contextlib.suppress(Exception):
            self.ctl.close()
        if graceful:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        remove_tree(self.workdir)

    async def run(
        self,
        job: dict[str, Any],
        *,
        env: Mapping[str, str],
        limits: Limits,
        cpu_seconds: int | None,
        stdin: bytes | None,
        timeout: float | None,
        keep_workdir: bool = False,
    ) -> ProcessOutcome:
        """Run one job. Raises `_Dead` only when the job could not be started (the sandbox died
        while idle). ``keep_workdir``: the job belongs to a lease, whose files stay. Afterwards
        ``self.dead`` says whether the sandbox had to be discarded (its reset failed, or it was
        lost during the job, which then reports exit status 137)."""
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        stdin_w, out_r, err_r = self.start(job, env=env, limits=limits, cpu_seconds=cpu_seconds, keep_workdir=keep_workdir)
        host_fds = [out_r, err_r]  # stdin_w belongs to the feeder
        try:
            buffers = (bytearray(), bytearray())
            written = 0
            over = asyncio.Event()
            eofs = [loop.create_future(), loop.create_future()]

            def on_output(fd: int, index: int) -> None:
                nonlocal written
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                if not chunk:
                    loop.remove_reader(fd)
                    if not eofs[index].done():
                        eofs[index].set_result(None)
                    return
                room = limits.output_bytes - written
                if room > 0:
                    buffers[index].extend(chunk[:room])
                written += len(chunk)
                if written > limits.output_bytes:
                    over.set()

            for index, fd in enumerate((out_r, err_r)):
                os.set_blocking(fd, False)
                loop.add_reader(fd, on_output, fd, index)
            feeder = _feed(loop, stdin_w, stdin or b"")
            reply = self._reply(loop)
            disk = asyncio.ensure_future(
                poll_flag(functools.partial(work_dir_exceeds, self.workdir, limits.disk_mb * _MIB), over)
            )
            overflow = asyncio.ensure_future(over.wait())
            reason: KillReason | None = None
            answer: dict[str, Any] | None = None
            try:
                done, _ = await asyncio.wait({reply, overflow}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if reply not in done:
                    reason = "output" if overflow in done else "timeout"
                    self._kill()
                    await asyncio.wait({reply}, timeout=_KILL_GRACE_S)
                ended = time.perf_counter()
                if reply.done() and reply.exception() is None:
                    answer = reply.result()
                else:  # the supervisor died or hung: the job's fate is the sandbox's
                    self.problem = str(reply.exception()) if reply.done() else "its supervisor did not stop the job"
                    self.discard()
                _, pending = await asyncio.wait(eofs, timeout=_DRAIN_GRACE_S)
                if pending and not self.dead:
                    self.problem = "the job's output stayed open after its reset"
                    self.discard()
            finally:
                for task in (disk, overflow, reply, feeder, *eofs):
                    task.cancel()
                for fd in (out_r, err_r):
                    loop.remove_reader(fd)
            if over.is_set():
                reason = "output"
            if answer is None:
                stderr = bytes(buffers[1]) + f"\n[sandbox] the warm sandbox was lost during the run: {self.problem}\n".encode()
                return ProcessOutcome(bytes(buffers[0]), stderr, 137, ended - started, reason)
            if not self.dead:
                if answer.get("reset") is not None:
                    self.problem = f"it could not be reset: {answer['reset']}"
                    self.discard()
                elif not keep_workdir and os.listdir(self.workdir):
                    self.problem = "its work folder is not empty after its reset"
                    self.discard()
            return ProcessOutcome(
                stdout=bytes(buffers[0]),
                stderr=bytes(buffers[1]),
                exit_code=int(answer["exit"]),
                duration_s=ended - started,
                kill_reason=reason,
            )
        except BaseException:
            self.discard()
            raise
        finally:
            for fd in host_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def start(
        self,
        job: dict[str, Any],
        *,
        env: Mapping[str, str],
        limits: Limits,
        cpu_seconds: int | None,
        keep_workdir: bool = False,
    ) -> tuple[int, int, int]:
        """Hand a job to the supervisor; return the host ends of its stdin, stdout and stderr
        (non-inheritable pipes). Raises `_Dead` when the supervisor cannot be reached."""
        request = {
            "job": job,
            "env": dict(_env_items(env)),
            "limits": {
                "as": limits.memory_mb * _MIB,
                "nproc": limits.processes,
                "fsize": limits.file_size_mb * _MIB,
                "nofile": limits.open_files,
                "cpu": cpu_seconds,
            },
            "keep_workdir": keep_workdir,
        }
        message = json.dumps(request).encode()
        if len(message) > _MAX_MESSAGE:
            raise SandboxError(f"a warm sandbox job is limited to {_MAX_MESSAGE} bytes of program and environment")
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.ctl.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [stdin_r, out_w, err_w]))])
        except OSError as exc:
            for fd in (stdin_w, out_r, err_r):
                os.close(fd)
            raise _Dead(f"the warm sandbox's supervisor is gone: {exc}") from None
        finally:
            for fd in (stdin_r, out_w, err_w):
                os.close(fd)
        self.jobs += 1
        return stdin_w, out_r, err_r

    async def reset(self) -> None:
        """A full reset (the end of a lease); the sandbox is discarded when it fails."""
        loop = asyncio.get_running_loop()
        try:
            self.ctl.send(b'{"reset": true}')
        except OSError:
            self.problem = "its supervisor is gone"
            self.discard()
            return
        reply = self._reply(loop)
        try:
            answer = await wait_for(reply, _RESET_TIMEOUT_S)
        except BaseException as exc:
            self.problem = f"its reset did not answer: {exc!r}"
            self.discard()
            if not isinstance(exc, Exception):
                raise
            return
        if answer.get("reset") is not None or os.listdir(self.workdir):
            self.problem = f"it could not be reset: {answer.get('reset') or 'its work folder is not empty'}"
            self.discard()

    def _kill(self) -> None:
        with contextlib.suppress(OSError):
            self.ctl.send(b'{"kill": true}')

    def _reply(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        fd = self.ctl.fileno()

        def on_readable() -> None:
            try:
                data = self.ctl.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            loop.remove_reader(fd)
            if future.done():
                return
            if not data:
                future.set_exception(_Dead("the warm sandbox's supervisor died"))
                return
            try:
                future.set_result(json.loads(data))
            except ValueError:
                future.set_exception(_Dead("the warm sandbox's supervisor sent garbage"))

        loop.add_reader(fd, on_readable)
        future.add_done_callback(lambda _: loop.remove_reader(fd))
        return future


class WarmProcess:
    """A long-running job (a session's Python interpreter) in a leased warm sandbox, shaped like
    the parts of ``asyncio.subprocess.Process`` a session uses: ``stdin`` (a StreamWriter),
    ``stdout`` and ``stderr`` (StreamReaders), ``returncode`` (set once the supervisor reports the
    exit). ``kill()`` asks the supervisor to kill it; ``finish()`` waits for that and closes the
    pipes."""

    pid = None

    def __init__(self, lease: WarmLease) -> None:
        self.lease = lease
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter
        self.stdout: asyncio.StreamReader
        self.stderr: asyncio.StreamReader
        self._transports: list[asyncio.BaseTransport] = []
        self._exited: asyncio.Future[dict[str, Any]]

    async def _open(self, stdin_w: int, out_r: int, err_r: int) -> None:
        loop = asyncio.get_running_loop()
        self._exited = self.lease.ws._reply(loop)
        self._exited.add_done_callback(self._on_exit)
        readers = []
        for fd in (out_r, err_r):
            reader = asyncio.StreamReader(limit=2**20)
            transport, _ = await loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r), os.fdopen(fd, "rb", buffering=0)
            )
            self._transports.append(transport)
            readers.append(reader)
        self.stdout, self.stderr = readers
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdin_w, "wb", buffering=0)
        )
        self._transports.append(transport)
        self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)  # type: ignore[arg-type]

    def _on_exit(self, future: asyncio.Future[dict[str, Any]]) -> None:
        if future.cancelled():
            return
        if future.exception() is not None:
            self.lease.broken = str(future.exception())
            self.returncode = 137
            return
        answer = future.result()
        self.returncode = int(answer.get("exit", 137))
        if answer.get("reset") is not None:
            self.lease.broken = f"it could not be reset: {answer['reset']}"

    def kill(self) -> None:
        if self.returncode is None:
            self.lease.ws._kill()

    async def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(asyncio.TimeoutError, _Dead):
            await wait_for(asyncio.shield(self._exited), timeout)
        return self.returncode

    async def finish(self) -> None:
        """After `kill`: wait for the supervisor's report (a sandbox that does not give one is
        discarded) and close the pipes."""
        try:
            if await self.wait(_KILL_GRACE_S) is None:
                self.lease.broken = "its supervisor did not stop the interpreter"
                self._exited.cancel()
        finally:
            for transport in self._transports:
                transport.close()


class WarmLease:
    """One warm sandbox held by one owner (a rollout's session) for several jobs. Its work folder
    persists between them (an interpreter restarted after a timeout finds the rollout's files);
    `release` resets it fully and returns it to the pool, or discards it if anything is in doubt."""

    def __init__(self, pool: WarmPool, ws: WarmSandbox) -> None:
        self.pool = pool
        self.ws = ws
        self.broken: str | None = None
        self.released = False
        self._current: WarmProcess | None = None
        self._lock: asyncio.Lock | None = None  # one job at a time (a lease lives on one loop)

    def _job_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def run(
        self,
        command: str | Sequence[str] | None,
        python: str | None,
        *,
        stdin: bytes | None,
        timeout: float | None,
        limits: Limits,
        env: Mapping[str, str] | None,
    ) -> ProcessOutcome | None:
        """A one-shot job in the leased sandbox: its files stay, its processes and ``/tmp`` do not
        (as a cold run on the same work folder). None when the sandbox is busy (the interpreter
        runs, or another job) or lost: the caller then runs it cold."""
        lock = self._job_lock()
        if self.released or self.broken is not None or self._current is not None or lock.locked():
            return None
        async with lock:
            try:
                job = self.pool._job(self.ws, command, python)
                outcome = await self.ws.run(
                    job,
                    env={**self.pool.sandbox.env, **(env or {})},
                    limits=limits,
                    cpu_seconds=limits.cpu_limit(timeout),
                    stdin=stdin,
                    timeout=timeout,
                    keep_workdir=True,
                )
            except _Dead as exc:  # it never started
                self.broken = str(exc)
                return None
            if self.ws.dead:
                self.broken = self.ws.problem or "lost"
            return outcome

    @property
    def workdir(self) -> Path:
        return self.ws.workdir

    async def start_python(self, source: str, *, env: Mapping[str, str], limits: Limits) -> WarmProcess:
        """Start a Python program (the session's interpreter) in this sandbox; one at a time."""
        if self.released:
            raise SandboxError("the warm sandbox lease is released")
        async with self._job_lock():  # a running one-shot job finishes first
            return await self._start_python(source, env, limits)

    async def _start_python(self, source: str, env: Mapping[str, str], limits: Limits) -> WarmProcess:
        if self._current is not None:
            # one job at a time: the supervisor reports the previous one's end first
            previous, self._current = self._current, None
            previous.kill()
            await previous.finish()
        if self.broken is not None or self.ws.dead:
            raise SandboxError(f"the warm sandbox was lost: {self.broken or self.ws.problem}")
        try:
            fds = self.ws.start(
                {"python": source, "unbuffered": True},
                env={**self.pool.sandbox.env, **env},
                limits=limits,
                cpu_seconds=limits.cpu_limit(None),
                keep_workdir=True,
            )
        except _Dead as exc:
            self.broken = str(exc)
            raise SandboxError(str(exc)) from None
        process = self._current = WarmProcess(self)
        try:
            await process._open(*fds)
        except BaseException:
            self.broken = "its pipes could not be opened"
            raise
        return process

    async def release(self) -> None:
        """Reset the sandbox and hand it back (discarded instead when the reset fails, the lease
        is broken, or this is cancelled). Idempotent."""
        if self.released:
            return
        self.released = True
        try:
            if self._current is not None:
                self._current.kill()
                await self._current.finish()
            if self.broken is None and not self.ws.dead:
                await self.ws.reset()
            else:
                self.ws.problem = self.broken
                self.ws.discard()
        except BaseException:
            self.ws.discard()
            raise
        finally:
            self.pool._release(self.ws)

    def discard(self) -> None:
        """Throw the sandbox away now (no event loop needed: interpreter exit, a sync close)."""
        if not self.released:
            self.released = True
            self.ws.discard()
            self.pool._release(self.ws)


def _feed(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> asyncio.Future[None]:
    """Write ``data`` to the job's stdin without blocking, then close it (EOF)."""
    done: asyncio.Future[None] = loop.create_future()
    view = memoryview(data)
    os.set_blocking(fd, False)

    def finish() -> None:
        loop.remove_writer(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
        if not done.done():
            done.set_result(None)

    def pump() -> None:
        nonlocal view
        try:
            while view:
                view = view[os.write(fd, view) :]
        except BlockingIOError:
            return
        except OSError:
            pass  # the job did not read all of its input; that is its business
        finish()

    pump()
    if not done.done():
        loop.add_writer(fd, pump)
        done.add_done_callback(lambda f: f.cancelled() and finish())
    return done


# -- the pool ------------------------------------------------------------------------------------


_pools: weakref.WeakSet[WarmPool] = weakref.WeakSet()


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_pools):
        pool.close()


class WarmPool:
    """Up to ``size`` warm sandboxes for one `Sandbox`'s configuration, started on first use.

    ``run`` leases a sandbox for one job (waiting while all are busy). Usable from any event loop
    and thread (`run_sync` callers included): the sandboxes are plain processes, waited on through
    whichever loop is running. ``close()`` (also at interpreter exit, and when the pool is garbage
    collected) kills every sandbox; the backend's parent-death signal covers a host that is killed.
    """

    def __init__(self, sandbox: Sandbox, size: int | None = None) -> None:
        if not sandbox.backend.warm_capable:
            raise SandboxUnavailableError(
                f"the {sandbox.backend.name} backend cannot host warm sandboxes (bwrap can)"
            )
        self.sandbox = sandbox
        self.size = default_pool_size() if size is None else int(size)
        if self.size < 1:
            raise ValueError("a warm pool needs at least one sandbox")
        self.limits = sandbox.limits
        self.seccomp = keyring_filter()
        if self.seccomp is None:
            raise SandboxUnavailableError(
                f"warm sandboxes need a seccomp filter for this machine ({platform.machine()}), which is not written yet"
            )
        self._lock = threading.Lock()
        self._idle: list[WarmSandbox] = []
        self._live: set[WarmSandbox] = set()
        self._count = 0  # live plus being started
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[WarmSandbox | None]]] = deque()
        self._closed = False
        self.started = 0
        self.discarded = 0
        self._finalizer = weakref.finalize(self, _kill_all, self._live)
        _pools.add(self)

    def __repr__(self) -> str:
        return f"WarmPool(size={self.size}, live={len(self._live)}, idle={len(self._idle)})"

    @property
    def closed(self) -> bool:
        return self._closed

    def accepts(self, limits: Limits) -> bool:
        """Whether a job with these limits can run in this pool's sandboxes: per-job limits can only
        be lowered below the sandbox's, and ``/tmp`` is sized when the sandbox starts."""
        pool = self.limits
        return (
            limits.memory_mb <= pool.memory_mb
            and limits.processes <= pool.processes
            and limits.file_size_mb <= pool.file_size_mb
            and limits.open_files <= pool.open_files
            and limits.tmp_size_mb == pool.tmp_size_mb
        )

    def pids(self) -> list[int]:
        """Host pids of the live sandboxes' backend processes (for tests and diagnostics)."""
        with self._lock:
            return [ws.proc.pid for ws in self._live]

    async def run(
        self,
        command: str | Sequence[str] | None = None,
        *,
        python: str | None = None,
        files: Mapping[str, str | bytes] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProcessOutcome:
        """One job in a warm sandbox (see `Sandbox.run` for the arguments)."""
        lim = limits or self.limits
        if not self.accepts(lim):
            raise ValueError("these limits exceed the warm sandbox's; run it cold")
        if (command is None) == (python is None):
            raise ValueError("give exactly one of `command` and `python`")
        for attempt in range(2):
            ws = await self._acquire()
            try:
                outcome = await self._run_in(ws, command, python, files, stdin, timeout, lim, env)
            except _Dead as exc:
                self._release(ws)
                if attempt:  # it never started, twice: something is wrong with the sandboxes
                    raise SandboxError(str(exc)) from None
            except BaseException:
                ws.discard()
                self._release(ws)
                raise
            else:
                self._release(ws)
                return outcome
        raise AssertionError("unreachable")

    async def lease(self) -> WarmLease:
        """A sandbox for one owner's several jobs (see `WarmLease`); release it when done.

        A lease never waits for a busy pool: it is held for a whole rollout (model turns
        included), so when no sandbox is idle one more is started, and sandboxes beyond ``size``
        are stopped when handed back."""
        ws = await self._acquire(may_exceed=True)
        return WarmLease(self, ws)

    async def _run_in(
        self,
        ws: WarmSandbox,
        command: str | Sequence[str] | None,
        python: str | None,
        files: Mapping[str, str | bytes] | None,
        stdin: bytes | None,
        timeout: float | None,
        lim: Limits,
        env: Mapping[str, str] | None,
    ) -> ProcessOutcome:
        if files:
            self.sandbox._write_files(ws.workdir, files)
        return await ws.run(
            self._job(ws, command, python),
            env={**self.sandbox.env, **(env or {})},
            limits=lim,
            cpu_seconds=lim.cpu_limit(timeout),
            stdin=stdin,
            timeout=timeout,
        )

    def _job(self, ws: WarmSandbox, command: str | Sequence[str] | None, python: str | None) -> dict[str, Any]:
        """The supervisor's job for a command (a string: bash; a list: argv) or a Python program."""
        if (command is None) == (python is None):
            raise ValueError("give exactly one of `command` and `python`")
        sb = self.sandbox
        # what would not fit in one control message travels as a file in the work folder
        if python is not None:
            if len(json.dumps(python)) <= _INLINE_MAX:
                job: dict[str, Any] = {"python": python}
            else:
                sb._write_files(ws.workdir, {".program.py": python})
                job = {"argv": [sb.python, ".program.py"]}
        elif isinstance(command, str):
            if len(json.dumps(command)) <= _INLINE_MAX:
                job = {"argv": ["/bin/bash", "-c", command]}
            else:
                sb._write_files(ws.workdir, {".command.sh": command})
                job = {"argv": ["/bin/bash", ".command.sh"]}
        else:
            assert command is not None
            job = {"argv": list(command)}
        return job

    def close(self) -> None:
        """Kill every sandbox of the pool and delete their work folders. Idempotent."""
        with self._lock:
            self._closed = True
            victims = list(self._live)
            self._idle.clear()
            waiters = list(self._waiters)
            self._waiters.clear()
        for ws in victims:
            ws.discard(graceful=True)
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, None)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- internals ---------------------------------------------------------------------------

    async def _acquire(self, may_exceed: bool = False) -> WarmSandbox:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxError("the warm sandbox pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size or may_exceed:
                    self._count += 1
                    future = None
                else:
                    future = loop.create_future()
                    self._waiters.append((loop, future))
            if future is not None:
                try:
                    ws = await future
                except BaseException:
                    with self._lock:
                        with contextlib.suppress(ValueError):
                            self._waiters.remove((loop, future))
                    if future.done() and not future.cancelled() and future.exception() is None:
                        handed = future.result()
                        if handed is not None:
                            self._release(handed)
                        else:
                            self._give_up_slot()
                    raise
                if ws is not None:
                    return ws
                if self._closed:
                    raise SandboxError("the warm sandbox pool is closed")
                # None: a slot was freed for this caller to start a sandbox in
            started = _spawner.submit(self._spawn)
            try:
                return await asyncio.wrap_future(started, loop=loop)
            except asyncio.CancelledError:
                # the start goes on in the spawner: its sandbox then joins the pool
                started.add_done_callback(self._adopt)
                raise
            except BaseException:
                self._give_up_slot()
                raise

    def _adopt(self, started: concurrent.futures.Future[WarmSandbox]) -> None:
        if started.cancelled() or started.exception() is not None:
            self._give_up_slot()
        else:
            self._release(started.result())

    def _give_up_slot(self) -> None:
        with self._lock:
            self._count -= 1
            self._hand_slot_locked()

    def _hand_slot_locked(self) -> None:
        while self._waiters and self._count < self.size:
            loop, future = self._waiters.popleft()
            self._count += 1
            try:
                loop.call_soon_threadsafe(_settle, future, None, self)
            except RuntimeError:  # that loop is closed
                self._count -= 1

    def _release(self, ws: WarmSandbox) -> None:
        with self._lock:
            if ws.dead or self._closed:
                if ws in self._live:
                    self._live.discard(ws)
                    self._count -= 1
                    self.discarded += 1
                discard = not ws.dead  # the pool is closing: a graceful stop
                self._hand_slot_locked()
            else:
                discard = False
                while self._waiters:
                    loop, future = self._waiters.popleft()
                    try:
                        loop.call_soon_threadsafe(_settle, future, ws, self)
                        return
                    except RuntimeError:
                        continue
                if self._count > self.size:  # a surplus one, started for a lease
                    self._live.discard(ws)
                    self._count -= 1
                    discard = True
                    self._hand_slot_locked()
                else:
                    self._idle.append(ws)
        if discard:  # off the caller's thread: a graceful stop may take a moment
            _spawner.submit(ws.discard, True)

    def _spawn(self) -> WarmSandbox:
        """Start one sandbox and wait for its supervisor (runs on the long-lived spawner thread)."""
        sb = self.sandbox
        sb.check()
        workdir = sb._new_workdir("warm")
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        filter_fd = os.memfd_create("vf-seccomp", 0)
        proc = None
        try:
            assert self.seccomp is not None
            os.write(filter_fd, self.seccomp)
            os.lseek(filter_fd, 0, os.SEEK_SET)
            launch = sb.backend.launch(  # type: ignore[call-arg]
                [sb.python, "-I", "-c", _INIT_SOURCE],
                workdir=workdir,
                limits=self.limits,
                cpu_seconds=None,
                env=sb.env,
                ro_binds=sb._host_binds(),
                as_pid_1=True,
                seccomp_fd=filter_fd,
            )
            proc = subprocess.Popen(
                launch.argv,
                stdin=inside,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(filter_fd,),
                **launch.popen_kwargs,
            )
            inside.close()
            os.close(filter_fd)
            filter_fd = -1
            host.settimeout(_READY_TIMEOUT_S)
            try:
                ready = json.loads(host.recv(65536) or b"{}")
            except (OSError, ValueError):
                ready = {}
            if not ready.get("ready"):
                kill_tree(proc.pid)
                assert proc.stderr is not None
                detail = proc.stderr.read(4096).decode(errors="replace").strip() if proc.wait(5) is not None else ""
                raise SandboxError(f"a warm sandbox did not start: {detail or 'no answer from its supervisor'}")
            assert proc.stderr is not None
            proc.stderr.close()
            host.setblocking(False)
        except BaseException:
            if proc is not None and proc.poll() is None:
                kill_tree(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            host.close()
            with contextlib.suppress(OSError):
                inside.close()
            if filter_fd >= 0:
                os.close(filter_fd)
                remove_tree(workdir)
            raise
        ws = WarmSandbox(proc, host, workdir)
        with self._lock:
            self._live.add(ws)
            self.started += 1
            closed = self._closed
        if closed:
            ws.discard()
            raise SandboxError("the warm sandbox pool is closed")
        return ws


def _settle(future: asyncio.Future[WarmSandbox | None], value: WarmSandbox | None, pool: WarmPool | None = None) -> None:
    """Hand ``value`` to a waiter on its own loop; if it gave up meanwhile, pass it on."""
    if not future.done():
        future.set_result(value)
    elif pool is not None:
        if value is not None:
            pool._release(value)
        else:
            pool._give_up_slot()


def _kill_all(live: set[WarmSandbox]) -> None:
    for ws in list(live):
        ws.discard()
