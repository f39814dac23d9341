"""Judges: verdict parsing, each built-in judge's parse/score, config plugging, and whole runs
(``run_v1``) against a loopback scripted server that answers both the policy and the judge."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

import verifiers.v1 as vf
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply
from verifiers.v1.env import load_environment
from verifiers.v1.judge import JudgeError
from verifiers.v1.judges.rubric import CriterionVerdict, load_criteria, score_verdicts
from verifiers.v1.rollout import run_v1

# --- parse_judge_choice -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "choices", "expected"),
    [
        ("A is tempting, but FINAL ANSWER: B", ("A", "B"), "B"),
        ("final verdict is c\nthen some text naming A", ("A", "B", "C"), "C"),
        ("Verdict: B\nFINAL JUDGMENT - A", ("A", "B"), "A"),  # the final line wins over the label
        ("<think>surely A</think>\nThe answer is B", ("A", "B"), "B"),
        ("<think>still thinking about A", ("A", "B"), None),  # reasoning that never closed
        ("It has to be \\boxed{B}, not A", ("A", "B"), "B"),
        ("Judgment: it is unclear", ("A", "B"), None),  # a label naming no choice is no verdict
        ("Judgment: maybe B, or A", ("A", "B"), "B"),  # the first choice after the label
        ("first A then B then A", ("A", "B"), "A"),  # no label: the last choice named
        ("yesterday was fine", ("yes", "no"), None),  # whole words only
        ("YES.", ("yes", "no"), "yes"),  # returned as the choices spell it
        ("", ("A",), None),
        (None, ("A",), None),
    ],
)
def test_parse_judge_choice(text, choices, expected) -> None:
    assert vf.parse_judge_choice(text, choices) == expected


def test_parse_judge_choice_on_a_huge_hostile_reply() -> None:
    # many line starts and labels with no choice: the label rule gives no verdict, quickly enough to finish
    text = "\n" * 200_000 + "ANSWER:" + " " * 100_000 + "\n" * 100_000
    assert vf.parse_judge_choice(text, ("yes", "no")) is None
    assert vf.parse_judge_choice(("no " * 100_000) + "\nFINAL ANSWER: yes", ("yes", "no")) == "yes"


def test_parse_judge_choice_on_blanks_after_a_final_label() -> None:
    # a final-verdict label then a run of blanks naming no choice (the judge's reply, or an agentic
    # judge's 1 MiB verdict file): parsing must finish, not backtrack for hours on the worker's loop.
    # Run in a child with a generous limit so the old behaviour fails the test instead of hanging it.
    import subprocess
    import sys

    program = (
        "import verifiers.v1 as vf\n"
        "for label in ('FINAL VERDICT', 'FINAL ANSWER IS', 'FINAL JUDGMENT -'):\n"
        "    assert vf.parse_judge_choice(label + ' \\t' * 250_000 + 'x', ('yes', 'no')) is None\n"
        "    assert vf.parse_judge_choice((label + ' ' * 200 + 'x\\n') * 2_000 + label + ': no', ('yes', 'no')) == 'no'\n"
        "print('done')\n"
    )
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr[-2000:]
    for text, expected in (("FINAL VERDICTIS yes", "yes"), ("  FINAL   ANSWER  IS  :  no", "no"), ("FINAL VERDICT-no", "no")):
        assert vf.parse_judge_choice(text, ("yes", "no")) == expected


def test_extract_boxed_answer() -> None:
    assert vf.extract_boxed_answer("x \\boxed{1} y \\boxed{\\frac{1}{2}} z") == "\\frac{1}{2}"
    assert vf.extract_boxed_answer("open \\boxed{1", strict=True) == ""
    assert vf.extract_boxed_answer("no box") == "no box"


# --- each judge's parse / score -----------------------------------------------------------------


def test_reference_judge_parse() -> None:
    judge = vf.ReferenceJudge()
    assert judge.parse(vf.JudgeResponse(text="Yes.")) == 1.0
    assert judge.parse(vf.JudgeResponse(text="no, it names another city")) == 0.0
    with pytest.raises(JudgeError, match="names none of yes/no"):
        judge.parse(vf.JudgeResponse(text="I cannot tell"))
    lettered = vf.ReferenceJudge(vf.ReferenceJudgeConfig(choices=("A", "B")))
    assert lettered.parse(vf.JudgeResponse(text="FINAL VERDICT: B")) == 0.0
    with pytest.raises(ValueError, match="two different"):
        vf.ReferenceJudgeConfig(choices=("yes", "YES"))


def test_reference_judge_fills_its_prompt_in_one_pass() -> None:
    judge = vf.ReferenceJudge()
    text = judge.build_messages(question="Q {answer}", answer="A", response="{not-a-field}", positive="yes", negative="no")
    assert "Q {answer}" in text  # a value containing a placeholder is not filled again
    assert "{not-a-field}" in text and "<reference>\nA\n</reference>" in text


def _rubric(tmp_path, body: str):
    path = tmp_path / "rubric.toml"
    path.write_text(body)
    return path


RUBRIC = """
[[criteria]]
name = "correct"
text = "The city named is the country's capital."
weight = 3

