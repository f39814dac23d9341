"""Running one sandbox process: feed stdin, read output up to a cap, enforce the wall clock, kill.

Output is read incrementally from both pipes; once stdout and stderr together pass the cap, the
process is killed instead of being allowed to fill memory. Killing targets the whole tree: the
backend's process group plus every descendant found in ``/proc`` (nsjail puts its child in a new
session, out of reach of ``killpg``); killing a sandbox's PID-namespace init takes every process
in the namespace down with it, so nothing the program started survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from verifiers.sandbox.backends import Launch
from verifiers.sandbox.types import KillReason
from verifiers.utils.async_utils import wait_for

__all__ = [
    "ProcessOutcome",
    "descendants",
    "exit_status",
    "kill_tree",
    "poll_flag",
    "run_process",
    "wait_exit",
]

_CHUNK = 65536
_DRAIN_GRACE_S = 1.0  # after exit, how long pipes may stay open (a dying namespace) before a kill


@dataclass
class ProcessOutcome:
    stdout: bytes
    stderr: bytes
    exit_code: int
    duration_s: float
    kill_reason: KillReason | None


def exit_status(returncode: int) -> int:
    """Shell convention: a signal N death is 128 + N (asyncio reports it as -N)."""
    return 128 - returncode if returncode < 0 else returncode


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (one scan of ``/proc``; the kernel here lacks ``children``)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # the command name is in parentheses and may itself contain spaces or parentheses
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) > 1:
            parents.setdefault(int(rest[1]), []).append(int(entry))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in parents.get(stack.pop(), []):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` and all of ``pid``'s descendants."""
    tree = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for child in [pid, *tree]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


async def wait_exit(proc: asyncio.subprocess.Process, timeout: float | None = None) -> int | None:
    """Wait for the process itself to exit; return its returncode (None on timeout).

    Not ``proc.wait()``: on Python 3.11 that also waits for every pipe to close, which a sandbox
    whose background process still holds stdout (or a pipe we stopped reading) never does. A pidfd
    becomes readable the moment the process exits; the child watcher then records the status.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    if proc.returncode is None:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (ProcessLookupError, OSError):
            pidfd = None  # already reaped: the returncode is about to be set
        if pidfd is not None:
            exited = loop.create_future()
            loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
            try:
                await wait_for(exited, None if deadline is None else max(0.0, deadline - loop.time()))
            except TimeoutError:
                return None
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
    # the child watcher sets the status a moment after the exit
    while proc.returncode is None:
        if deadline is not None and loop.time() > deadline + 1.0:
            return None
        await asyncio.sleep(0.001)
    return proc.returncode


async def poll_flag(check: Callable[[], bool], flag: asyncio.Event, interval: float = 0.25) -> None:
    while not flag.is_set():
        await asyncio.sleep(interval)
        if await asyncio.to_thread(check):
            flag.set()


async def run_process(
    launch: Launch,
    *,
    stdin: bytes | None,
    timeout: float | None,
    output_cap: int,
    over_limit: Callable[[], bool] | None = None,
) -> ProcessOutcome:
    """Run ``launch`` to completion (or until a limit stops it) and collect what it wrote.

    ``over_limit`` is polled while the process runs; when it returns true the run is killed with
    reason ``"output"``, as when stdout and stderr pass ``output_cap``."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *launch.argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **launch.popen_kwargs,
    )
    buffers = (bytearray(), bytearray())
    written = 0
    over_cap = asyncio.Event()

    async def pump(stream: asyncio.StreamReader, buf: bytearray) -> None:
        nonlocal written
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                return
            room = output_cap - written
            if room > 0:
                buf += chunk[:room]
            written += len(chunk)
            if written > output_cap:
                # keep reading (and dropping) so the pipe sees its end once the process is killed
                over_cap.set()

    async def feed(data: bytes) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the program did not read all of its input; that is its business
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()

    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        asyncio.create_task(pump(proc.stdout, buffers[0])),
        asyncio.create_task(pump(proc.stderr, buffers[1])),
    ]
    helpers: list[asyncio.Task[object]] = []
    if stdin is not None:
        helpers.append(asyncio.create_task(feed(stdin)))
    waiter = asyncio.create_task(wait_exit(proc))
    if over_limit is not None:
        # e.g. the work dir's disk usage: polled off the event loop, sets the same flag as stdout
        helpers.append(asyncio.create_task(poll_flag(over_limit, over_cap)))
    capper = asyncio.create_task(over_cap.wait())
    helpers += [waiter, capper]
    reason: KillReason | None = None
    ended = started
    try:
        done, _ = await asyncio.wait({waiter, capper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if capper in done:
            reason = "output"
            kill_tree(proc.pid)
        elif waiter not in done:
            reason = "timeout"
            kill_tree(proc.pid)
        await waiter
        ended = time.perf_counter()
        _, pending = await asyncio.wait(pumps, timeout=_DRAIN_GRACE_S)
        if pending:
            # something outside a namespace (the subprocess backend) still holds the pipes
            kill_tree(proc.pid)
            await asyncio.wait(pending, timeout=_DRAIN_GRACE_S)
        if over_cap.is_set():
            reason = "output"
    finally:
        if proc.returncode is None:
            kill_tree(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.shield(wait_exit(proc, 5.0))
        for task in [*pumps, *helpers]:
            task.cancel()
        # close our ends of the pipes, so a cancelled run leaks no file descriptors
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()
    returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return ProcessOutcome(
        stdout=bytes(buffers[0]),
        stderr=bytes(buffers[1]),
        exit_code=exit_status(returncode),
        duration_s=ended - started,
        kill_reason=reason,
    )
