"""Environments written the way public ones are, in both API generations, run unmodified."""

from __future__ import annotations

import json
from typing import Any

import pytest

import verifiers as vf
from verifiers.testing import by_turn, tool_call, tool_calls


def exact_answer(completion, answer, parser) -> float:
    return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0


# ----- OLD generation (<= 0.1.7): is_completed override, tuple-returning env_response, oai_tools ----


class OldGuessEnv(vf.MultiTurnEnv):
    """Guess a number; the environment says higher/lower (classic style)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    async def is_completed(self, messages, state, **kwargs) -> bool:
        return state.get("solved", False) or state["turn"] >= 5

    async def env_response(self, messages, state, **kwargs):
        guess = messages[-1]["content"].strip()
        if guess == state["answer"]:
            state["solved"] = True
            return [{"role": "user", "content": "correct"}], state
        return [{"role": "user", "content": "wrong, try again"}], state


def test_old_multiturn_env_sync_evaluate_and_columns(server_factory) -> None:
    srv = server_factory(by_turn("1", "2", "7"))
    rows = [{"question": "guess", "answer": "7"}, {"question": "guess", "answer": "2"}]
    env = OldGuessEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda state: 1.0 if state.get("solved") else 0.0]))
    # OLD: evaluate is synchronous and returns a column-oriented object
    results = env.evaluate(client=srv.base_url, model="m", num_examples=2, rollouts_per_example=1)
    assert results.reward == [1.0, 1.0]
    assert results.metrics["<lambda>"] == [1.0, 1.0]
    first = results.completion[0]
    assert [m["content"] for m in first] == ["1", "wrong, try again", "2", "wrong, try again", "7", "correct"]
    assert results.state[0]["stop_condition"] == "is_completed"
    assert results.state[1]["turn"] == 2


class OldCounterEnv(vf.MultiTurnEnv):
    """An OLD env that returns a single message dict (0.1.0 style) and never completes itself."""

    async def is_completed(self, messages, state, **kwargs) -> bool:
        return False

    async def env_response(self, messages, state, **kwargs):
        state["count"] = state.get("count", 0) + 1
        return {"role": "user", "content": f"count {state['count']}"}, state


async def test_max_turns_still_applies_to_old_envs(server_factory) -> None:
    srv = server_factory("x")
    env = OldCounterEnv(dataset=[{"question": "go"}], max_turns=3)
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    assert st["turn"] == 3 and st["stop_condition"] == "max_turns_reached" and st["count"] == 2


def lookup(key: str) -> str:
    """Look up a value.

    Args:
        key: The key.
    """
    return {"a": "alpha"}.get(key, "missing")


class OldToolCallingEnv(vf.MultiTurnEnv):
    """A hand-written OLD tool env: passes oai_tools and runs tools in env_response."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(oai_tools=[vf.convert_func_to_oai_tool(lookup)], **kwargs)

    async def is_completed(self, messages, state, **kwargs) -> bool:
        last = messages[-1]
        return last["role"] == "assistant" and not last.get("tool_calls")

    async def env_response(self, messages, state, **kwargs):
        out = []
        for call in messages[-1]["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            out.append({"role": "tool", "content": lookup(**args), "tool_call_id": call["id"]})
        return out, state


async def test_old_oai_tools_are_sent_and_work(server_factory) -> None:
    srv = server_factory(by_turn(tool_calls(tool_call("lookup", {"key": "a"}, id="t1")), "alpha"))
    env = OldToolCallingEnv(dataset=[{"question": "what is a?", "answer": "alpha"}], rubric=vf.Rubric(funcs=[exact_answer]))
    out = await env.evaluate(srv.base_url, "m")
    assert out.reward == [1.0]
    assert srv.requests[0].tools[0]["function"]["name"] == "lookup"
    assert out.completion[0][1] == {"role": "tool", "content": "alpha", "tool_call_id": "t1"}


class SdkShapedToolEnv(vf.MultiTurnEnv):
    """An early-0.1.x env: reads tool calls and replies as the OpenAI SDK's objects
    (``tool_call.function.name``, ``state["responses"][-1].choices[0].finish_reason``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(oai_tools=[vf.convert_func_to_oai_tool(lookup)], **kwargs)

    async def is_completed(self, messages, state, **kwargs) -> bool:
        responses = state["responses"]
        if not responses:
            return False
        choice = responses[-1].choices[0]
        state.setdefault("seen", []).append((choice.finish_reason, choice.message.content))
        return choice.finish_reason != "tool_calls"

    async def env_response(self, messages, state, **kwargs):
        out = []
        for call in messages[-1]["tool_calls"]:
            args = json.loads(call.function.arguments)
            out.append({"role": "tool", "content": f"{call.function.name}: {lookup(**args)}", "tool_call_id": call.id})
        return out, state


async def test_tool_calls_and_responses_read_as_sdk_objects(server_factory) -> None:
    srv = server_factory(by_turn(tool_calls(tool_call("lookup", {"key": "a"}, id="t1")), "alpha"))
    env = SdkShapedToolEnv(dataset=[{"question": "what is a?", "answer": "alpha"}], rubric=vf.Rubric(funcs=[exact_answer]))
    out = await env.evaluate(srv.base_url, "m")
    state = out.state[0]
    assert state["error"] is None, state["error"]
    assert out.completion[0][1] == {"role": "tool", "content": "lookup: alpha", "tool_call_id": "t1"}
    assert list(dict.fromkeys(state["seen"])) == [("tool_calls", None), ("stop", "alpha")]  # asked once or more per turn
    assert out.reward == [1.0]


def test_old_generate_is_sync_and_a_generate_awaitable(server_factory) -> None:
    srv = server_factory("4")
    env = vf.SingleTurnEnv(dataset=[{"question": "2+2?", "answer": "4"}], rubric=vf.Rubric(funcs=[exact_answer]))
    inputs = {"prompt": [[{"role": "user", "content": "2+2?"}]] * 3, "answer": ["4", "5", "4"]}
    res = env.generate(inputs, client=srv.base_url, model="m")
    assert res.reward == [1.0, 0.0, 1.0]
    import asyncio

    res2 = asyncio.run(env.a_generate(inputs, srv.base_url, "m"))
    assert res2["metadata"]["num_rollouts"] == 3


def test_run_keywords_classic_ones_accepted_typos_refused(server_factory) -> None:
    srv = server_factory("4")
    env = vf.SingleTurnEnv(dataset=[{"question": f"{i}+{i}?", "answer": "4"} for i in range(5)])
    # a misspelt num_examples used to be swallowed: the whole eval set ran instead of 2 rows
    with pytest.raises(TypeError, match=r"evaluate\(\) got unexpected keyword argument\(s\) 'num_exampels' \(did you mean 'num_examples'\?\)"):
        env.evaluate(srv.base_url, "m", num_exampels=2)
    with pytest.raises(TypeError, match=r"'rollouts_per_exmaple' \(did you mean 'rollouts_per_example'\?\)"):
        env.evaluate_sync(srv.base_url, "m", rollouts_per_exmaple=2)
    with pytest.raises(TypeError, match=r"generate\(\) got unexpected keyword argument\(s\) 'sampling_arg' \(did you mean 'sampling_args'\?\)"):
        env.generate([{"question": "2+2?"}], srv.base_url, "m", sampling_arg={"temperature": 0})
    assert srv.requests == []  # refused before any request
    # the classic keywords still run (0.1.x concurrency split and saves; 0.3 shuffling and callbacks)
    out = env.evaluate(srv.base_url, "m", num_examples=2, max_concurrent_generation=2, interleave_scoring=True,
                       save_every=-1, on_log=None)
    assert len(out.reward) == 2
    res = env.generate([{"question": "2+2?"}], srv.base_url, "m", use_tqdm=False, num_examples=1)
    assert len(res.reward) == 1


def test_classic_shuffle_picks_the_rows_datasets_shuffle_picks(server_factory) -> None:
    from datasets import Dataset

    srv = server_factory("4")
    rows = [{"question": f"q{i}", "answer": "4"} for i in range(10)]
    env = vf.SingleTurnEnv(dataset=rows)
    # 0.3.x evaluate(shuffle=True, shuffle_seed=...): the first n rows of the shuffled eval set, in the
    # order `datasets` shuffles them (what the classic library ran)
    out = env.evaluate(srv.base_url, "m", num_examples=4, shuffle=True, shuffle_seed=7)
    expected = Dataset.from_list(rows).shuffle(seed=7)["question"][:4]
    assert [p[-1]["content"] for p in out.prompt] == expected
    assert expected != [r["question"] for r in rows[:4]]  # the seed really reorders these rows
    # shuffle without a seed uses seed 0, as the classic library did
    out = env.evaluate(srv.base_url, "m", num_examples=3, shuffle=True)
    assert [p[-1]["content"] for p in out.prompt] == Dataset.from_list(rows).shuffle(seed=0)["question"][:3]
    with pytest.raises(ValueError, match="shuffle_seed"):
        env.evaluate(srv.base_url, "m", shuffle=True, shuffle_seed=-1)


async def test_classic_semaphores_bound_requests_and_scoring(server_factory) -> None:
    import asyncio

    class Counting(asyncio.Semaphore):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.acquired = 0

        async def acquire(self) -> bool:
            self.acquired += 1
            return await super().acquire()

    srv = server_factory("4")
    env = vf.SingleTurnEnv(dataset=[{"question": f"{i}+{i}?", "answer": "4"} for i in range(3)])
    gen, score = Counting(1), Counting(1)
    # 0.1.x generate(semaphore= / generation_semaphore= / scoring_semaphore=): the caller's own gates
    out = await env.generate(env.get_eval_dataset(), srv.base_url, "m", generation_semaphore=gen,
                             scoring_semaphore=score, rollouts_per_example=2)
    assert len(out.reward) == 6
    assert gen.acquired == srv.request_count == 6  # every request went through the caller's semaphore
    assert score.acquired == 3  # one scoring pass per group
    plain = Counting(2)
    await env.evaluate(srv.base_url, "m", num_examples=2, semaphore=plain)
    assert plain.acquired == 2
    with pytest.raises(TypeError, match=r"semaphore must be an asyncio\.Semaphore"):
        env.evaluate(srv.base_url, "m", semaphore=3)


async def test_old_rollout_signature_returns_completion_and_state(server_factory) -> None:
    srv = server_factory("hello")
    env = vf.SingleTurnEnv(dataset=[{"question": "hi"}])
    completion, state = await env.rollout(srv.base_url, "m", [{"role": "user", "content": "hi"}], "ans")
    assert completion[-1]["content"] == "hello" and state["answer"] == "ans"


# ----- NEW generation: @vf.stop, message classes, setup/cleanup hooks, final_env_response ---------


class NewWordleLike(vf.MultiTurnEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_turns=10, **kwargs)
        self.cleaned: list[int] = []

    async def setup_state(self, state: vf.State, **kwargs) -> vf.State:
        state["secret"] = state["answer"]
        state["guesses"] = []
        return state

    @vf.stop
    async def guessed(self, state: vf.State, **kwargs) -> bool:
        return bool(state["guesses"]) and state["guesses"][-1] == state["secret"]

    @vf.stop(priority=5)
    async def too_many(self, state: vf.State, **kwargs) -> bool:
        return len(state["guesses"]) >= 3

    @vf.cleanup
    async def release(self, state: vf.State) -> None:
        self.cleaned.append(state["example_id"])

    async def env_response(self, messages, state, **kwargs):
        guess = messages[-1].content.strip()  # NEW: attribute access on messages
        state["guesses"].append(guess)
        if guess == state["secret"]:
            return []
        if guess == "quit":
            state["final_env_response"] = [vf.UserMessage("bye")]
            return state["final_env_response"]
        return [vf.UserMessage(content=f"{guess} is wrong")]


async def test_new_style_stop_decorators_and_hooks(server_factory) -> None:
    srv = server_factory(by_turn("apple", "crane", "quit"))
    rows = [{"question": "guess", "answer": "crane"}, {"question": "guess", "answer": "zzz"}]
    env = NewWordleLike(dataset=rows, rubric=vf.Rubric(funcs=[lambda state: float(state["guesses"][-1] == state["answer"])]))
    out = await env.evaluate(srv.base_url, "m")
    s0, s1 = out.state
    # the NEW (0.3.x) loop checks the stops after a model turn, not after the env's reply: the right
    # guess is found in env_response, so the model still gets one more turn, as 0.3.0 gives it
    assert s0["stop_condition"] == "guessed" and s0["reward"] == 1.0 and s0["turn"] == 3
    assert [m["content"] for m in s0["completion"]] == ["apple", "apple is wrong", "crane", "quit"]
    # the third guess both quits and reaches too_many (priority 5): as in the classic library, a stop of
    # higher priority is checked before the built-ins (priority 0; has_error alone has 100)
    assert s1["stop_condition"] == "too_many" and s1["completion"][-1] == {"role": "user", "content": "bye"}
    assert s1["reward"] == 0.0
    assert sorted(env.cleaned) == [0, 1]
    assert isinstance(s0["completion"][0], vf.AssistantMessage)
    assert s0["trajectory"][1]["prompt"][-1]["content"] == "apple is wrong"


async def test_final_env_response_ends_the_completion_in_place_of_the_last_reply(server_factory) -> None:
    """NEW loop, as 0.3.0: the reply that set ``final_env_response`` is not kept; the completion ends
    with ``final_env_response`` (a string as one ``text`` message), and no model call follows."""

    class Ends(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            if messages[-1]["content"] == "fin":
                state["final_env_response"] = state["answer"] or [vf.UserMessage("bye")]
                return [vf.UserMessage("dropped")]
            return [vf.UserMessage("go on")]

    srv = server_factory(by_turn("a", "fin", "never"))
    env = Ends(dataset=[{"question": "q", "answer": "final words"}, {"question": "q", "answer": ""}], max_turns=5)
    out = await env.evaluate(srv.base_url, "m")
    s0, s1 = out.state
    assert [(m["role"], m["content"]) for m in s0["completion"]] == [
        ("assistant", "a"), ("user", "go on"), ("assistant", "fin"), ("text", "final words")
    ]
    assert s1["completion"][-1] == {"role": "user", "content": "bye"}
    assert s0["stop_condition"] == s1["stop_condition"] == "has_final_env_response"
    assert srv.request_count == 4


async def test_an_old_env_is_checked_again_after_its_reply(server_factory) -> None:
    """OLD loop, as 0.1.7: ``is_completed`` runs after the env's reply too, so a game won inside
    ``env_response`` ends before another model call."""

    class OldGame(vf.MultiTurnEnv):
        async def is_completed(self, messages, state, **kwargs):
            return state.get("won", False)

        async def env_response(self, messages, state, **kwargs):
            state["won"] = messages[-1]["content"] == "crane"
            return [{"role": "user", "content": "correct" if state["won"] else "wrong"}], state

    srv = server_factory(by_turn("apple", "crane", "never"))
    env = OldGame(dataset=[{"question": "q"}], max_turns=5)
    out = await env.evaluate(srv.base_url, "m")
    assert [m["content"] for m in out.state[0]["completion"]] == ["apple", "wrong", "crane", "correct"]
    assert srv.request_count == 2


async def test_new_style_env_response_returning_plain_list(server_factory) -> None:
    class Echo(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "again"}]

    srv = server_factory("x")
    env = Echo(dataset=[{"prompt": [{"role": "user", "content": "start"}]}], max_turns=2, system_prompt="S")
    out = await env.evaluate(srv.base_url, "m")
    st = out.state[0]
    assert st["prompt"][0] == {"role": "system", "content": "S"}  # system prompt prepended to a ready prompt
    assert [m["role"] for m in st["completion"]] == ["assistant", "user", "assistant"]


async def test_setup_state_error_is_recorded(server_factory) -> None:
    class Broken(vf.MultiTurnEnv):
        async def setup_state(self, state, **kwargs):
            raise OSError("no sandbox")

        async def env_response(self, messages, state, **kwargs):
            return []

    srv = server_factory("x")
    out = await Broken(dataset=[{"question": "q"}], max_turns=2).evaluate(srv.base_url, "m")
    assert out.state[0]["error"]["source"] == "setup" and srv.request_count == 0
    assert out["metadata"]["num_errors"] == 1 and out["metadata"]["errors_by_source"] == {"setup": 1}


async def test_env_response_error_is_recorded(server_factory) -> None:
    class Broken(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            raise KeyError("oops")

    srv = server_factory("x")
    out = await Broken(dataset=[{"question": "q"}], max_turns=3).evaluate(srv.base_url, "m")
    st = out.state[0]
    assert st["error"]["source"] == "env_response" and st["stop_condition"] == "has_error" and st["turn"] == 1


async def test_completion_mode(server_factory) -> None:
    srv = server_factory("42")
    env = vf.SingleTurnEnv(dataset=[{"question": "6*7=", "answer": "42"}], message_type="completion",
                           rubric=vf.Rubric(funcs=[lambda completion, answer: float(completion.strip() == answer)]))
    out = await env.evaluate(srv.base_url, "m")
    assert out.reward == [1.0]
    assert srv.requests[0].path.endswith("/completions") and srv.requests[0].prompt == "6*7="


def test_dataset_without_question_or_prompt_is_rejected() -> None:
    with pytest.raises(ValueError, match="question"):
        vf.SingleTurnEnv(dataset=[{"text": "x"}])
    with pytest.raises(ValueError, match="dataset"):
        vf.SingleTurnEnv()
    lazy = vf.SingleTurnEnv(dataset=lambda: [{"text": "x"}])
    with pytest.raises(ValueError, match="question"):
        lazy.get_dataset()


def test_dataset_kinds_and_row_formatting() -> None:
    from datasets import Dataset

    rows = [{"question": "q1", "answer": "a1", "info": '{"k": 1}', "difficulty": 3}, {"question": "q2", "answer": "a2"}]
    few_shot = [{"role": "user", "content": "ex"}, {"role": "assistant", "content": "ex-ans"}]
    for source in (rows, Dataset.from_list(rows), {"question": ["q1", "q2"], "answer": ["a1", "a2"]}, lambda: rows):
        env = vf.SingleTurnEnv(dataset=source, system_prompt="S", few_shot=few_shot)
        data = env.get_dataset()
        first = data[0]
        assert [m["role"] for m in first["prompt"]] == ["system", "user", "assistant", "user"]
        assert first["prompt"][-1]["content"] == "q1" and first["answer"] == "a1" and first["example_id"] == 0
        assert first["task"] == "default"
    env = vf.SingleTurnEnv(dataset=rows)
    assert env.get_dataset()[0]["info"] == {"k": 1} and env.get_dataset()[0]["difficulty"] == 3
    assert isinstance(vf.SingleTurnEnv(dataset=Dataset.from_list(rows)).get_dataset(), Dataset)
    assert len(env.get_dataset(n=1)) == 1 and len(env.get_eval_dataset()) == 2  # eval falls back to train
    shuffled = [r["question"] for r in vf.SingleTurnEnv(dataset=[{"question": str(i)} for i in range(20)]).get_dataset(seed=1)]
    assert shuffled != [str(i) for i in range(20)] and sorted(shuffled) == sorted(str(i) for i in range(20))


async def test_extra_columns_reach_reward_functions(server_factory) -> None:
    srv = server_factory("x")
    seen = []
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "difficulty": "hard"}],
                           rubric=vf.Rubric(funcs=[lambda difficulty: seen.append(difficulty) or 1.0]))
    await env.evaluate(srv.base_url, "m")
    assert seen == ["hard"]


def test_set_kwargs_unknown_keywords_and_seq_len() -> None:
    # Classic constructors (0.1.x and 0.3.x Environment, 0.1.x Rubric) turned unknown keywords into
    # attributes, and real environments rely on it; a typo is kept the same way but warned about,
    # naming the closest accepted keyword ...
    with pytest.warns(UserWarning, match=r"SingleTurnEnv\(\) got an unknown keyword argument 'sytem_prompt' \(did you mean 'system_prompt'\?\)"):
        env = vf.SingleTurnEnv(dataset=[{"question": "q"}], sytem_prompt="S")
    assert env.sytem_prompt == "S" and env.system_prompt is None
    with pytest.warns(UserWarning, match="'custom_option'"):
        assert vf.SingleTurnEnv(dataset=[{"question": "q"}], custom_option=3).custom_option == 3
    with pytest.warns(UserWarning, match=r"Rubric\(\) got an unknown keyword argument 'weight' \(did you mean 'weights'\?\)"):
        assert vf.Rubric(funcs=[], weight=[]).weight == []
    # ... and refused only where every classic release refused it (the classic parsers took none).
    with pytest.raises(TypeError, match=r"XMLParser\(\) got an unexpected keyword argument 'field'"):
        vf.XMLParser(field=["answer"])
    with pytest.raises(TypeError, match=r"MathRubric\(\) got an unexpected keyword argument 'max_verify_char'"):
        vf.MathRubric(max_verify_char=10)  # 0.1.7's and 0.3.0's MathRubric took no **kwargs
    # ... while every keyword the classic constructors take still works.
    env = vf.ToolEnv(dataset=[{"question": "q"}], map_kwargs={"num_proc": 2}, pass_threshold=0.5, max_turns=3,
                     timeout_seconds=5.0, stop_errors=[ValueError], message_type="chat", max_workers=4)
    assert env.map_kwargs == {"num_proc": 2} and env.pass_threshold == 0.5
    assert vf.JudgeRubric(parallelize_scoring=False).parallelize_scoring is False
    assert vf.MathRubric(max_verify_chars=1000).max_verify_chars == 1000
    env.set_kwargs(temperature_hint=0.5)
    env.set_max_seq_len(128)
    assert env.temperature_hint == 0.5 and env.max_seq_len == 128


class WithTeardown(vf.SingleTurnEnv):
    def __init__(self, marker: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker = marker

    @vf.teardown
    async def shutdown(self) -> None:
        from pathlib import Path

        marker = Path(self.marker)
        marker.write_text((marker.read_text() if marker.exists() else "") + "down\n")  # noqa: ASYNC240


async def test_teardown_runs_once_on_aclose(tmp_path) -> None:
    marker = tmp_path / "marker"
    env = WithTeardown(str(marker), dataset=[{"question": "q"}])
    await env.aclose()
    await env.aclose()
    assert marker.read_text() == "down\n"


def test_teardown_runs_at_exit_when_never_closed(tmp_path) -> None:
    import subprocess
    import sys

    marker = tmp_path / "marker"
    code = (
        "import verifiers as vf\n"
        "class E(vf.SingleTurnEnv):\n"
        "    @vf.teardown\n"
        "    def bye(self):\n"
        f"        open({str(marker)!r}, 'a').write('bye\\n')\n"
        "env = E(dataset=[{'question': 'q'}])\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert marker.read_text() == "bye\n"


def test_old_make_dataset_and_state_columns(server_factory) -> None:
    srv = server_factory("4")

    class Tagging(vf.SingleTurnEnv):
        async def setup_state(self, state, **kwargs):
            state["tag"] = f"t{state['example_id']}"
            return state

    env = Tagging(dataset=[{"question": "2+2", "answer": "4"}, {"question": "3+3", "answer": "6"}],
                  rubric=vf.Rubric(funcs=[exact_answer]))
    results = env.evaluate(srv.base_url, "m", state_columns=["tag"])
    assert [o["tag"] for o in results["outputs"]] == ["t0", "t1"]
    ds = env.make_dataset(results, state_columns=["tag"])
    assert ds.column_names[:6] == ["example_id", "prompt", "completion", "answer", "task", "reward"]
    assert ds["exact_answer"] == [1.0, 0.0] and ds["tag"] == ["t0", "t1"]
    with pytest.raises(ValueError, match="push_to_hub"):
        env.make_dataset(results, push_to_hub=True)


async def test_old_get_model_response_argument_order(server_factory) -> None:
    srv = server_factory("hi")
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}])
    prompt = [{"role": "user", "content": "q"}]
    new_order = await env.get_model_response(srv.base_url, "m", prompt)
    old_order = await env.get_model_response(prompt, srv.base_url, "m")
    assert new_order.message["content"] == old_order.message["content"] == "hi"
    await env.aclose()


def test_a_classic_0_1_environment_passing_a_concurrency_keyword_loads(server_factory, recwarn) -> None:
    # A real 0.1.x environment: load_environment() hands SingleTurnEnv its concurrency setting, which
    # 0.1.x kept as an attribute (its evaluate read it back); it must load and run here too.
    import warnings

    def load_environment(**kwargs):
        return vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}], rubric=vf.Rubric(funcs=[lambda completion: 1.0]),
                                max_concurrent=32, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a keyword a classic release documented is no typo: no warning
        env = load_environment()
    assert env.max_concurrent == 32
    out = env.evaluate(server_factory("a").base_url, "m")
    assert out.reward == [1.0]


class _TwoTurns(vf.MultiTurnEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_turns=2, **kwargs)
        self.order: list[str] = []

    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage("again")]

    @vf.cleanup
    async def zz_last(self, state: vf.State) -> None:
        self.order.append("zz_last")

    @vf.cleanup
    async def aa_first(self, state: vf.State) -> None:
        self.order.append("aa_first")


class _EndsEarlyByName(_TwoTurns):
    @vf.stop
    async def zeta_done(self, state: vf.State) -> bool:  # after max_turns_reached by name
        return state["turn"] >= 2

    @vf.stop
    async def alpha_done(self, state: vf.State) -> bool:  # before max_turns_reached by name
        return state["turn"] >= 2


class _EndsLateByName(_TwoTurns):
    @vf.stop
    async def zeta_done(self, state: vf.State) -> bool:
        return state["turn"] >= 2


async def test_stops_and_cleanups_of_one_priority_run_in_name_order(server_factory) -> None:
    """The classic library checks @vf.stop methods by priority, then by name, the built-ins among
    them (``max_turns_reached`` has priority 0): when several fire on the same turn, the first by
    that order is the stop condition. Cleanup hooks run in the same order."""
    rows = [{"question": "q", "answer": "a"}]
    for cls, expected in ((_EndsEarlyByName, "alpha_done"), (_EndsLateByName, "max_turns_reached")):
        srv = server_factory(by_turn("one", "two"))
        env = cls(dataset=rows, rubric=vf.Rubric(funcs=[lambda state: 1.0]))
        out = await env.evaluate(srv.base_url, "m")
        (st,) = out.state
        assert st["turn"] == 2 and st["stop_condition"] == expected, (cls.__name__, st["stop_condition"])
        assert env.order == ["aa_first", "zz_last"]
