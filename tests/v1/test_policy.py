"""The task's request and response policy (``verifiers.v1.policy``) with the original's rules: what a
``@vf.intercept`` rewrite may change, and the verdict on each proposed tool call before it runs.
Against a real loopback model server (ScriptedServer), through the in-process loop and the proxy."""

from __future__ import annotations

import httpx
import pytest

import verifiers.v1 as vf
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1 import policy
from verifiers.v1.harness import chat_loop, tool_functions
from verifiers.v1.interception import CallContext, InterceptionServer
from verifiers.v1.trace import Trace


def _reply(content: str, **update) -> vf.Response:
    return vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content=content), finish_reason="length", **update)


def _ctx(task: vf.Task, **kw) -> tuple[CallContext, Trace]:
    trace = Trace.for_task(task)
    return CallContext.for_task(task, client=None, model="m", trace=trace, **kw), trace


class Modes(vf.TaskData):
    mode: str = ""
    reply: str = ""


class Rewriting(vf.Task[Modes]):
    """One request hook per rule; ``data.mode`` (and ``data.reply``) pick which one acts."""

    @vf.intercept
    def rewrite(self, request: vf.Request):
        mode = self.data.mode
        messages = list(request.messages)
        if mode == "redact" and "secret" in str(messages[-1].content):
            messages[-1] = vf.UserMessage(content="[redacted]")
        elif mode == "in_place":  # changes its copy, returns None: nothing changes
            request.messages[-1].content = "changed in place"
            return None
        elif mode == "history":  # an earlier, committed reply
            messages[1] = vf.AssistantMessage(content="I never said that")
        elif mode == "add":
            messages.append(vf.UserMessage(content="one more"))
        elif mode == "tools":
            return vf.Request(messages=messages, tools=[vf.Tool(name="x", description="", parameters={})])
        elif mode == "type":
            messages[-1] = vf.SystemMessage(content=str(messages[-1].content))
        elif mode == "same":
            return vf.Request(messages=messages, tools=request.tools)
        else:
            return None
        return vf.Request(messages=messages, tools=request.tools)

    @vf.intercept
    def reply_hook(self, response: vf.Response):
        mode = self.data.reply
        if mode == "text":
            return response.model_copy(update={"message": vf.AssistantMessage(content=response.message.content.upper())})
        if mode == "tool_call":
            call = vf.ToolCall(id="c9", name="rm", arguments="{}")
            return response.model_copy(update={"message": vf.AssistantMessage(content="x", tool_calls=[call])})
        if mode == "model":
            return response.model_copy(update={"model": "another"})
        return None


async def _rewrite(mode: str, messages: list, *, committed: bool = False):
    task = Rewriting(Modes(prompt="p", mode=mode))
    ctx, trace = _ctx(task)
    if committed:  # the conversation's first two messages are on the graph already
        trace.commit_turn(messages[:1], _reply(messages[1].content))
    return await policy.rewrite_request(ctx, vf.Request(messages=messages)), trace


async def test_a_request_hook_rewrites_only_new_user_and_tool_messages_and_each_rewrite_is_recorded() -> None:
    user = vf.UserMessage(content="my secret")
    (request, stopped), trace = await _rewrite("redact", [user])
    assert stopped is None and request.messages[-1].content == "[redacted]"
    assert [r.handler for r in trace.request_rewrites] == ["rewrite"]
    # a hook returning an equal request, or changing its own copy in place, changes nothing and
    # records nothing (each hook gets a deep copy)
    for mode in ("same", "in_place"):
        (request, _), trace = await _rewrite(mode, [user])
        assert request.messages == [user] and user.content == "my secret" and trace.request_rewrites == []

    convo = [vf.UserMessage(content="hi"), vf.AssistantMessage(content="hello"), vf.UserMessage(content="more")]
    refusals = {
        "history": "request interceptors can only rewrite new user or tool messages",
        "add": "request interceptors cannot add or remove messages",
        "tools": "request interceptors cannot rewrite tools",
        "type": "expected UserMessage, got SystemMessage",
    }
    for mode, message in refusals.items():
        with pytest.raises(vf.TaskError, match=message):
            await _rewrite(mode, list(convo), committed=True)
    # the refusal is the task's error on the trace: nothing was sent, no rewrite recorded
    task = Rewriting(Modes(prompt="p", mode="history"))
    ctx, trace = _ctx(task)
    trace.commit_turn(convo[:1], _reply("hello"))
    with pytest.raises(vf.TaskError):
        await policy.rewrite_request(ctx, vf.Request(messages=list(convo)))
    assert trace.is_completed and trace.stop_condition == "task_error" and trace.request_rewrites == []
    assert "can only rewrite new user or tool messages" in trace.errors[-1].message


