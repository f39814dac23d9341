"""Waiting for a way to send a request does not count against the rollout timeout (issue 23, item 5):
neither a free HTTP connection (``ClientConfig.max_connections``) nor a judge client's request slot
during scoring (docs/contracts.md: "waiting for a request slot does not count").

Proved with gates, not clocks: one run holds the only connection (or judge slot) until the test
lets go; a second run, whose rollouts have a short timeout, waits behind it. Its timeout and the
test's wait are timers of the same event loop, so the timeout fires first whenever it would fire at
all: with the wait counted, the second run is over (timed out) before the test looks.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import verifiers as vf
from tests.support.fault_server import FaultServer, Silent, chat_body

ROLLOUT_TIMEOUT = 0.3
#: how long the test lets the queued run wait: many times its timeout
LOOK_AFTER = 10 * ROLLOUT_TIMEOUT


def _env(**kw: Any) -> vf.SingleTurnEnv:
    return vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "ok"}], **kw)


def _first_silent(model: str):
    """Handler: the first request for ``model`` is held (silent) until ``srv.release``; all others
    are answered at once."""
    seen = {"n": 0}
    lock = threading.Lock()

    def handler(req):
        if req.method == "GET":
            return chat_body("ok")
        with lock:
            if req.body.get("model") == model:
                seen["n"] += 1
                if seen["n"] == 1:
                    return Silent()
        return chat_body("yes" if req.body.get("model") == "judge" else "ok")

    return handler


def _exact(completion, answer, **kw) -> float:
    return 1.0 if completion and completion[-1].get("content") == answer else 0.0


async def test_waiting_for_a_free_connection_does_not_count_against_the_rollout_timeout() -> None:
    with FaultServer(_first_silent("m")) as srv:
        client = vf.ModelClient(base_url=srv.base_url, max_connections=1, max_retries=0, timeout=600)
        try:
            holder = asyncio.create_task(_env(rubric=vf.Rubric(funcs=[_exact])).evaluate(client, "m"))
            await asyncio.to_thread(srv.wait_for, lambda: srv.in_flight >= 1, "the holder's request")
            queued = asyncio.create_task(
                _env(rubric=vf.Rubric(funcs=[_exact])).evaluate(client, "m", timeout_per_rollout=ROLLOUT_TIMEOUT)
            )
            done, _ = await asyncio.wait({queued}, timeout=LOOK_AFTER)
            assert not done, f"the queued rollout ended while waiting for a connection: {queued.result().state[0]['error']}"
            srv.release.set()  # the holder's request ends (no answer); the queued one goes out
            out = await queued
            await holder
        finally:
            await client.aclose()
    (state,) = out.state
    assert state["error"] is None and state["stop_condition"] != "timeout" and state["reward"] == 1.0


async def test_waiting_for_a_judge_slot_does_not_count_against_the_rollout_timeout() -> None:
    with FaultServer(_first_silent("judge")) as srv:
        judge_client = vf.ModelClient(base_url=srv.base_url, max_concurrent_requests=1, max_retries=0, timeout=600)

        def rubric() -> vf.JudgeRubric:
            async def judged(judge, prompt, completion, answer, state, **kw) -> float:
                return 1.0 if "yes" in await judge(prompt, completion, answer, state) else 0.0

            return vf.JudgeRubric(judge_client=judge_client, judge_model="judge", funcs=[judged])

        try:
            config = vf.ClientConfig(base_url=srv.base_url, max_retries=0)
            holder = asyncio.create_task(_env(rubric=rubric()).evaluate(config, "m"))
            await asyncio.to_thread(srv.wait_for, lambda: srv.in_flight >= 1, "the holder's judge request")
            queued = asyncio.create_task(
                _env(rubric=rubric()).evaluate(config, "m", timeout_per_rollout=ROLLOUT_TIMEOUT)
            )
            done, _ = await asyncio.wait({queued}, timeout=LOOK_AFTER)
            assert not done, f"the queued scoring ended while waiting for a judge slot: {queued.result().state[0]['error']}"
            srv.release.set()
            out = await queued
            held = await holder
        finally:
            await judge_client.aclose()
    (state,) = out.state
    assert state["error"] is None and state["reward"] == 1.0, state["error"]
    assert held.state[0]["error"]["source"] == "judge"  # the holder's judge call got no answer
