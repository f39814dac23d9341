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
