"""Where synchronous code of an environment runs: a thread pool whose threads never keep the
process alive, the shared pool sync reward functions run in, and a watchdog for the event loop.

Synchronous code on the event loop stalls every rollout of the run (their timeouts keep counting),
so the engine runs sync reward functions with :func:`run_sync` in one bounded pool (``VF_SYNC_WORKERS``
threads, default 32) and sync tools in the environment's pool. Code that still blocks the loop (an
``async`` function doing blocking I/O, a sync hook) is reported by :class:`StallWatchdog`: a thread
that notices when the loop has not run for ``threshold`` seconds and logs, and counts, what was
running then (the function named with :func:`running`).

The pool:

``concurrent.futures.ThreadPoolExecutor`` joins its worker threads when the interpreter exits, so a
sync tool that never returns (a model-written infinite loop, a blocking socket) keeps ``vf eval``
running after the run has ended, even though the rollout that called it timed out long ago. The
environment's pool runs sync tools in daemon threads instead: a tool abandoned by its timeout keeps
its thread busy until it returns, but exiting the process does not wait for it.

It is a drop-in ``Executor`` (``loop.run_in_executor`` accepts it): at most ``max_workers`` threads,
started on demand and reused. A caller that gives up on a running call (a tool timeout) hands it to
:meth:`DaemonThreadPool.abandon`: its thread stops counting against ``max_workers`` (it exits when the
call returns), so abandoned calls never starve new ones. At most ``max_abandoned`` threads may be
abandoned at once; past that, :meth:`submit` raises :class:`PoolExhaustedError` (one clear error
instead of unbounded threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["DaemonThreadPool", "PoolExhaustedError", "StallWatchdog", "run_sync", "running", "sync_pool"]

logger = logging.getLogger("verifiers.engine")


class PoolExhaustedError(RuntimeError):
    """Too many abandoned calls are still running to start another one."""

_STOP = object()


def _call(call: tuple[Any, ...]) -> tuple[bool, Any]:
    fn, args, kwargs = call
    try:
        return True, fn(*args, **kwargs)
    except BaseException as exc:
        return False, exc


_QUEUED, _RUNNING, _DONE, _CANCELLED = range(4)


class _LoopCall:
    """A call queued by :meth:`DaemonThreadPool.run`: its result goes to ``future`` on ``loop``."""

    __slots__ = ("args", "fn", "future", "kwargs", "loop", "state", "thread")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], fn: Any, args: Any, kwargs: Any) -> None:
        self.loop = loop
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.state = _QUEUED
        self.thread: threading.Thread | None = None


def _deliver(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Hand a call's outcome to its awaiting caller (on the caller's event loop)."""
    if future.done():  # the caller was cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    elif isinstance(value, StopIteration):  # an asyncio future cannot hold one (it would hang)
        error = RuntimeError(f"the sync function raised StopIteration: {value!r}")
        error.__cause__ = value
        future.set_exception(error)
    else:
        future.set_exception(value)