async def test_a_response_hook_may_only_put_an_inert_text_reply_in_place() -> None:
    async def rewrite(mode: str):
        task = Rewriting(Modes(prompt="p", reply=mode))
        ctx, trace = _ctx(task)
        return await policy.rewrite_response(ctx, _reply("ok")), trace

    out, trace = await rewrite("text")
    assert out.message.content == "OK" and out.finish_reason == "stop"  # a rewritten reply finished
    assert [r.handler for r in trace.response_rewrites] == ["reply_hook"]
    out, trace = await rewrite("none")
    assert out.message.content == "ok" and out.finish_reason == "length" and trace.response_rewrites == []
    with pytest.raises(vf.TaskError, match="inert text-only message"):
        await rewrite("tool_call")
    with pytest.raises(vf.TaskError, match="can only replace the assistant message"):
        await rewrite("model")


ran: list[str] = []


class Guarded(vf.Task):
    """A policy task: ``rm`` is denied before it runs (its verdict is what the model reads), and
    every ``cat`` result is cut to its first line (a rewrite of a real result, pinned)."""

    @vf.tool
    def rm(self, path: str) -> str:
        """Remove a file."""
        ran.append(f"rm {path}")
        return "removed"

    @vf.tool
    def cat(self, path: str) -> str:
        """Print a file."""
        ran.append(f"cat {path}")
        return "line one\nline two\nline three"

    @vf.intercept
    def policy(self, request: vf.Request):
        last = request.messages[-1]
        if not isinstance(last, vf.ToolMessage):
            return None
        if last.name == "rm":
            verdict = last.model_copy(update={"content": "denied: rm is not allowed here"})
        elif last.name == "cat" and isinstance(last.content, str) and "\n" in last.content:
            verdict = last.model_copy(update={"content": last.content.splitlines()[0] + " [cut]"})
        else:
            return None
        return vf.Request(messages=[*request.messages[:-1], verdict], tools=request.tools)


def _script(req):
    """Turn 1: cat and rm in parallel; turn 2: cat again; turn 3: answer."""
    tool_turns = sum(1 for m in req.messages if m["role"] == "assistant")
    if tool_turns == 0:
        return tool_calls(tool_call("cat", {"path": "a"}, id="c1"), tool_call("rm", {"path": "a"}, id="c2"))
    if tool_turns == 1:
        return tool_calls(tool_call("cat", {"path": "b"}, id="c3"))
    return reply("done")


async def test_a_denied_tool_call_never_runs_and_the_model_reads_the_verdict_on_every_later_call() -> None:
    ran.clear()
    task = Guarded(vf.TaskData(prompt="tidy up"))
    async with ScriptedServer(_script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            trace = Trace.for_task(task)
            ctx = CallContext.for_task(task, client=client, model="scripted-model", trace=trace, gates_tools=True)
            convo = await chat_loop(ctx, [vf.UserMessage(content="tidy up")], tool_functions(task), tool_timeout=10, available={"trace": trace})
        finally:
            await client.aclose()
        sent = [r.body["messages"] for r in srv.requests]
    assert ran == ["cat a", "cat b"]  # rm was judged before it ran, and denied
    assert len(sent) == 3
    tool_msgs = [m for m in sent[1] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [("c1", "line one [cut]"), ("c2", "denied: rm is not allowed here")]
    # the third call carries both earlier results as rewritten (pinned), and the new one rewritten
    assert [m["content"] for m in sent[2] if m["role"] == "tool"] == ["line one [cut]", "denied: rm is not allowed here", "line one [cut]"]
    assert [m.content for m in convo if isinstance(m, vf.ToolMessage)] == ["line one [cut]", "denied: rm is not allowed here", "line one [cut]"]
    # one conversation on the graph, no fork: each later call extended the last one's path
    assert len(trace.branches) == 1 and trace.last_reply == "done" and not trace.is_completed
    # the rewrites, in order: rm's verdict (before it ran), then each cat result at the next call
    assert [r.handler for r in trace.request_rewrites] == ["policy"] * 3


async def _through_proxy(task, script, bodies, **ctx_kwargs):
    """``bodies`` posted in turn by a program through the proxy (a body may be a coroutine function
    of the call context): (trace, the responses, the messages of each upstream request)."""
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            trace = Trace.for_task(task)
            ctx = CallContext.for_task(task, client=client, model="scripted-model", trace=trace, **ctx_kwargs)
            async with InterceptionServer() as proxy:
                base = proxy.register(ctx)
                async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}, timeout=60) as http:
                    responses = []
                    for body in bodies:
                        body = await body(ctx) if callable(body) else body
                        responses.append(await http.post(f"{base}/chat/completions", json=body))
        finally:
            await client.aclose()
        return trace, responses, [r.body["messages"] for r in srv.requests]


