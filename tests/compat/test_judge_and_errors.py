"""The classic error taxonomy and the judge's prompt, as environments written for the classic library use them."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import verifiers as vf
from verifiers import errors
from verifiers.testing import ScriptedServer, by_turn, tool_call, tool_calls


def state_for(prompt: Any, completion: str = "4", answer: str = "4") -> vf.State:
    return vf.State(
        prompt=prompt, completion=[{"role": "assistant", "content": completion}], answer=answer, task="default",
        info={}, example_id=0, error=None, timing={"scoring_ms": 0.0},
    )


# ----- the judge's prompt ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "question"),
    [
        ([{"role": "system", "content": "Compute 2+2 and answer with a number."}], "Compute 2+2 and answer with a number."),
        (
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "ex"},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "What is 2+2?"}],
            "What is 2+2?",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}], "What is 2+2?"),
        ("Q: what is 2+2?", "Q: what is 2+2?"),
    ],
    ids=["system-only", "few-shot", "content-parts", "completion-prompt"],
)
async def test_judge_prompt_gets_the_question_whatever_the_roles(prompt: Any, question: str) -> None:
    from openai import AsyncOpenAI

    with ScriptedServer("yes") as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k")
        rubric = vf.JudgeRubric(judge_client=client, judge_prompt="Q={question}|A={answer}|R={response}")
        verdict = await rubric.judge(prompt, [{"role": "assistant", "content": "four"}], "4", {})
        await client.close()
        sent = srv.requests[0].messages
    assert verdict == "yes"
    assert sent == [{"role": "user", "content": f"Q={question}|A=4|R=four"}]


async def test_judge_accepts_extra_keywords_and_classic_sampling_args() -> None:
    from openai import AsyncOpenAI

    with ScriptedServer("no") as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k")
        rubric = vf.JudgeRubric(
            judge_client=client, judge_model="j", parallelize_scoring=True,
            judge_sampling_args={"max_tokens": 7, "temperature": None, "top_p": 0.5},
        )

        async def judged(judge, prompt, completion, answer, state, **kwargs) -> float:
            # reward functions pass on what they got, as classic environments do
            verdict = await judge(prompt, completion, answer, state, **kwargs)
            return 1.0 if verdict == "yes" else 0.0

        rubric.add_reward_func(judged)
        states = [state_for([{"role": "system", "content": "2+2?"}])]
        await rubric.score_group(states)
        await client.close()
        body = srv.requests[0].body
    assert states[0]["error"] is None and states[0]["reward"] == 0.0
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body
    assert body["top_p"] == 0.5 and "temperature" not in body  # None means "not set"
    assert rubric.class_objects["judge_sampling_args"] == {"max_tokens": 7, "temperature": None, "top_p": 0.5}


# ----- the error taxonomy ----------------------------------------------------------------------------


def test_classic_taxonomy_has_one_home_and_the_classic_tree() -> None:
    tree = {
        "ModelError": "Error", "InvalidModelResponseError": "ModelError", "EmptyModelResponseError": "InvalidModelResponseError",
        "OverlongPromptError": "Error", "ToolError": "Error", "ToolParseError": "ToolError", "ToolCallError": "ToolError",
        "InfraError": "Error", "TunnelError": "InfraError", "SandboxError": "InfraError", "BrowserSandboxError": "SandboxError",
    }
    for name, parent in tree.items():
        cls = getattr(errors, name)
        assert cls.__bases__[0] is getattr(errors, parent), name
        assert getattr(vf, name) is cls  # `vf.X` is the same class
    from verifiers.clients import ModelError as ClientModelError
    from verifiers.sandbox import SandboxError as LocalSandboxError

    assert ClientModelError is errors.ModelError and LocalSandboxError is errors.SandboxError
    assert vf.VerifiersError is vf.Error and issubclass(vf.JudgeError, vf.Error)
    assert issubclass(vf.ModelTimeoutError, vf.ModelError) if hasattr(vf, "ModelTimeoutError") else True


def test_model_error_keeps_both_ways_of_building_it() -> None:
    classic = vf.EmptyModelResponseError("model returned nothing")
    assert str(classic) == "model returned nothing" and classic.status is None and not classic.transient
    request = vf.ModelError(503, "overloaded", True, attempts=3)
    assert (request.status, request.transient, str(request)) == (503, True, "HTTP 503: overloaded after 3 attempts")
    for err in (classic, request, errors.ModelTimeoutError("slow", attempts=2)):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
        assert (back.status, back.transient, back.attempts) == (err.status, err.transient, err.attempts)
    assert str(vf.ModelError()) == ""


class RaisingEnv(vf.MultiTurnEnv):
    """Raises a classic error from env_response, as sandbox and API-backed environments do."""

    def __init__(self, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    async def env_response(self, messages, state, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    ("kind", "text"), [("InfraError", "service down"), ("SandboxError", "sandbox lost"), ("ToolParseError", "bad args")]
)
async def test_engine_records_classic_errors_by_class(kind: str, text: str) -> None:
    # built here, not in the parameters: a raised exception's traceback keeps the rollout's frames alive
    error = getattr(vf, kind)(text)
    with ScriptedServer("hi") as srv:
        env = RaisingEnv(error, dataset=[{"question": "q", "answer": "a"}], max_turns=3)
        out = await env.evaluate(client=srv.base_url, model="m", num_examples=1, rollouts_per_example=1)
    state = out["outputs"][0] if isinstance(out, dict) else out.state[0]
    err = state["error"]
    # an infrastructure failure is told apart from the environment's own (not a score: see errors.py)
    expected_kind = "environment" if kind == "ToolParseError" else "infra"
    assert err == {"type": kind, "message": text, "source": "env_response", "kind": expected_kind}


def flaky_lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    if key == "down":
        raise vf.InfraError("lookup service down")
    raise vf.ToolError(f"no such key {key}")


async def test_tool_env_catches_and_stops_on_classic_errors() -> None:
    script = by_turn(tool_calls(tool_call("flaky_lookup", {"key": "x"}, id="t1")), tool_calls(tool_call("flaky_lookup", {"key": "down"}, id="t2")), "done")
    with ScriptedServer(script) as srv:
        env = vf.ToolEnv(tools=[flaky_lookup], dataset=[{"question": "q", "answer": "a"}], stop_errors=[vf.InfraError], max_turns=5)
        out = await env.evaluate(client=srv.base_url, model="m", num_examples=1, rollouts_per_example=1)
    state = out["outputs"][0] if isinstance(out, dict) else out.state[0]
    tool_replies = [m for m in state["completion"] if m["role"] == "tool"]
    assert "no such key x" in tool_replies[0]["content"]  # a ToolError goes back to the model
    assert state["error"]["type"] == "InfraError"  # a stop error ends the rollout, recorded by class


async def test_reward_functions_may_return_a_reward_result() -> None:
    def graded(completion, answer) -> vf.RewardResult:
        ok = completion[-1]["content"] == answer
        return {"score": 1.0 if ok else 0.0, "feedback": "right" if ok else f"expected {answer}"}

    rubric = vf.Rubric(funcs=[graded])
    states = [state_for([{"role": "user", "content": "2+2?"}], completion="4"), state_for("2+2?", completion="5")]
    await rubric.score_group(states)
    assert [s["reward"] for s in states] == [1.0, 0.0] and all(s["error"] is None for s in states)


class TooLongEnv(vf.MultiTurnEnv):
    """Checks its own context budget before calling the model, raising the classic error."""

    async def get_model_response(self, *args: Any, **kwargs: Any) -> Any:
        raise vf.OverlongPromptError("prompt exceeds the budget")

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "more"}]


async def test_overlong_prompt_error_ends_the_rollout_as_prompt_too_long() -> None:
    with ScriptedServer("unused") as srv:
        env = TooLongEnv(dataset=[{"question": "q", "answer": "a"}], max_turns=3)
        out = await env.evaluate(client=srv.base_url, model="m", num_examples=1, rollouts_per_example=1)
        assert srv.request_count == 0
    state = out["outputs"][0] if isinstance(out, dict) else out.state[0]
    assert state["stop_condition"] == "prompt_too_long" and state["error"] is None


async def test_a_failing_judge_can_be_caught_as_the_classic_runtime_error() -> None:
    from openai import AsyncOpenAI

    from verifiers.testing import error

    with ScriptedServer(error(500, "judge down")) as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        rubric = vf.JudgeRubric(judge_client=client)

        async def lenient(judge, prompt, completion, answer, state) -> float:
            try:
                return 1.0 if "yes" in await judge(prompt, completion, answer, state) else 0.0
            except RuntimeError:  # how classic environments guard their judge calls
                return 0.5

        rubric.add_reward_func(lenient)
        states = [state_for([{"role": "user", "content": "2+2?"}])]
        await rubric.score_group(states)
        await client.close()
    assert states[0]["reward"] == 0.5 and states[0]["error"] is None


async def test_classic_rubric_keywords_are_accepted_with_their_meaning() -> None:
    assert vf.Rubric(parallelize_scoring=False).parallelize_scoring is False  # 0.1.x keyword
    math = vf.MathRubric(max_verify_chars=3)  # 0.3 keyword: longer answers score 0 unchecked
    long_answer = [{"role": "assistant", "content": r"\boxed{1234}"}]
    short_answer = [{"role": "assistant", "content": r"\boxed{12}"}]
    assert await math.correct_answer(math.parser, long_answer, "1234") == 0.0
    assert await math.correct_answer(math.parser, short_answer, "12") == 1.0