class DaemonThreadPool(Executor):
    """At most ``max_workers`` daemon threads running submitted calls in order of submission."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "vf-pool", max_abandoned: int | None = None) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.max_abandoned = max_abandoned if max_abandoned is not None else max(256, 4 * max_workers)
        self._running: dict[Future[Any], threading.Thread] = {}
        self._abandoned: set[threading.Thread] = set()
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._put((future, fn, args, kwargs))
        return future

    async def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``await`` ``fn(*args, **kwargs)`` run in this pool, from an event loop.

        The same pool and bounds as :meth:`submit`, without a ``concurrent.futures.Future`` in
        between: the thread hands the result straight to the caller's event loop (about a fifth of
        the CPU time of ``asyncio.wrap_future(pool.submit(...))``: the hop to a thread is paid by
        every sync reward function and sync tool call). A caller that is cancelled (a timeout)
        abandons the call, as :meth:`abandon` does for a submitted one.
        """
        loop = asyncio.get_running_loop()
        call = _LoopCall(loop, loop.create_future(), fn, args, kwargs)
        self._put(call)
        try:
            return await call.future
        except BaseException:
            if call.future.cancelled():  # the caller gave up (its task was cancelled)
                self._abandon_call(call)
            raise

    def _put(self, item: Any) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if len(self._abandoned) >= self.max_abandoned:
                raise PoolExhaustedError(
                    f"{len(self._abandoned)} abandoned calls (timed out) are still running in this pool "
                    f"(at most {self.max_abandoned}); no new call can start until some return"
                )
            self._queue.put(item)
            if self._idle > 0:
                self._idle -= 1  # that idle thread takes this item
            elif len(self._threads) < self.max_workers:
                self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, name=f"{self._prefix}-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def abandon(self, future: Future[Any]) -> None:
        """The caller gave up on ``future``: cancel it if it has not started, else let its thread
        finish the call outside the pool's ``max_workers`` (a replacement thread starts)."""
        if future.cancel():
            return
        with self._lock:
            thread = self._running.get(future)
            if thread is not None:
                self._abandon_thread(thread)

    def _abandon_call(self, call: _LoopCall) -> None:
        with self._lock:
            if call.state == _QUEUED:
                call.state = _CANCELLED  # never starts: the thread that takes it skips it
            elif call.state == _RUNNING and call.thread is not None:
                self._abandon_thread(call.thread)

    def _abandon_thread(self, thread: threading.Thread) -> None:  # with self._lock held
        if thread in self._abandoned or thread not in self._threads:
            return
        self._abandoned.add(thread)
        self._threads.remove(thread)
        if not self._shutdown and self._idle == 0 and not self._queue.empty():
            self._start_thread()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if type(item) is _LoopCall:
                if not self._run_loop_call(item, me):
                    return
                del item
                continue
            future, call = item[0], item[1:]
            del item
            if future.set_running_or_notify_cancel():
                with self._lock:
                    self._running[future] = me
                ok, value = _call(call)
                # drop the call (and the rollout state its arguments hold) before the caller
                # resumes: a finished rollout must not stay alive in this thread
                del call
                with self._lock:
                    self._running.pop(future, None)
                if ok:
                    future.set_result(value)
                else:  # a tool's SystemExit must reach its caller, not end the thread
                    future.set_exception(value)
                del value
                with self._lock:
                    if me in self._abandoned:  # replaced already: leave the pool
                        self._abandoned.discard(me)
                        return
            del future
            with self._lock:
                if self._shutdown:
                    return
                self._idle += 1

    def _run_loop_call(self, call: _LoopCall, me: threading.Thread) -> bool:
        """Run one :meth:`run` call; False when this thread must leave the pool afterwards."""
        with self._lock:
            started = call.state == _QUEUED
            if started:
                call.state = _RUNNING
                call.thread = me
        if started:
            fn, args, kwargs = call.fn, call.args, call.kwargs
            # drop the call (and the rollout state its arguments hold) before the caller resumes:
            # a finished rollout must not stay alive in this thread
            call.fn = call.args = call.kwargs = None
            ok, value = _call((fn, args, kwargs))
            del fn, args, kwargs
            try:
                call.loop.call_soon_threadsafe(_deliver, call.future, ok, value)
            except RuntimeError:  # the caller's event loop has closed: nobody is waiting
                pass
            del value
        with self._lock:
            call.state = _DONE
            call.thread = None
            if me in self._abandoned:  # replaced already: leave the pool
                self._abandoned.discard(me)
                return False
            if self._shutdown:
                return False
            self._idle += 1
        return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if type(item) is _LoopCall:
                    item.state = _CANCELLED
                    with contextlib.suppress(RuntimeError):  # its event loop has closed
                        item.loop.call_soon_threadsafe(item.future.cancel)
                elif item is not _STOP:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(_STOP)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    @property
    def busy_threads(self) -> int:
        """Threads currently running a call (abandoned tools included)."""
        with self._lock:
            return len(self._threads) - self._idle + len(self._abandoned)

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a call whose caller gave up on it."""
        with self._lock:
            return len(self._abandoned)


_SYNC_POOL: DaemonThreadPool | None = None
_SYNC_POOL_LOCK = threading.Lock()


def sync_pool() -> DaemonThreadPool:
    """The process's pool for sync reward functions (created on first use)."""
    global _SYNC_POOL
    pool = _SYNC_POOL
    if pool is not None:  # every sync reward call asks: no lock once it exists
        return pool
    with _SYNC_POOL_LOCK:
        if _SYNC_POOL is None:
            workers = int(os.environ.get("VF_SYNC_WORKERS", "32") or 32)
            _SYNC_POOL = DaemonThreadPool(max(1, workers), thread_name_prefix="vf-sync")
        return _SYNC_POOL