async def test_a_program_that_runs_its_own_tools_is_stopped_when_a_hook_denies_a_call() -> None:
    """Through the proxy a program runs its tools itself, so a denial cannot be served to it: the
    rollout stops, named after the hook, and the program gets a 400 instead of the reply."""
    ran.clear()
    rm = {"type": "function", "function": {"name": "rm", "parameters": {"type": "object"}}}
    body = {"messages": [{"role": "user", "content": "go"}], "tools": [rm]}
    script = lambda req: tool_calls(tool_call("rm", {"path": "/"}, id="c1"))  # noqa: E731
    trace, (r,), _ = await _through_proxy(Guarded(vf.TaskData(prompt="tidy up")), script, [body])
    assert r.status_code == 400 and r.json()["error"]["code"] == "rollout_stopped"
    assert trace.stop_condition == "policy" and len(trace.calls) == 1 and ran == []


async def test_a_hook_that_fails_on_a_proposed_call_ends_the_rollout_with_the_call_unrun() -> None:
    ran.clear()

    class Broken(Guarded):
        @vf.intercept
        def policy(self, request: vf.Request):
            if isinstance(request.messages[-1], vf.ToolMessage):
                return vf.Request(messages=request.messages[:-1], tools=request.tools)  # drops the result
            return None

    from verifiers.v1.agents import RunContext, make_agent

    async with ScriptedServer(lambda req: tool_calls(tool_call("rm", {"path": "a"}, id="c1"))) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            agent = make_agent(vf.AgentConfig(), run_ctx=RunContext(client=client, model="scripted-model"))
            trace = await agent.run(Broken(vf.TaskData(prompt="p")))
        finally:
            await client.aclose()
    assert ran == [] and trace.stop_condition == "task_error" and len(trace.calls) == 1
    # recorded once, a TaskError as the original records it, and on the call that proposed the tool
    message = "request interception failed: intercept 'policy': request interceptors cannot add or remove messages"
    assert [(e.type, e.message) for e in trace.errors] == [("TaskError", message)]
    assert (trace.calls[0].error.type, trace.calls[0].error.message) == ("TaskError", message)


def test_the_in_process_harnesses_say_they_gate_tool_calls() -> None:
    from verifiers.v1.harness import harness_class

    assert harness_class("null").SUPPORTS_TOOL_INTERCEPTION and harness_class("bash").SUPPORTS_TOOL_INTERCEPTION


class Suffixed(vf.Task):
    """A hook that is not idempotent: every new user message gets a suffix."""

    @vf.intercept
    def brief(self, request: vf.Request):
        last = request.messages[-1]
        if isinstance(last, vf.UserMessage):
            return vf.Request(messages=[*request.messages[:-1], vf.UserMessage(content=f"{last.content} (be brief)")], tools=request.tools)
        return None


