"""One group: every rollout of one example, run concurrently, then scored together.

Scoring runs under what the group's rollouts had left of their timeouts (the longest among those
still live: group reward functions see them all at once), on a clock that stops while a judge's
request waits for a slot; a rollout without a limit leaves scoring unbounded. A scorer that raises records its error on every rollout of the group (source
``rubric``) instead of ending the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from verifiers.engine.clock import CLOCK, RolloutClock, record_timeout
from verifiers.engine.rollout import run_rollout
from verifiers.errors import error_record, is_user_raised
from verifiers.types import State
from verifiers.utils.results import set_timing

if TYPE_CHECKING:
    from verifiers.engine.client import ModelClientProtocol
    from verifiers.engine.plans import GroupPlan, Scorer

__all__ = ["run_group", "score_group"]


async def run_group(
    plan: GroupPlan,
    rows: Sequence[Mapping[str, Any]],
    client: ModelClientProtocol,
    model: str,
    sampling_args: Mapping[str, Any],
    *,
    score: bool = True,
    timeout: float | None = None,
) -> list[State]:
    """The states of one group's rollouts (scored unless ``score`` is False)."""
    t0 = time.perf_counter()
    plan_for = plan.plan_for
    if len(rows) == 1:
        outcomes = [await run_rollout(plan_for(rows[0]), rows[0], client, model, sampling_args, timeout)]
    else:
        outcomes = await asyncio.gather(
            *(run_rollout(plan_for(row), row, client, model, sampling_args, timeout) for row in rows)
        )
    states = [o.state for o in outcomes]
    if score:
        left = [o.time_left for o in outcomes if o.time_left is not None and not o.state.get("error")]
        if left:
            try:
                async with asyncio.timeout(max(left)) as scope:
                    # [faultsrun] a judge's request-slot wait pauses the scoring clock too
                    token = CLOCK.set(RolloutClock(scope))
                    try:
                        await score_group(plan.scorer, states)
                    finally:
                        CLOCK.reset(token)
            except TimeoutError:
                names = plan.scorer.get_reward_func_names()
                for st in states:
                    if not st.get("error"):
                        record_timeout(st, "scoring did not finish within the rollout timeout")
                        st["reward"] = 0.0
                        st["metrics"] = dict.fromkeys(names, 0.0)
        else:
            await score_group(plan.scorer, states)
    total = (time.perf_counter() - t0) * 1000.0
    for st in states:
        set_timing(st, "total_ms", total)  # [faultsrun] a hook may have replaced or dropped timing
    return states


async def score_group(scorer: Scorer, states: list[State]) -> None:
    """``scorer.score_group(states)``; a scorer that raises zeroes and errors the whole group."""
    try:
        await scorer.score_group(states)
    except BaseException as exc:  # a broken rubric: record on every rollout, keep the run going
        if not is_user_raised(exc):
            raise
        err = error_record(exc, "rubric")
        for st in states:
            st["error"] = st.get("error") or err
            st["reward"] = 0.0
