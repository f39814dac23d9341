"""``DaemonThreadPool.run``: the awaitable hop to a pool thread that sync reward functions
(``run_sync``) and sync tools take. Same bounds and abandonment as ``submit`` + ``abandon``, with the
result handed straight to the caller's event loop.

Concurrency is proved with events; the ``GUARD`` bound only matters when the code is broken (the
test then fails instead of hanging).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref

import pytest

from verifiers.engine.threads import DaemonThreadPool, PoolExhaustedError, run_sync

GUARD = 30.0


@pytest.fixture
def pool():
    p = DaemonThreadPool(1, thread_name_prefix="test-pool")
    yield p
    p.shutdown(wait=False, cancel_futures=True)


async def test_run_returns_the_result_from_a_pool_thread(pool: DaemonThreadPool) -> None:
    def where(x: int, *, y: int) -> tuple[int, str]:
        return x + y, threading.current_thread().name

    value, thread = await pool.run(where, 2, y=3)
    assert value == 5 and thread.startswith("test-pool") and thread != threading.current_thread().name


async def test_run_sync_carries_the_callers_context_variables() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("test_var", default="unset")
    var.set("the caller's")
    assert await run_sync(var.get) == "the caller's"


@pytest.mark.parametrize("exc", [ValueError("bad"), SystemExit(3), KeyboardInterrupt()])
async def test_run_raises_what_the_function_raised(pool: DaemonThreadPool, exc: BaseException) -> None:
    def boom() -> None:
        raise exc

    with pytest.raises(type(exc)):  # awaited in this task: SystemExit reaches the caller, not the loop
        await pool.run(boom)
    assert await pool.run(lambda: "still serving") == "still serving"  # the thread survived it


async def test_a_stop_iteration_comes_back_as_an_error_instead_of_a_hang(pool: DaemonThreadPool) -> None:
    def exhausted() -> None:
        next(iter(()))

    with pytest.raises(RuntimeError, match="StopIteration") as info:
        await asyncio.wait_for(pool.run(exhausted), GUARD)
    assert isinstance(info.value.__cause__, StopIteration)


async def test_the_arguments_are_dropped_before_the_caller_resumes(pool: DaemonThreadPool) -> None:
    class Big:
        pass

    arg = Big()
    ref = weakref.ref(arg)
    await pool.run(lambda obj: None, arg)
    del arg
    assert ref() is None  # no pool thread (nor the queued call) still holds the argument


class _SlowFromPoolThreads:
    """The pool's lock, slow to take from a pool thread: widens the window between a call's return
    and its thread's books being settled, where a caller that resumed too early sees it busy."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        if threading.current_thread().name.startswith("test-pool"):
            threading.Event().wait(0.2)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@pytest.mark.parametrize("via", ["run", "run_call", "submit"])
async def test_a_caller_whose_call_is_back_never_sees_its_thread_busy(pool: DaemonThreadPool, via: str) -> None:
    """``busy_threads`` is settled before the caller resumes, however slow the pool thread is to
    get there (a check right after an evaluation read 1 on a loaded machine)."""
    assert await pool.run(lambda: 0) == 0  # the thread exists before the lock slows it
    pool._lock = _SlowFromPoolThreads(pool._lock)  # type: ignore[assignment]
    for i in range(3):
        if via == "run":
            value = await pool.run(lambda i=i: i)
        elif via == "run_call":
            value = await pool.run_call(lambda i=i: i, timeout=GUARD)
        else:
            value = await asyncio.wrap_future(pool.submit(lambda i=i: i))
        assert value == i and pool.busy_threads == 0


