"""Asyncio helpers (``verifiers.v1.utils.aio`` in the original)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["run_shielded"]

T = TypeVar("T")


async def run_shielded(coro: Awaitable[T]) -> T:
    """Await ``coro`` to its end even when the awaiting task is cancelled, then re-raise the
    cancellation (cleanup that must finish: closing a box, writing a record).

    ``asyncio.shield`` alone returns at the first cancellation and leaves the inner task running
    unowned; this keeps waiting through any number of cancellations. When ``coro`` fails and
    there was no cancellation, its error propagates; when there was one, the cancellation is
    raised with the error chained as its cause, so neither is lost."""
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            cancelled = exc
        except BaseException:  # the task's own failure: read from the task below
            pass
    if cancelled is not None:
        cause = None if task.cancelled() else task.exception()
        raise cancelled from cause
    return task.result()
