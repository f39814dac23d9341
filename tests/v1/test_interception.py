"""The interception proxy end to end: a real HTTP client, streaming and not, against a real
upstream (ScriptedServer) through our model client."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.interception import CallContext, InterceptionServer, model_call
from verifiers.v1.loading import load_taskset
from verifiers.v1.trace import Trace
from verifiers.v1.types import UserMessage


def _task():
    return next(iter(load_taskset({"id": "vf-sums", "n": 1})))


@pytest.fixture
async def upstream():
    async with ScriptedServer(lambda req: "STOP now" if "halt" in req.messages[-1]["content"] else "fine", token_ids=True, logprobs=True) as srv:
        client = ModelClient.from_any(srv.base_url)
        yield srv, client
        await client.aclose()


async def _proxied(upstream, **ctx_kwargs):
    _srv, client = upstream
    task = _task()
    trace = Trace.for_task(task)
    ctx = CallContext.for_task(task, client=client, model="scripted-model", trace=trace, sampling={"temperature": 0.25}, **ctx_kwargs)
    return ctx, trace


async def test_non_streaming_call_is_recorded_rewritten_and_sampled(upstream) -> None:
    srv, _ = upstream
    ctx, trace = await _proxied(upstream)
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http:
            r = await http.post(f"{base}/chat/completions", json={"model": "x", "temperature": 1.9, "messages": [{"role": "user", "content": "my SECRET"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "fine"
    # vLLM's token ids and logprobs pass through to the program
    assert body["prompt_token_ids"] and body["choices"][0]["token_ids"] == [ord(c) for c in "fine"]
    assert len(body["choices"][0]["logprobs"]["content"]) == 4
    sent = srv.requests[-1].body
    assert sent["messages"][-1]["content"] == "my [redacted]"  # the @vf.intercept rewrite
    assert sent["temperature"] == 0.25  # the agent's sampling wins over the program's
    assert len(trace.calls) == 1 and [r.handler for r in trace.request_rewrites] == ["redact"]
    (reply,) = [n for n in trace.nodes if n.sampled]
    assert reply.token_ids[-4:] == [ord(c) for c in "fine"] and len(reply.logprobs) == 4


async def test_streaming_call_reassembles_to_the_same_reply(upstream) -> None:
    ctx, trace = await _proxied(upstream)
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http, http.stream(
            "POST", f"{base}/chat/completions", json={"model": "x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [line[6:] async for line in r.aiter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "fine"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["token_ids"] == [ord(c) for c in "fine"]
    assert len(trace.calls) == 1


async def test_a_stop_hook_ends_the_rollout_and_refuses_the_next_call(upstream) -> None:
    srv, _ = upstream
    ctx, trace = await _proxied(upstream)
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http:
            first = await http.post(f"{base}/chat/completions", json={"messages": [{"role": "user", "content": "halt"}]})
            n = srv.request_count
            second = await http.post(f"{base}/chat/completions", json={"messages": [{"role": "user", "content": "more"}]})
    # as the original: the reply that fired the stop is on the trace, and the program gets a 400
    # instead of it (it would otherwise act on the reply, run its tool calls)
    assert first.status_code == 400 and first.json()["error"]["code"] == "rollout_stopped"
    assert trace.stop_condition == "said_stop" and trace.last_reply == "STOP now" and len(trace.calls) == 1
    assert second.status_code == 400 and second.json()["error"]["code"] == "rollout_stopped"
    assert srv.request_count == n  # nothing more reached the model


async def test_bad_and_unknown_requests_get_one_clear_error(upstream) -> None:
    ctx, trace = await _proxied(upstream)
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http:
            bad = await http.post(f"{base}/chat/completions", content=b"{not json")
            shape = await http.post(f"{base}/chat/completions", json={"messages": [{"role": "wizard", "content": 1}]})
            gone = await http.post(f"http://127.0.0.1:{proxy.port}/r/nope/v1/chat/completions", json={"messages": []})
            deep = await http.post(f"{base}/chat/completions", content=b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
            odd = await http.post(f"{base}/chat/completions", json={"messages": [{"role": "assistant", "tool_calls": [{"function": 3}]}]})
            nosecret = await http.post(f"{base}/chat/completions", headers={"Authorization": "Bearer guess"}, json={"messages": [{"role": "user", "content": "hi"}]})
            huge = await http.post(f"{base}/chat/completions", content=b'{"messages": "' + b"x" * (65 * 1024 * 1024) + b'"}')
    assert bad.status_code == 400 and shape.status_code == 400 and gone.status_code == 404
    assert deep.status_code == 400 and odd.status_code == 400 and huge.status_code == 413
    assert nosecret.status_code == 404  # a route's URL alone does not reach the model
    assert not trace.calls


async def test_a_program_cannot_steer_the_upstream_call_past_the_proxy(upstream) -> None:
    """What an agent program sends that would reach the model unrecorded or unchecked is refused
    before any upstream call: our client's own body, header, query and deadline layers, several
    replies, a knob that does not validate, values a record cannot hold, a message list too long to
    validate on the event loop; a non-UTF-8 secret is a wrong secret, not a server error."""
    srv, _client = upstream
    ctx, trace = await _proxied(upstream)
    user = [{"role": "user", "content": "hi"}]
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}, timeout=60) as http:
            refused = {
                name: await http.post(f"{base}/chat/completions", json={"messages": user, **extra})
                for name, extra in {
                    "extra_body": {"extra_body": {"model": "other", "temperature": 1.9}},
                    "extra_headers": {"extra_headers": {"Authorization": "Bearer theirs"}},
                    "extra_query": {"extra_query": {"x": "1"}}, "timeout": {"timeout": 0.001},
                    "n": {"n": 8}, "top_p": {"top_p": "hot"}, "max_tokens": {"max_tokens": 1.5},
                    "deep": {"vendor_knob": json.loads("[" * 40 + "]" * 40)},
                }.items()
            }  # fmt: skip
            infinite = await http.post(f"{base}/chat/completions", content=b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}')
            empty = await http.post(f"{base}/chat/completions", json={"messages": []})
            many = await http.post(f"{base}/chat/completions", json={"messages": [{}] * 10_001})
            raw_secret = f"Bearer {ctx.secret}".encode() + b"\xff"
            odd_bytes = await http.post(f"{base}/chat/completions", headers={"Authorization": raw_secret}, json={"messages": user})
            fine = await http.post(f"{base}/chat/completions", json={"messages": user, "top_k": 5})
    for name, resp in refused.items():
        assert resp.status_code == 400, (name, resp.text)
    assert "extra_body cannot be set by an agent program" in refused["extra_body"].json()["error"]["message"]
    assert "n must be 1" in refused["n"].json()["error"]["message"]
    assert infinite.status_code == 400 and "not a finite number" in infinite.text
    assert empty.status_code == 400 and many.status_code == 400 and "at most 10000" in many.text
    assert odd_bytes.status_code == 404
    # only the last call reached the model, with the proxy's sampling and the program's vendor key
    assert fine.status_code == 200 and len(srv.requests) == 1 and len(trace.calls) == 1
    assert srv.requests[0].body["temperature"] == 0.25 and srv.requests[0].body["top_k"] == 5


async def test_a_call_the_program_hung_up_on_is_not_recorded() -> None:
    """A program whose HTTP client gives up on a slow call and retries (the OpenAI SDK's default)
    gets one turn on its trace, not two: the call it left is cancelled, not recorded."""
    from verifiers.testing.scripted import reply

    async with ScriptedServer(lambda req: reply("slow answer", delay=1.0)) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            ctx, trace = await _proxied((srv, client))
            async with InterceptionServer() as proxy:
                base = proxy.register(ctx)
                body = {"messages": [{"role": "user", "content": "slow please"}]}
                async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http:
                    with pytest.raises(httpx.TimeoutException):
                        await http.post(f"{base}/chat/completions", json=body, timeout=0.3)
                    retry = await http.post(f"{base}/chat/completions", json=body, timeout=30)
        finally:
            await client.aclose()
    assert retry.status_code == 200 and retry.json()["choices"][0]["message"]["content"] == "slow answer"
    assert len(trace.calls) == 1 and trace.num_branches == 1 and not trace.errors


async def test_slow_heads_and_too_many_connections_hold_nothing(upstream, monkeypatch) -> None:
    """A program that opens connections and trickles half a request head (slow loris) is cut off
    after HEAD_TIMEOUT, and past MAX_CONNECTIONS a new connection is closed at once; the proxy
    keeps serving the calls of everyone else."""
    import asyncio

    from verifiers.v1 import interception

    monkeypatch.setattr(interception, "HEAD_TIMEOUT", 0.5)
    monkeypatch.setattr(interception, "KEEPALIVE_TIMEOUT", 1.0)
    monkeypatch.setattr(interception, "MAX_CONNECTIONS", 4)
    ctx, trace = await _proxied(upstream)

    async def half_head(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /r/x/v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        return reader, writer

    async with InterceptionServer() as proxy:
        base = proxy.register(ctx)
        slow = [await half_head(proxy.port) for _ in range(4)]
        extra_reader, extra_writer = await half_head(proxy.port)  # the fifth: closed at once
        assert await asyncio.wait_for(extra_reader.read(), 5) == b""
        for reader, _ in slow:  # each trickling head is cut off once its time is up
            assert await asyncio.wait_for(reader.read(), 5) == b""
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx.secret}"}) as http:
            fine = await http.post(f"{base}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        # a kept-alive connection: one whole request, then a second head trickled byte by byte
        path = base.removeprefix(f"http://127.0.0.1:{proxy.port}")
        body = b'{"messages": [{"role": "user", "content": "again"}]}'
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ctx.secret}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
        started = asyncio.get_running_loop().time()
        closed = False
        for byte in b"POST /r/x/v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: a\r\n" * 40:  # never a whole head
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                closed = True
                break
            if reader.at_eof() or asyncio.get_running_loop().time() - started > 5:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(65536), 0.05)  # the first reply's rest, then EOF
        closed = closed or reader.at_eof()
        assert closed and asyncio.get_running_loop().time() - started < 4  # cut off after KEEPALIVE_TIMEOUT
        for _, w in [*slow, (extra_reader, extra_writer), (reader, writer)]:
            w.close()
    assert fine.status_code == 200 and len(trace.calls) == 2


async def test_in_process_calls_record_the_same_trace_as_the_proxy(upstream) -> None:
    """Why the null harness skips HTTP: model_call is the function behind the proxy, so the
    trace is the same call for call (ids and timestamps aside)."""
    ctx_a, via_proxy = await _proxied(upstream)
    ctx_b, direct = await _proxied(upstream)
    async with InterceptionServer() as proxy:
        base = proxy.register(ctx_a)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ctx_a.secret}"}) as http:
            await http.post(f"{base}/chat/completions", json={"messages": [{"role": "user", "content": "my SECRET"}]})
    await model_call(ctx_b, [UserMessage(content="my SECRET")], None)

    def shape(t: Trace):
        return [n.model_dump(exclude={"timestamp"}) for n in t.nodes], [(c.node, c.finish_reason, c.sampling) for c in t.calls], t.request_rewrites

    assert shape(via_proxy) == shape(direct)


async def test_an_external_harness_reaches_the_model_only_through_the_proxy() -> None:
    from verifiers.v1.env import load_environment
    from verifiers.v1.rollout import run_v1

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1}, "agent": {"harness": {"id": "vf-curl-harness"}, "sampling": {"temperature": 0.5}}})
    async with ScriptedServer(lambda req: "1") as srv:
        client = ModelClient.from_any(srv.base_url)
        out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        await client.aclose()
        assert srv.requests[-1].body["temperature"] == 0.5
    state = out.state[0]
    trace = state["_episode"].traces[0]
    assert trace.info["program_stdout"] == "1"
    assert len(trace.calls) == 1 and trace.last_reply == "1" and state["reward"] == 1.0


def test_a_token_without_its_logprob_makes_the_replys_logprobs_missing_not_zero() -> None:
    from verifiers.clients.response import ModelResponse
    from verifiers.v1.interception import response_from_model

    def reply_with(lps):
        return ModelResponse(raw={}, message={"role": "assistant", "content": "ab"}, finish_reason="stop",
                             prompt_token_ids=[1, 2], completion_token_ids=[97, 98], completion_logprobs=lps)  # fmt: skip

    whole = response_from_model(reply_with([-0.5, -1.25]), "m")
    assert whole.tokens.completion_logprobs == [-0.5, -1.25]
    holed = response_from_model(reply_with([-0.5, None]), "m")
    assert holed.tokens.completion_ids == [97, 98] and holed.tokens.completion_logprobs == []


async def test_the_providers_cached_and_reasoning_tokens_and_cost_reach_the_trace() -> None:
    from verifiers.testing.scripted import reply

    usages = [
        {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57, "cost": 0.0021,
         "prompt_tokens_details": {"cached_tokens": 32}, "completion_tokens_details": {"reasoning_tokens": 5}},
        # hostile figures: details that are not counts, a cost that is not a number, more cache
        # reads than prompt tokens: left out, the call still counts
        {"prompt_tokens": 4, "completion_tokens": 2, "cost": "free",
         "prompt_tokens_details": {"cached_tokens": 9}, "completion_tokens_details": {"reasoning_tokens": "many"}},
        # no usage counts at all: the client's own (from the token ids) stand
        {"total_tokens": 3},
    ]
    async with ScriptedServer(lambda req: reply("fine", usage=usages.pop(0)), token_ids=True) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            task = _task()
            got = []
            for _ in range(3):
                trace = Trace.for_task(task)
                ctx = CallContext.for_task(task, client=client, model="scripted-model", trace=trace)
                await model_call(ctx, [UserMessage(content="hi")], None)
                got.append(trace.calls[0].usage)
        finally:
            await client.aclose()
    first, second, third = got
    assert (first.prompt_tokens, first.cached_input_tokens, first.completion_tokens) == (18, 32, 7)
    assert (first.reasoning_tokens, first.cost, first.input_tokens, first.total_tokens) == (5, 0.0021, 50, 57)
    assert (second.prompt_tokens, second.cached_input_tokens, second.reasoning_tokens, second.cost) == (4, None, None, None)
    assert third.completion_tokens == len("fine") and third.prompt_tokens > 0 and third.cached_input_tokens is None