[[criteria]]
name = "terse"
text = "The reply is the city alone."
choices = ["no", "partly", "yes"]
"""


def test_rubric_criteria_and_verdict_scoring(tmp_path) -> None:
    criteria = load_criteria(_rubric(tmp_path, RUBRIC), {"terse": 1.0})
    assert [(c.name, c.weight, c.choices) for c in criteria] == [("correct", 3.0, ["no", "yes"]), ("terse", 1.0, ["no", "partly", "yes"])]
    scores = score_verdicts([CriterionVerdict(name="correct", reason="", verdict="yes"), CriterionVerdict(name="terse", reason="", verdict="partly")], criteria)
    assert scores == {"correct": 1.0, "terse": 0.5}
    # a verdict the judge cannot give is also a ValueError, as the original raises for it
    with pytest.raises(ValueError, match="answered 'maybe' for 'correct'"):
        score_verdicts([CriterionVerdict(name="correct", reason="", verdict="maybe"), CriterionVerdict(name="terse", reason="", verdict="no")], criteria)
    with pytest.raises(JudgeError, match="not the criteria"):
        score_verdicts([CriterionVerdict(name="correct", reason="", verdict="yes")], criteria)
    with pytest.raises(JudgeError, match="twice"):
        score_verdicts([CriterionVerdict(name="correct", reason="", verdict="yes")] * 2, criteria)
    with pytest.raises(ValidationError, match="reason"):  # as the original: a verdict gives its reason
        CriterionVerdict.model_validate({"name": "correct", "verdict": "yes"})
    with pytest.raises(ValueError, match="weights name no criterion"):
        load_criteria(_rubric(tmp_path, RUBRIC), {"nope": 1.0})
    with pytest.raises(ValueError, match="repeat an answer"):
        vf.Criterion(name="x", text="t", choices=["a", "a"])


def test_judge_without_an_endpoint_outside_a_run_says_what_is_missing() -> None:
    import asyncio

    with pytest.raises(JudgeError, match="has no endpoint: set its base_url"):
        asyncio.run(vf.ReferenceJudge().complete("hi"))


# --- plugging from config -----------------------------------------------------------------------


def test_task_config_resolves_judges_by_id(tmp_path) -> None:
    config = vf.TaskConfig(judges=[{"id": "reference", "answer_field": "capital"}, {"id": "rubric", "path": str(tmp_path / "r.toml"), "name": "style", "weight": 0.5}])
    ref, rub = config.judges
    assert type(ref) is vf.ReferenceJudgeConfig and ref.answer_field == "capital" and ref.key == "reference"
    assert type(rub) is vf.RubricJudgeConfig and rub.key == "style"
    assert type(vf.load_judge(rub)) is vf.RubricJudge
    assert vf.judge_config_type("decision") is vf.DecisionJudgeConfig
    with pytest.raises(ValueError, match="answer_fieldd"):
        vf.TaskConfig(judges=[{"id": "reference", "answer_fieldd": "x"}])  # a typo is refused, not ignored
    with pytest.raises(ValueError, match="needs an id"):
        vf.TaskConfig(judges=[{"answer_field": "x"}])
    with pytest.raises(ValueError, match="share the reward key"):
        vf.TaskConfig(judges=[{"id": "reference"}, {"id": "reference"}])
    with pytest.raises(ValueError, match="judge 'no-such-judge' not found"):
        vf.TaskConfig(judges=[{"id": "no-such-judge"}])
    # 0.4.0's table form of a client timeout is accepted
    assert vf.ReferenceJudgeConfig(timeout={"connect": 2, "read": 3}).timeout == 5.0


# --- whole runs ---------------------------------------------------------------------------------

ANSWERS = {"France": "Paris", "Japan": "Osaka", "Kenya": "Nairobi", "Peru": "Cusco"}  # two right, two wrong
TRUE_CAPITALS = {"Paris", "Tokyo", "Nairobi", "Lima"}


def _is_judge(req) -> bool:
    return "<reference>" in (req.messages[-1]["content"] or "")


def _policy(req) -> str:
    country = re.search(r"capital of (\w+)", req.messages[-1]["content"]).group(1)
    return ANSWERS[country]


def _grade(req) -> str:
    content = req.messages[-1]["content"]
    answer = re.search(r"<answer>\n(.*?)\n</answer>", content, re.S).group(1)
    ref = re.search(r"<reference>\n(.*?)\n</reference>", content, re.S).group(1)
    return "The answer agrees.\nyes" if answer.strip() == ref.strip() else "no"


async def _run(env, srv, *, model="policy-model", **kw):
    client = ModelClient.from_any(srv.base_url)
    try:
        return await run_v1(env, list(env.taskset), client, model=model, **kw)
    finally:
        await client.aclose()


def _env(judges, **taskset):
    return load_environment({"taskset": {"id": "vf-capitals", "task": {"judges": judges}, **taskset}})


async def test_reference_judge_rewards_come_from_its_replies(tmp_path) -> None:
    env = _env([{"id": "reference", "answer_field": "capital", "weight": 2.0}])
    async with ScriptedServer(lambda r: _grade(r) if _is_judge(r) else _policy(r)) as srv:
        out = await _run(env, srv, folder=tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    for line in lines:
        trace = line["traces"][0]
        expected = float(ANSWERS[trace["task"]["data"]["country"]] in TRUE_CAPITALS)
        assert trace["rewards"]["reference"] == {"score": expected, "weight": 2.0}
        assert trace["rewards"]["exact"]["score"] == expected
        assert line["reward"] == 4.0 * expected  # exact + from_artifact + 2 x reference and line["error"] is None and trace["ok"]
        (call,) = trace["info"]["judge_calls"]
        assert call["name"] == "reference" and call["request"]["model"] == "policy-model"
        assert call["response"]["message"]["content"] == ("The answer agrees.\nyes" if expected else "no")
        assert trace["extra_usage"]
    assert out["metadata"]["avg_reward"] == 2.0
    judge_requests = [r for r in srv.requests if _is_judge(r)]
    assert len(judge_requests) == 4 and {r.model for r in judge_requests} == {"policy-model"}  # the run's client and model


async def test_an_unparseable_verdict_is_an_error_not_a_zero() -> None:
    env = _env([{"id": "reference", "answer_field": "capital"}], n=2)
    async with ScriptedServer(lambda r: "I would rather not say" if _is_judge(r) else _policy(r)) as srv:
        out = await _run(env, srv)
    for state in out.state:
        trace = state["_episode"].traces[0]
        assert trace.rewards["reference"] is None and not trace.ok
        assert "names none of yes/no" in trace.errors[-1].message
        # billed: recorded, the reply as the original dumps an assistant message
        assert trace.info["judge_calls"][0]["response"]["message"] == {
            "role": "assistant", "content": "I would rather not say", "reasoning_content": None, "tool_calls": None,
            "provider_state": None}  # fmt: skip
        assert state["error"] and "names none of yes/no" in state["error"]["message"]
    assert out["metadata"]["num_errors"] == 2


async def test_a_failing_and_a_hanging_judge_are_errors() -> None:
    from verifiers.testing.scripted import error

    env = _env([{"id": "reference", "answer_field": "capital", "timeout": 0.5}], n=2)

    def script(req):
        if not _is_judge(req):
            return _policy(req)
        return reply("yes", delay=30) if "France" in req.messages[-1]["content"] else error(400, "judge model gone")

    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    messages = {s["_episode"].traces[0].task.data.country: s["_episode"].traces[0].errors[-1].message for s in out.state}
    assert "did not answer within 0.5 s" in messages["France"]
    assert "the call failed" in messages["Japan"] and "judge model gone" in messages["Japan"]
    assert all(s["_episode"].traces[0].rewards["reference"] is None for s in out.state)
    # the judge's own rollout error is recorded as itself (what retry rules match), the message saying
    # where it failed, and vf replay knows it as a scoring error (it scores that trace again)
    from verifiers.v1.scoring import is_scoring_error

    by_country = {s["_episode"].traces[0].task.data.country: s["_episode"].traces[0].errors[-1] for s in out.state}
    japan = by_country["Japan"]
    assert japan.message.startswith("task ") and " scoring: judge 'reference'" in japan.message, japan.message
    assert japan.type != "HookError" and is_scoring_error(japan) and is_scoring_error(by_country["France"])


async def test_a_judge_with_its_own_endpoint_does_not_use_the_runs(tmp_path) -> None:
    async with ScriptedServer(_grade) as judge_srv, ScriptedServer(_policy) as policy_srv:
        env = _env([{"id": "reference", "answer_field": "capital", "base_url": judge_srv.base_url, "model": "judge-model"}], n=2)
        out = await _run(env, policy_srv)
    assert [s["_episode"].traces[0].rewards["reference"].score for s in sorted(out.state, key=lambda s: s["example_id"])] == [1.0, 0.0]
    assert {r.model for r in judge_srv.requests} == {"judge-model"} and len(judge_srv.requests) == 2
    assert not any(_is_judge(r) for r in policy_srv.requests)


async def test_rubric_judge_end_to_end(tmp_path) -> None:
    path = _rubric(tmp_path, RUBRIC)

    def script(req):
        content = req.messages[-1]["content"] or ""
        if "criteria" not in content:
            return _policy(req)
        city = re.search(r"\[assistant\]\n(\w+)", content).group(1)
        verdicts = [
            {"name": "correct", "reason": "checked", "verdict": "yes" if city in TRUE_CAPITALS else "no"},
            {"name": "terse", "reason": "one word", "verdict": "partly"},
        ]
        return "Here is my grading:\n" + json.dumps({"verdicts": verdicts})

    env = _env([{"id": "rubric", "path": str(path), "name": "style"}], n=2)
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    traces = [s["_episode"].traces[0] for s in sorted(out.state, key=lambda s: s["example_id"])]
    # weights 3 and 1: (3*1 + 1*0.5)/4 for the right answer, (3*0 + 0.5)/4 for the wrong one
    assert [t.rewards["style"].score for t in traces] == [0.875, 0.125]
    assert traces[0].metrics["style/correct"] == 1.0 and traces[1].metrics["style/terse"] == 0.5


async def test_rubric_judge_structured_output_asks_for_the_schema(tmp_path) -> None:
    path = _rubric(tmp_path, RUBRIC)
    bodies = []

    def script(req):
        if "criteria" not in (req.messages[-1]["content"] or ""):
            return _policy(req)
        bodies.append(req.body)
        return json.dumps({"verdicts": [{"name": "correct", "reason": "", "verdict": "yes"}, {"name": "terse", "reason": "", "verdict": "yes"}]})

    env = _env([{"id": "rubric", "path": str(path), "structured_output": True}], n=1)
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    assert out.state[0]["_episode"].traces[0].rewards["rubric"].score == 1.0
    (body,) = bodies
    assert body["response_format"]["type"] == "json_schema" and "verdicts" in json.dumps(body["response_format"])
    # in OpenAI's strict form, as the original's SDK sends it: closed objects, every property required
    schema = body["response_format"]["json_schema"]["schema"]
    verdict = schema["$defs"]["CriterionVerdict"]
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["stream"] is False  # as the openai SDK's structured-output parse sends it
    assert (schema["additionalProperties"], schema["required"]) == (False, ["verdicts"])
    assert (verdict["additionalProperties"], verdict["required"]) == (False, ["name", "reason", "verdict"])
    assert "Reply with one JSON object" not in body["messages"][-1]["content"]  # the schema asks instead


async def test_rubric_judge_batches_and_a_partial_verdict_is_an_error(tmp_path) -> None:
    path = _rubric(tmp_path, RUBRIC)

    def script(req):
        content = req.messages[-1]["content"] or ""
        if "criteria" not in content:
            return _policy(req)
        # answers only the first criterion it is shown, whatever the batch
        name = re.search(r"^- (\w+):", content, re.M).group(1)
        return json.dumps({"verdicts": [{"name": name, "reason": "", "verdict": "yes"}]})

    env = _env([{"id": "rubric", "path": str(path), "max_criteria": 1}], n=1)
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    trace = out.state[0]["_episode"].traces[0]
    assert trace.rewards["rubric"].score == 1.0 and len(trace.info["judge_calls"]) == 2  # one call per criterion

    env = _env([{"id": "rubric", "path": str(path)}], n=1)  # both in one call: the answer misses one
    async with ScriptedServer(script) as srv:
        out = await _run(env, srv)
    trace = out.state[0]["_episode"].traces[0]
    assert trace.rewards["rubric"] is None and "not the batch's criteria" in trace.errors[-1].message


async def test_decision_judge_posts_to_the_runs_evaluations_route() -> None:
    from aiohttp import web

    from tests.support.aiohttp_app import serving

    seen: list[dict] = []

    async def evaluations(request):
        body = await request.json()
        seen.append(body)
        correct = body["state"]["response"] in TRUE_CAPITALS
        return web.json_response({"result": {"answers": {"grade": {"score": 1.0 if correct else 0.0}}, "usage": {"inputTokens": 7, "outputTokens": 1}}})

    async def chat(request):
        body = await request.json()
        country = re.search(r"capital of (\w+)", body["messages"][-1]["content"]).group(1)
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWERS[country]}, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 3, "completion_tokens": 1}})  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/evaluations", evaluations)
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as base:
        env = _env([{"id": "decision", "answer_field": "capital"}], n=2)
        client = ModelClient.from_any(f"{base}/v1")
        try:
            out = await run_v1(env, list(env.taskset), client, model="policy-model")
        finally:
            await client.aclose()
    traces = [s["_episode"].traces[0] for s in sorted(out.state, key=lambda s: s["example_id"])]
    assert [t.rewards["decision"].score for t in traces] == [1.0, 0.0]
    assert {b["model"] for b in seen} == {"policy-model"} and seen[0]["questions"]["grade"]["criteria"] == ["Incorrect", "Correct"]
    assert traces[0].extra_usage[0].prompt_tokens == 7


class CapitalJudge(vf.Judge[bool]):
    prompt = "<reference>\n{answer}\n</reference>\n<answer>\n{response}\n</answer>"

    def parse(self, response):
        return vf.parse_judge_choice(response.text, ("yes", "no")) == "yes"


async def judged_reward(task, trace) -> float:
    """A reward that calls a judge itself (plugged below as ``rewards.judged``)."""
    result = await CapitalJudge().evaluate(trace=trace, answer=task.capital, response=trace.last_reply)
    return float(result.parsed)


async def test_a_judge_called_from_task_code_uses_the_run() -> None:
    env = load_environment({"taskset": {"id": "vf-capitals", "n": 2, "task": {"rewards": {"judged": {"fn": "tests.v1.test_judges:judged_reward"}}}}})
    async with ScriptedServer(lambda r: _grade(r) if _is_judge(r) else _policy(r)) as srv:
        out = await _run(env, srv)
    traces = [s["_episode"].traces[0] for s in sorted(out.state, key=lambda s: s["example_id"])]
    assert [t.rewards["judged"].score for t in traces] == [1.0, 0.0]
    assert all(t.info["judge_calls"][0]["name"] == "capital" for t in traces)
    assert {r.model for r in srv.requests if _is_judge(r)} == {"policy-model"}


async def test_a_task_config_can_pre_plug_judges_and_scoring_uses_the_current_run() -> None:
    """Judges as a TaskConfig subclass's default, scored through ``Task.score`` directly, with the
    run (client and model) taken from the current context, as the scoring stage sets it."""
    from verifiers.v1.agents import RunContext
    from verifiers.v1.context import running

    class Data(vf.TaskData):
        capital: str

    class Config(vf.TaskConfig):
        judges: vf.Judges = [vf.ReferenceJudgeConfig(answer_field="capital", name="ref")]

    class T(vf.Task[Data, vf.State, Config]):
        pass

    assert [type(j) for j in Config().judges] == [vf.ReferenceJudgeConfig]
    task = T(Data(prompt="Capital of France?", capital="Paris"))
    trace = vf.Trace.for_task(task)
    answer = vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content="Paris"), finish_reason="stop")
    trace.commit_turn([vf.UserMessage(content="Capital of France?")], answer)
    async with ScriptedServer(_grade) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            with running(RunContext(client=client, model="run-model")):
                await task.score(trace)
        finally:
            await client.aclose()
    assert trace.rewards["ref"].score == 1.0 and [r.model for r in srv.requests] == ["run-model"]
    # outside any run, with no endpoint: an error on the trace naming what is missing, not a 0
    fresh = vf.Trace.for_task(task)
    fresh.commit_turn([vf.UserMessage(content="Capital of France?")], answer)
    await task.score(fresh)
    assert fresh.rewards["ref"] is None and "has no endpoint" in fresh.errors[-1].message


async def test_a_decision_service_grading_with_a_non_number_is_a_judge_error() -> None:
    # a hostile (or broken) decision service: a boolean, a string, or an integer too big for a
    # float is no grade score; each is the trace's judge error, never a score
    from aiohttp import web

    from tests.support.aiohttp_app import serving

    grades = iter([True, "1", 10**400, 1])

    async def evaluations(request):
        body = '{"result": {"answers": {"grade": {"score": SCORE}}}}'.replace("SCORE", json.dumps(next(grades)))
        return web.Response(text=body, content_type="application/json")

    async def chat(request):
        body = await request.json()
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 3, "completion_tokens": 1}})  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/evaluations", evaluations)
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as base:
        env = _env([{"id": "decision", "answer_field": "capital"}], n=4)
        client = ModelClient.from_any(f"{base}/v1")
        try:
            out = await run_v1(env, list(env.taskset), client, model="policy-model", max_concurrent=1)
        finally:
            await client.aclose()
    traces = [s["_episode"].traces[0] for s in sorted(out.state, key=lambda s: s["example_id"])]
    assert [t.rewards["decision"] is None for t in traces] == [True, True, True, False]
    for t in traces[:3]:
        assert "no grade score" in t.errors[-1].message, t.errors[-1].message


def test_a_strict_schema_closes_every_object_and_requires_every_property() -> None:
    from pydantic import BaseModel

    from verifiers.v1.judge import strict_json_schema

    class Inner(BaseModel):
        a: int = 3
        b: str | None = None

    class Outer(BaseModel):
        inner: Inner
        many: list[Inner] = []
        either: Inner | int = 0

    raw = Outer.model_json_schema()
    strict = strict_json_schema(raw)
    inner = strict["$defs"]["Inner"]
    assert (strict["additionalProperties"], strict["required"]) == (False, ["inner", "many", "either"])
    assert (inner["additionalProperties"], inner["required"]) == (False, ["a", "b"])
    assert inner["properties"]["a"]["default"] == 3 and "default" not in inner["properties"]["b"]  # a None default goes
    assert "additionalProperties" not in raw and raw["required"] == ["inner"]  # the model's own schema is untouched


def test_a_strict_schema_keeps_a_maps_value_schema_and_inlines_a_described_reference() -> None:
    from pydantic import BaseModel, Field

    from verifiers.v1.judge import strict_json_schema

    class Sub(BaseModel):
        x: int

    class Graded(BaseModel):
        scores: dict[str, float]
        sub: Sub = Field(description="the sub")

    strict = strict_json_schema(Graded.model_json_schema())
    assert strict["properties"]["scores"]["additionalProperties"] == {"type": "number"} and "required" not in strict["properties"]["scores"]
    sub = strict["properties"]["sub"]  # a $ref with a key beside it is what it points at
    assert "$ref" not in sub and sub["description"] == "the sub" and sub["required"] == ["x"] and sub["additionalProperties"] is False


def test_a_strict_schema_is_the_one_the_openai_sdk_sends() -> None:
    """The original asks through the openai SDK's ``parse``, which sends the SDK's strict form."""
    from typing import Literal

    from openai.lib._pydantic import to_strict_json_schema
    from pydantic import BaseModel, Field

    from verifiers.v1.judge import strict_json_schema
    from verifiers.v1.judges.rubric import RubricVerdicts

    class Sub(BaseModel):
        x: int
        y: str | None = None

    class Graded(BaseModel):
        scores: dict[str, float]
        sub: Sub = Field(description="the sub")
        subs: list[Sub] = []
        either: Sub | int = 0
        label: Literal["a", "b"] = "a"
        why: str = ""

    for model in (Graded, RubricVerdicts, Sub):
        assert strict_json_schema(model.model_json_schema()) == to_strict_json_schema(model), model.__name__


async def test_a_reward_that_asks_a_judge_through_resolve_client_as_published_rewards_do(monkeypatch) -> None:
    """The original's public client face: ``vf.resolve_client(config)`` and
    ``client.get_response(ChatDialect(), body, sampling)`` give a v1 ``Response``; the body goes
    out as it is, with the session header; a dialect other than chat is refused in one line, and a
    failed request is a ``ProviderError``."""
    from verifiers.testing.scripted import error
    from verifiers.v1.dialects import AnthropicDialect, ChatDialect
    from verifiers.v1.errors import ProviderError

    def judge(req):
        if req.body["messages"][-1]["content"] == "fail":
            return error(400, "bad judge request")
        return "YES" if "4" in req.body["messages"][-1]["content"] else "NO"

    async with ScriptedServer(judge) as srv:
        client = vf.resolve_client({"base_url": srv.base_url, "headers": {"X-Team": "t"}})
        assert isinstance(client, vf.Client)
        body = {"model": "judge-m", "messages": [{"role": "user", "content": "Is 2+2 equal to 4?"}], "temperature": 0}
        response = await client.get_response(ChatDialect(), body, vf.SamplingConfig(), session_id="trace-1")
        assert isinstance(response, vf.Response) and response.message.content == "YES"
        sent = srv.requests[-1]
        assert sent.body == body and sent.headers["x-session-id"] == "trace-1" and sent.headers["x-team"] == "t"
        with pytest.raises(NotImplementedError, match="ChatDialect"):
            await client.get_response(AnthropicDialect(), body, None)
        with pytest.raises(ProviderError, match="400"):
            await client.get_response(ChatDialect(), {**body, "messages": [{"role": "user", "content": "fail"}]}, None)
        await client.close()