async def test_a_programs_user_messages_are_rewritten_before_it_stores_them_and_not_again_on_its_call() -> None:
    """As the original: the user messages handed to a program are rewritten first, so the program
    holds (and sends) the rewritten text, and its call does not rewrite them a second time."""

    async def first(ctx):
        prepared = await policy.prepare_users(ctx, [vf.UserMessage(content="hi")])
        assert [m.content for m in prepared] == ["hi (be brief)"]
        return {"messages": [{"role": "user", "content": "hi (be brief)"}]}

    # the next turn: its new user message was not prepared, so the call rewrites it
    second = {"messages": [{"role": "user", "content": "hi (be brief)"}, {"role": "assistant", "content": "ok"},
                           {"role": "user", "content": "more"}]}  # fmt: skip
    trace, responses, sent = await _through_proxy(Suffixed(vf.TaskData(prompt="p")), lambda req: "ok", [first, second])
    assert [r.status_code for r in responses] == [200, 200]
    assert sent[0] == [{"role": "user", "content": "hi (be brief)"}]
    assert [m["content"] for m in sent[1]] == ["hi (be brief)", "ok", "more (be brief)"]
    assert [r.handler for r in trace.request_rewrites] == ["brief", "brief"] and len(trace.branches) == 1


async def test_a_request_too_large_to_police_is_refused_before_any_copy() -> None:
    """A program's request of 2,000 new tool results, on a task with a request hook: each would be
    a view of its own (a fresh copy of everything before it), millions of message copies on the
    proxy's loop. It is refused at once with a 400; nothing reaches the model or the trace."""
    task = Guarded(vf.TaskData(prompt="p"))
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "cat", "arguments": "{}"}} for i in range(2000)]
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": f"c{i}", "content": "x"} for i in range(2000))]  # fmt: skip
    trace, (r, fine), sent = await _through_proxy(task, lambda req: "ok", [{"messages": messages}, {"messages": messages[:1]}])
    assert len(sent) == 1  # only the small call reached the model
    assert r.status_code == 400 and "at most 100,000" in r.json()["error"]["message"]
    assert fine.status_code == 200 and len(trace.calls) == 1 and trace.errors == [] and not trace.is_completed


class Redacting(vf.Task):
    """A hook written the short way: it builds the request without passing the tools on."""

    @vf.tool
    def cat(self, path: str) -> str:
        """Print a file."""
        return "contents"

    @vf.intercept
    def redact(self, request: vf.Request):
        last = request.messages[-1]
        if isinstance(last, vf.UserMessage) and "secret" in str(last.content):
            return vf.Request(messages=[*request.messages[:-1], vf.UserMessage(content="[redacted]")])
        return None

    @vf.stop
    def quit_asked(self, request: vf.Request) -> bool:
        return any(isinstance(m, vf.UserMessage) and m.content == "quit" for m in request.messages)

    @vf.intercept
    def reply_with_a_call(self, response: vf.Response):
        if response.message.content == "break the rules":
            call = vf.ToolCall(id="x", name="cat", arguments="{}")
            return response.model_copy(update={"message": vf.AssistantMessage(content="x", tool_calls=[call])})
        return None


async def _agent_run(script, task, **config):
    from verifiers.v1.agents import RunContext, make_agent

    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            agent = make_agent(vf.AgentConfig(**config), run_ctx=RunContext(client=client, model="scripted-model"))
            trace = await agent.run(task)
        finally:
            await client.aclose()
        return trace, [r.body for r in srv.requests]


async def test_the_callers_prompt_is_rewritten_before_the_harness_stores_it() -> None:
    """As the original: the task's prompt is handed to the request hooks (no tools in that view)
    before the harness keeps it, so a hook that builds its Request without the tools still works;
    the model call that carries the prompt does not rewrite it again."""
    trace, sent = await _agent_run(lambda req: "fine", Redacting(vf.TaskData(prompt="my secret")))
    assert trace.ok and trace.stop_condition == "agent_completed"
    assert sent[0]["messages"] == [{"role": "user", "content": "[redacted]"}] and [t["function"]["name"] for t in sent[0]["tools"]] == ["cat"]
    assert [r.handler for r in trace.request_rewrites] == ["redact"]


async def test_a_request_stop_puts_the_prompt_on_the_graph_without_a_reply_and_calls_nothing() -> None:
    trace, sent = await _agent_run(lambda req: "fine", Redacting(vf.TaskData(prompt="quit")))
    assert sent == [] and trace.stop_condition == "quit_asked" and trace.calls == []
    assert [m.content for m in trace.messages] == ["quit"] and len(trace.branches) == 1 and trace.num_turns == 0