async def run_sync(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` in :func:`sync_pool`, off the event loop (context variables
    carried over). A caller that is cancelled abandons the call (its thread leaves the pool's count)."""
    return await sync_pool().run(contextvars.copy_context().run, func, *args, **kwargs)


# ----- the event-loop watchdog ---------------------------------------------------------------------

_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar("vf_running", default=None)


@contextlib.contextmanager
def running(name: str) -> Iterator[None]:
    """Name the environment code the current task is running (the watchdog reports it)."""
    token = _RUNNING.set(name)
    StallWatchdog.note(name)
    try:
        yield
    finally:
        _RUNNING.reset(token)
        StallWatchdog.note(None)


class StallWatchdog:
    """Notices when the event loop it watches has not run for ``threshold`` seconds.

    A daemon thread wakes every ``threshold / 2`` seconds; the loop answers each wake with a call
    soon. An answer that comes ``threshold`` late is a stall: it is counted in ``stalls``
    (``{"function", "seconds"}``, the function :func:`running` named last on that loop, or
    "unknown") and logged as a warning, once per stall.
    """

    _current: dict[int, str | None] = {}
    #: the watchdogs running now (a test can wait on their ``noticed``)
    live: set[StallWatchdog] = set()

    def __init__(self, threshold: float = 1.0) -> None:
        if threshold <= 0:
            raise ValueError("threshold must be positive")
        self.threshold = threshold
        self.stalls: list[dict[str, Any]] = []
        #: set when a stall is first noticed (while the loop is still blocked), and when it is recorded
        self.noticed = threading.Event()
        self._recorded = threading.Event()
        self.last_noticed: str | None = None  # the function named by the latest stall noticed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wait_recorded(self, timeout: float) -> bool:
        """Block until a stall has been recorded (tests; the watchdog's own thread records it)."""
        return self._recorded.wait(timeout)

    def summary(self) -> dict[str, Any]:
        """``{"count", "longest_s", "functions": {name: count}}`` of the stalls seen so far."""
        functions: dict[str, int] = {}
        for stall in self.stalls:
            functions[stall["function"]] = functions.get(stall["function"], 0) + 1
        return {
            "count": len(self.stalls),
            "longest_s": max((st["seconds"] for st in self.stalls), default=0.0),
            "functions": functions,
        }

    @classmethod
    def from_env(cls) -> StallWatchdog:
        """A watchdog with ``VF_STALL_MS`` (default 1000) as its threshold."""
        ms = float(os.environ.get("VF_STALL_MS", "1000") or 1000)
        return cls(threshold=max(ms, 1.0) / 1000.0)

    @classmethod
    def note(cls, name: str | None) -> None:
        cls._current[threading.get_ident()] = name

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, args=(loop, loop_thread), name="vf-stall-watchdog", daemon=True)
        self._thread.start()
        StallWatchdog.live.add(self)

    def stop(self) -> None:
        self._stop.set()
        StallWatchdog.live.discard(self)

    def _watch(self, loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
        while not self._stop.wait(self.threshold / 2):
            answered = threading.Event()
            sent = time.monotonic()
            try:
                loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop closed
                return
            if answered.wait(self.threshold):
                continue
            name = self._current.get(loop_thread) or "unknown"
            self.last_noticed = name
            self.noticed.set()
            while not answered.wait(self.threshold) and not self._stop.is_set():
                pass
            seconds = time.monotonic() - sent
            self.stalls.append({"function": name, "seconds": round(seconds, 3)})
            self._recorded.set()
            logger.warning(
                "the event loop was blocked for %.2f s while running %s: every rollout waited (run blocking "
                "code in a sync function, which runs in a thread, or with asyncio.to_thread)",
                seconds, name,
            )
