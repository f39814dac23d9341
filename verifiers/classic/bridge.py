"""One call, both generations: awaitable (NEW) and usable as a plain result (OLD).

The classic API changed ``Environment.evaluate`` / ``generate`` from synchronous (0.1.x) to async
(0.3.x); :class:`SyncOrAsync` serves both, :func:`run_sync` runs a coroutine from sync code.
Only the standard library is imported.
"""

from __future__ import annotations

import asyncio
import collections.abc
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SyncOrAsync", "run_sync"]


def run_sync(factory: Callable[[], Any]) -> Any:
    """Run the coroutine built by ``factory()`` to completion from synchronous code.

    In a thread without a running event loop this is ``asyncio.run`` (from the main thread, with the
    environment's sync code run on the main thread, as the original runs it:
    ``engine.threads.run_on_main_thread``); inside a running loop (a notebook) it runs in a helper
    thread with its own loop, so it never deadlocks.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from verifiers.engine.threads import run_on_main_thread

        return run_on_main_thread(factory)  # from the main thread, sync env code runs there
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target, name="verifiers-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class SyncOrAsync(collections.abc.Coroutine):
    """The return value of ``evaluate`` / ``generate``: a coroutine *and* a lazy result.

    The classic API changed ``Environment.evaluate``/``generate`` from synchronous (OLD) to async
    (NEW); environments and scripts of both generations exist. ``await env.evaluate(...)``,
    ``asyncio.run(env.evaluate(...))`` and ``asyncio.create_task(...)`` treat this object as the
    coroutine it wraps; OLD code that uses the value directly (``env.evaluate(...).reward``,
    ``out["outputs"]``) runs the call synchronously on first use. Nothing runs until one of the two
    happens.
    """

    __slots__ = ("_coro", "_factory", "_has_result", "_result")

    def __init__(self, factory: Callable[[], collections.abc.Coroutine[Any, Any, Any]]) -> None:
        self._factory = factory
        self._coro: collections.abc.Coroutine[Any, Any, Any] | None = None
        self._has_result = False
        self._result: Any = None

    # coroutine protocol -------------------------------------------------------------------------
    def _inner(self) -> collections.abc.Coroutine[Any, Any, Any]:
        if self._coro is None:
            self._coro = self._factory()
        return self._coro

    def __await__(self) -> Any:
        return self._inner().__await__()

    def send(self, value: Any) -> Any:
        return self._inner().send(value)

    def throw(self, *args: Any) -> Any:
        return self._inner().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    # lazy-result protocol -----------------------------------------------------------------------
    def result(self) -> Any:
        """Run synchronously (once) and return the result."""
        if not self._has_result:
            if self._coro is not None:
                raise RuntimeError("this call is already being awaited; use the awaited value")
            self._result = run_sync(self._factory)
            self._has_result = True
        return self._result

    def __getattr__(self, name: str) -> Any:
        # While awaited (or for asyncio's introspection: cr_code, cr_frame, ...) behave as the
        # coroutine; otherwise as the result.
        if self._coro is not None or name.startswith(("_", "cr_", "gi_")):
            if self._coro is None:
                raise AttributeError(name)
            return getattr(self._coro, name)
        return getattr(self.result(), name)

    def __getitem__(self, key: Any) -> Any:
        return self.result()[key]

    def __iter__(self) -> Any:
        return iter(self.result())

    def __len__(self) -> int:
        return len(self.result())

    def __contains__(self, key: Any) -> bool:
        return key in self.result()

    def __repr__(self) -> str:
        if self._has_result:
            return repr(self._result)
        return f"<pending {getattr(self._factory, '__qualname__', 'call')}>"