async def test_a_failed_call_is_on_the_record_with_its_error() -> None:
    from verifiers.testing.scripted import error

    # the provider refused: the call is recorded (no node, its status), the rollout ends on it
    trace, sent = await _agent_run(lambda req: error(400, "no such model"), Redacting(vf.TaskData(prompt="hi")))
    (call,) = trace.calls
    assert call.node is None and call.error.type == "ProviderError" and call.error.status_code == 400 and len(sent) == 1
    assert trace.stop_condition == "provider_error" and trace.errors[-1].status_code == 400
    # a response hook that broke a rule: the call (and the tokens it spent) is on the record
    trace, sent = await _agent_run(lambda req: "break the rules", Redacting(vf.TaskData(prompt="hi")))
    (call,) = trace.calls
    assert call.node is None and call.usage is not None and call.usage.completion_tokens > 0
    assert call.error.type == "TaskError" and "inert text-only" in call.error.message and trace.stop_condition == "task_error"
    assert trace.num_turns == 0 and not any(n.sampled for n in trace.nodes)


async def test_max_turns_counts_replies_and_zero_allows_none() -> None:
    from verifiers.testing.scripted import error

    trace, sent = await _agent_run(lambda req: "fine", Redacting(vf.TaskData(prompt="hi")), max_turns=0)
    assert sent == [] and trace.stop_condition == "max_turns" and trace.calls == []
    # through the proxy a program may call again after a failed call: max_turns counts replies
    seen: list = []

    def first_fails(req):
        seen.append(req)
        return error(400, "busy") if len(seen) == 1 else "ok"

    body = {"messages": [{"role": "user", "content": "hi"}]}
    trace, responses, _ = await _through_proxy(Redacting(vf.TaskData(prompt="hi")), first_fails, [body] * 3, max_turns=1)
    codes = [r.status_code for r in responses]
    assert codes == [400, 200, 400] and len(trace.calls) == 2 and trace.stop_condition == "max_turns"
    assert trace.calls[0].error.status_code == 400 and trace.calls[1].error is None


# --- found by the adversarial review of this policy -------------------------------------------------


async def test_a_hook_result_that_does_not_validate_is_the_hooks_recorded_error() -> None:
    """``model_copy(update=...)`` does not validate: a hook can hand back a field of the wrong type.
    It is the hook's TaskError, recorded, and the rollout ends (a program is not left retrying 500s)."""

    class BadReply(vf.Task):
        @vf.intercept
        def bad(self, response: vf.Response):
            return response.model_copy(update={"message": vf.UserMessage(content="hi")})

    class BadResult(vf.Task):
        @vf.intercept
        def bad(self, request: vf.Request):
            last = request.messages[-1]
            if isinstance(last, vf.ToolMessage):
                return request.model_copy(update={"messages": [*request.messages[:-1], last.model_copy(update={"content": None})]})
            return None

    hi = {"messages": [{"role": "user", "content": "hi"}]}
    trace, responses, sent = await _through_proxy(BadReply(vf.TaskData(prompt="p")), lambda req: "ok", [hi, hi])
    codes = [r.status_code for r in responses]
    assert codes == [500, 400] and len(sent) == 1 and trace.stop_condition == "task_error"
    assert trace.errors[-1].type == "TaskError" and "must be an AssistantMessage" in trace.errors[-1].message
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    body = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "x"}]}  # fmt: skip
    trace, responses, sent = await _through_proxy(BadResult(vf.TaskData(prompt="p")), lambda req: "ok", [body, body])
    codes = [r.status_code for r in responses]
    assert codes == [500, 400] and sent == [] and "does not validate" in trace.errors[-1].message


async def test_the_same_reply_to_the_same_request_gets_the_same_verdict() -> None:
    """A program that sends its request again (an SDK retry after a lost reply) and a model that
    answers with the same call and id: the call is not a reuse within one turn, its verdict stands."""

    class Watching(vf.Task):
        @vf.intercept
        def watch(self, request: vf.Request):
            return None

    go = {"messages": [{"role": "user", "content": "go"}]}
    script = lambda req: tool_calls(tool_call("bash", {"cmd": "ls"}, id="functions.bash:0"))  # noqa: E731
    trace, responses, sent = await _through_proxy(Watching(vf.TaskData(prompt="p")), script, [go, go, go])
    codes = [r.status_code for r in responses]
    assert codes == [200, 200, 200] and len(sent) == 3 and trace.errors == [] and not trace.is_completed


