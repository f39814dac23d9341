"""The engine's stages driven without an ``Environment``: what a v1 ``Env`` or an env server will do.

Each test builds the typed records of ``verifiers.engine.plans`` by hand and runs a stage against a
real loopback server, so the engine is shown to need nothing of the classic class.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.engine import GroupPlan, RolloutPlan, RunConfig, TurnLoop, run_group, run_groups, run_rollout
from verifiers.engine.client import ModelClientProtocol
from verifiers.types import State


def fresh_state(row: dict[str, Any], *args: Any) -> State:
    state = State(row)
    state.update(
        prompt=list(row["prompt"]), completion=[], responses=[], trajectory=[], turn=0, reward=None, metrics={},
        timing={"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0},
        usage={"prompt_tokens": 0, "completion_tokens": 0}, error=None, is_completed=False, is_truncated=False,
        stop_condition=None,
    )
    return state


async def one_turn(state: State) -> bool:
    if state["turn"] >= 1:
        state["stop_condition"] = "one_turn"
        return True
    return False


async def nothing(state: State) -> None:
    return None


LOOP = TurnLoop(setup=lambda state: None, respond=lambda messages, state: None, should_stop=one_turn, cleanup=nothing)


class Exact:
    """A scorer (the engine's ``Scorer`` protocol), not a Rubric."""

    def get_reward_func_names(self) -> list[str]:
        return ["exact"]

    async def score_group(self, states: list[State]) -> None:
        for st in states:
            st["reward"] = float(st["completion"][-1]["content"] == st["answer"])
            st["metrics"] = {"exact": st["reward"]}


def rows(n: int, rollouts: int) -> list[list[dict[str, Any]]]:
    return [
        [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": "ok", "example_id": i, "rollout_index": r}
         for r in range(rollouts)]
        for i in range(n)
    ]


async def test_a_run_of_plans_built_by_hand_writes_a_run_folder(server_factory, tmp_path: Path) -> None:
    srv = server_factory("ok")
    client = vf.ModelClient(base_url=srv.base_url)
    assert isinstance(client, ModelClientProtocol)
    plan = GroupPlan(plan_for=lambda row: RolloutPlan(init_state=fresh_state, turns=LOOP), scorer=Exact())
    out = await run_groups(plan, rows(3, 2), client, RunConfig(model="m", rollouts_per_example=2, folder=tmp_path))
    await client.aclose()
    records = list(out["outputs"])
    assert [(r["example_id"], r["rollout_index"]) for r in records] == [(i, r) for i in range(3) for r in range(2)]
    assert all(r["reward"] == 1.0 and r["stop_condition"] == "one_turn" for r in records)
    assert out["metadata"]["avg_reward"] == 1.0 and (tmp_path / "metadata.json").exists()


async def test_the_scoring_budget_is_what_the_rollouts_left(server_factory) -> None:
    # The group stage bounds scoring by the time the rollouts' outcomes report, nothing else: a
    # scorer slower than what a 5 s rollout left times the group out; the rollout itself did not.
    srv = server_factory("ok")
    client = vf.ModelClient(base_url=srv.base_url)
    release = asyncio.Event()

    class Stuck(Exact):
        async def score_group(self, states: list[State]) -> None:
            await release.wait()  # never set: only the budget can end this

    plan = GroupPlan(plan_for=lambda row: RolloutPlan(init_state=fresh_state, turns=LOOP, timeout=5.0), scorer=Stuck())
    outcome = await run_rollout(plan.plan_for({}), rows(1, 1)[0][0], client, "m", {})
    assert outcome.time_left is not None and 0.0 < outcome.time_left <= 5.0 and outcome.state["error"] is None
    states = await run_group(plan, rows(1, 2)[0], client, "m", {})
    await client.aclose()
    assert [st["error"]["source"] for st in states] == ["timeout", "timeout"]
    assert all("scoring" in st["error"]["message"] and st["metrics"] == {"exact": 0.0} for st in states)


async def test_a_custom_play_replaces_the_turn_loop(server_factory) -> None:
    srv = server_factory("unused")

    async def play(state: State, client: ModelClientProtocol, model: str, sampling_args: Any) -> None:
        state["completion"] = [{"role": "assistant", "content": "ok"}]
        state["is_completed"] = True

    plan = GroupPlan(plan_for=lambda row: RolloutPlan(init_state=fresh_state, play=play), scorer=Exact())
    client = vf.ModelClient(base_url=srv.base_url)
    states = await run_group(plan, rows(1, 3)[0], client, "m", {})
    await client.aclose()
    assert [st["reward"] for st in states] == [1.0, 1.0, 1.0] and srv.requests == []


async def test_the_collector_is_relaxed_for_the_whole_classic_run_and_restored_after(server_factory) -> None:
    import gc

    seen: dict[str, int] = {}

    class Watched(vf.SingleTurnEnv):
        def format_prompt(self, question: Any, system_prompt: Any = None, few_shot: Any = None) -> Any:
            seen.setdefault("formatting", gc.get_threshold()[0])  # rows are formatted inside evaluate
            return super().format_prompt(question, system_prompt, few_shot)

    def exact(completion: Any, answer: Any, **kwargs: Any) -> float:
        seen.setdefault("scoring", gc.get_threshold()[0])
        return 1.0

    before = gc.get_threshold()
    srv = server_factory("ok")
    env = Watched(eval_dataset=[{"question": "q", "answer": "ok"}], rubric=vf.Rubric(funcs=[exact]))
    out = await env.evaluate(vf.ClientConfig(base_url=srv.base_url), "m")
    assert out["metadata"]["avg_reward"] == 1.0
    assert seen["formatting"] >= 50_000 and seen["scoring"] >= 50_000
    assert gc.get_threshold() == before
