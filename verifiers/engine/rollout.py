"""One rollout: a state from its row, its turns (or a custom rollout) under the rollout's timeout.

:func:`run_rollout` never raises for the rollout's own failures: they are recorded on the state
(``error`` with a source, ``is_completed`` True). It hands the group stage a
:class:`RolloutOutcome`: the state and how much of the rollout's timeout was left, which bounds
the group's scoring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifiers.engine.clock import CLOCK, RolloutClock, record_timeout
from verifiers.engine.turns import play_turns
from verifiers.errors import error_record, is_user_raised
from verifiers.types import State
from verifiers.utils.results import set_timing

if TYPE_CHECKING:
    from verifiers.engine.client import ModelClientProtocol
    from verifiers.engine.plans import RolloutPlan

__all__ = ["RolloutOutcome", "run_rollout"]


@dataclass(slots=True)
class RolloutOutcome:
    """A finished rollout: its state, and the seconds its timeout had left (None: no limit, or
    it ran out)."""

    state: State
    time_left: float | None = None


async def run_rollout(
    plan: RolloutPlan,
    row: Mapping[str, Any],
    client: ModelClientProtocol,
    model: str,
    sampling_args: Mapping[str, Any] | None,
    timeout: float | None = None,
) -> RolloutOutcome:
    """Run one rollout of ``row``. ``timeout`` (else the plan's own) stops counting while the
    rollout waits for a request slot."""
    sampling_args = sampling_args or {}
    if plan.sampling_args:
        sampling_args = {**plan.sampling_args, **sampling_args}
    if plan.replace_rollout is not None:
        return RolloutOutcome(await plan.replace_rollout(row, client, model, sampling_args, timeout=timeout))
    state = plan.init_state(row, client, model, sampling_args)
    limit = timeout if timeout is not None else plan.timeout
    t0 = time.perf_counter()
    clock: RolloutClock | None = None
    scope: asyncio.Timeout | None = None
    try:
        if limit is not None and limit > 0:
            async with asyncio.timeout(limit) as scope:
                clock = RolloutClock(scope)
                token = CLOCK.set(clock)
                try:
                    await _play(plan, state, client, model, sampling_args)
                finally:
                    CLOCK.reset(token)
        else:
            await _play(plan, state, client, model, sampling_args)
    except TimeoutError as exc:
        clock = None
        if scope is not None and scope.expired():
            record_timeout(state, f"rollout exceeded {limit} s")
        else:  # a TimeoutError of the rollout's own code (a custom rollout()), not the limit
            if not state.get("error"):
                state["error"] = error_record(exc, "rollout")
            state["is_completed"] = True
    except BaseException as exc:  # a bug in a custom rollout(): keep the run going, record it
        if not is_user_raised(exc):
            raise
        if not state.get("error"):
            state["error"] = error_record(exc, "rollout")
        state["is_completed"] = True
    set_timing(state, "generation_ms", (time.perf_counter() - t0) * 1000.0)  # [faultsrun] a hook may have popped it
    return RolloutOutcome(state, (clock.left() or 0.0) if clock is not None else None)


async def _play(plan: RolloutPlan, state: State, client: ModelClientProtocol, model: str, sampling_args: Mapping[str, Any]) -> None:
    if plan.turns is not None:
        await play_turns(plan.turns, state, client, model, sampling_args)
    elif plan.play is not None:
        await plan.play(state, client, model, sampling_args)
    else:
        raise ValueError("the rollout plan has neither turns nor a play function (an API must give one)")