async def test_a_prepared_message_is_spent_only_by_the_call_that_carries_it_new() -> None:
    """A side call whose prefix holds an equal copy of a prepared message (a title, a summary) does
    not spend the mark: the program's real call still does not rewrite it a second time."""
    u = lambda c: {"role": "user", "content": c}  # noqa: E731
    ok = {"role": "assistant", "content": "ok"}
    handed: list = []

    async def first(ctx):
        (p1,) = await policy.prepare_users(ctx, [vf.UserMessage(content="continue")])
        handed.append(p1.content)
        return {"messages": [u(p1.content)]}

    async def side(ctx):
        prepared = await policy.prepare_users(ctx, [vf.UserMessage(content=handed[0]), vf.AssistantMessage(content="ok"), vf.UserMessage(content="continue")])
        handed.append(prepared[-1].content)
        return {"messages": [u(handed[0]), ok, u("title?")]}

    async def real(ctx):
        return {"messages": [u(handed[0]), ok, u(handed[1])]}

    trace, responses, sent = await _through_proxy(Suffixed(vf.TaskData(prompt="p")), lambda req: "ok", [first, side, real])
    codes = [r.status_code for r in responses]
    assert codes == [200, 200, 200] and trace.errors == []
    assert [m[-1]["content"] for m in sent] == ["continue (be brief)", "title? (be brief)", "continue (be brief)"]


async def test_a_reply_with_too_many_calls_to_judge_runs_none_of_them() -> None:
    """Each proposed call is judged on the whole conversation: 300 calls on a 500-message one would
    hand the hooks 150,000 messages. None of the calls runs; the rollout ends with the reason."""
    ran.clear()
    calls = [tool_call("cat", {"path": str(i)}, id=f"c{i}") for i in range(300)]
    prompt = [{"role": "user", "content": f"note {i}"} for i in range(500)]
    trace, sent = await _agent_run(lambda req: tool_calls(*calls), Guarded(vf.TaskData(prompt=prompt)))
    assert ran == [] and trace.stop_condition == "harness_error" and "none of them was run" in trace.errors[-1].message
    assert len(sent) == 1 and len(trace.calls) == 1 and "none of them was run" in trace.calls[0].error.message


async def test_a_failed_call_does_not_change_the_forwarded_prompt_ids(monkeypatch) -> None:
    """The end-of-turn glue depends on how the last reply finished: that is the reply's own call,
    not a failed call recorded after it (a program's retry after a 503 sent a doubled end token)."""
    from verifiers.v1 import prefix
    from verifiers.v1.errors import ProviderError
    from verifiers.v1.interception import _failed_call
    from verifiers.v1.trace import AgentInfo
    from verifiers.v1.types import TurnTokens

    async def render(self, messages, **kw):  # a template that does not extend the last tokens
        return [7, 8, 99, 10, 50] if messages and getattr(messages[0], "content", None) == "x" else [1, 2, 555]

    async def anchor(self, state):
        return [7, 8, 99, 10], [99, 10]

    monkeypatch.setattr(prefix.Renderer, "__call__", render)
    monkeypatch.setattr(prefix.Renderer, "anchor", anchor)

    class Client:
        base_url, http = "http://127.0.0.1:9/v1", object()

    out = []
    for fail in (False, True):
        trace = Trace.for_task(vf.Task(vf.TaskData(prompt="q")), agent=AgentInfo(config=vf.AgentConfig().wire()))
        user = vf.UserMessage(content="q")
        first = vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content="a"), finish_reason="stop",
                            tokens=TurnTokens(prompt_ids=[1, 2], completion_ids=[3, 99], completion_logprobs=[0.0, 0.0]))  # fmt: skip
        trace.commit_turn([user], first)
        if fail:
            _failed_call(CallContext(client=None, model="m", trace=trace), {}, 0.0, ProviderError("busy", status_code=503))
        out.append(await prefix.extended_prompt_ids(Client(), "m", trace, [user, first.message, vf.UserMessage(content="more")], None, {"return_token_ids": True}))
    assert out[0] == out[1] == [1, 2, 3, 99, 10, 50]
