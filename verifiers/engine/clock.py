"""A rollout's timeout as a clock that stops while the rollout waits for a request slot."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from verifiers.clients.slots import SLOT_WAIT
from verifiers.types import State

__all__ = ["CLOCK", "RolloutClock", "record_timeout"]

#: The clock of the rollout running in the current task (tool calls and model calls inherit it);
#: the model client's own request bound (``ClientConfig.max_concurrent_requests``) pauses it too.
CLOCK = SLOT_WAIT


class RolloutClock:
    """The timeout of one rollout, which can be stopped while the rollout waits in a queue."""

    __slots__ = ("lane", "paused", "remaining", "scope")

    def __init__(self, scope: asyncio.Timeout) -> None:
        self.scope = scope
        self.lane: Any = None  # its calls in the lane of sync environment code (engine/threads.py)
        self.paused = 0
        self.remaining: float | None = None

    def pause(self) -> None:
        self.paused += 1
        if self.paused > 1:
            return
        when = self.scope.when()
        if when is None or self.scope.expired():
            return
        self.remaining = max(0.0, when - asyncio.get_running_loop().time())
        with contextlib.suppress(RuntimeError):
            self.scope.reschedule(None)

    def resume(self) -> None:
        self.paused -= 1
        if self.paused or self.remaining is None:
            return
        remaining, self.remaining = self.remaining, None
        with contextlib.suppress(RuntimeError):
            self.scope.reschedule(asyncio.get_running_loop().time() + remaining)

    def left(self) -> float | None:
        """Seconds left before the rollout times out (None: no limit)."""
        if self.remaining is not None:
            return self.remaining
        when = self.scope.when()
        return None if when is None else max(0.0, when - asyncio.get_running_loop().time())


def record_timeout(state: State, message: str) -> None:
    prior = state.get("error")
    if isinstance(prior, dict) and prior.get("source") != "timeout":
        # what failed while the timeout unwound (a cleanup hook that overran) is kept beside it
        warnings = state.get("warnings")
        if not isinstance(warnings, list):
            warnings = state["warnings"] = []
        warnings.append({"type": prior.get("type"), "message": prior.get("message"), "source": prior.get("source")})
    state["error"] = {"type": "TimeoutError", "message": message, "source": "timeout"}
    state["stop_condition"] = "timeout"
    state["is_truncated"] = True
    state["is_completed"] = True