async def test_a_cancelled_running_call_is_abandoned_and_a_new_thread_serves_the_next(pool: DaemonThreadPool) -> None:
    started = threading.Event()
    release = threading.Event()

    def block() -> str:
        started.set()
        release.wait(GUARD)
        return "late"

    try:
        task = asyncio.ensure_future(pool.run(block))
        assert await asyncio.to_thread(started.wait, GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.abandoned_threads == 1
        # max_workers is 1 and its only thread is stuck: the replacement runs this one
        assert await asyncio.wait_for(pool.run(lambda: "fresh"), GUARD) == "fresh"
    finally:
        release.set()
    for _ in range(int(GUARD * 100)):  # the abandoned thread leaves once its call returns
        if not pool.abandoned_threads:
            break
        await asyncio.sleep(0.01)
    assert pool.abandoned_threads == 0


async def test_a_call_cancelled_while_queued_never_runs(pool: DaemonThreadPool) -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def block() -> None:
        started.set()
        release.wait(GUARD)

    first = asyncio.ensure_future(pool.run(block))
    assert await asyncio.to_thread(started.wait, GUARD)
    queued = asyncio.ensure_future(pool.run(ran.append, "queued"))
    await asyncio.sleep(0)  # queued behind the blocked call (one worker)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    release.set()
    await asyncio.wait_for(first, GUARD)
    assert await pool.run(lambda: "after") == "after"  # the worker went past the cancelled call
    assert ran == [] and pool.abandoned_threads == 0


async def test_run_honours_the_bound_of_abandoned_calls() -> None:
    pool = DaemonThreadPool(1, max_abandoned=1)
    started = threading.Event()
    release = threading.Event()

    def block() -> None:
        started.set()
        release.wait(GUARD)

    try:
        task = asyncio.ensure_future(pool.run(block))
        assert await asyncio.to_thread(started.wait, GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(PoolExhaustedError, match="1 abandoned calls"):
            await pool.run(lambda: None)
    finally:
        release.set()
        pool.shutdown(wait=False)


async def test_shutdown_cancels_queued_calls() -> None:
    pool = DaemonThreadPool(1)
    started = threading.Event()
    release = threading.Event()

    def block() -> None:
        started.set()
        release.wait(GUARD)

    first = asyncio.ensure_future(pool.run(block))
    assert await asyncio.to_thread(started.wait, GUARD)
    queued = asyncio.ensure_future(pool.run(lambda: "never"))
    await asyncio.sleep(0)
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(queued, GUARD)
    release.set()
    await asyncio.wait_for(first, GUARD)
    with pytest.raises(RuntimeError, match="after shutdown"):
        await pool.run(lambda: None)


async def test_a_saturated_pool_keeps_count_and_a_replacement_takes_the_waiting_calls(pool: DaemonThreadPool) -> None:
    """Calls queued behind a busy thread are owed that thread, not counted as idle threads: after
    a burst, the one thread is the one idle thread, and when a stuck call is abandoned with calls
    waiting behind it, a replacement thread runs them."""
    assert await asyncio.gather(*(pool.run(lambda i=i: i) for i in range(6))) == list(range(6))
    assert pool.busy_threads == 0 and pool._idle == len(pool._threads) == 1

    started, release = threading.Event(), threading.Event()

    def block() -> str:
        started.set()
        release.wait(GUARD)
        return "late"

    try:
        stuck = asyncio.ensure_future(pool.run(block))
        assert await asyncio.to_thread(started.wait, GUARD)
        waiting = [asyncio.ensure_future(pool.run(lambda i=i: i)) for i in range(3)]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)  # one thread, and it is stuck
        stuck.cancel()
        assert await asyncio.wait_for(asyncio.gather(*waiting), 10) == [0, 1, 2]
    finally:
        release.set()


class _Clock:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")


async def test_run_call_stops_the_callers_clock_while_it_waits_and_times_the_call_from_its_start(pool: DaemonThreadPool) -> None:
    started, release = threading.Event(), threading.Event()

    def hold() -> str:
        started.set()
        release.wait(GUARD)
        return "held"

    first = asyncio.ensure_future(pool.run(hold))
    assert await asyncio.to_thread(started.wait, GUARD)
    clock = _Clock()
    # queued behind ``hold`` far longer than its own 0.2 s: not charged for the wait
    second = asyncio.ensure_future(pool.run_call(lambda: "ran", timeout=0.2, clock=clock))
    await asyncio.sleep(0.4)
    assert clock.events == ["pause"] and not second.done()
    release.set()
    assert await first == "held" and await asyncio.wait_for(second, GUARD) == "ran"
    assert clock.events == ["pause", "resume"]

    # once started, the call has its 0.2 s: past them it is abandoned and the caller gets TimeoutError
    gone = threading.Event()
    clock = _Clock()
    with pytest.raises(TimeoutError):
        await pool.run_call(gone.wait, (GUARD,), timeout=0.2, clock=clock)
    assert clock.events == [] and pool.abandoned_threads == 1  # it started at once: no pause
    gone.set()
    assert await asyncio.wait_for(pool.run(lambda: "after"), GUARD) == "after"
