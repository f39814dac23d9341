"""The scripted test server and the fast benchmark server, exercised over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from verifiers.testing import (
    FakeTokenizer,
    Reply,
    ScriptedServer,
    by_turn,
    echo,
    error,
    reply,
    to_reply,
    tool_call,
    tool_calls,
)


def post(url: str, body: dict) -> tuple[int, dict, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def chat(srv: ScriptedServer, messages: list[dict], **extra) -> tuple[int, dict, dict]:
    return post(srv.base_url + "/chat/completions", {"model": "m", "messages": messages, **extra})


USER = [{"role": "user", "content": "hello there"}]


def test_default_script_echoes_last_message():
    with ScriptedServer() as srv:
        status, _, body = chat(srv, USER)
    assert status == 200
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello there"}
    assert body["model"] == "m"


def test_queue_then_last_repeats_and_exhausted_error():
    with ScriptedServer(["a", "b"]) as srv:
        got = [chat(srv, USER)[2]["choices"][0]["message"]["content"] for _ in range(4)]
    assert got == ["a", "b", "b", "b"]
    with ScriptedServer(["a"], exhausted="error") as srv:
        assert chat(srv, USER)[0] == 200
        status, _, body = chat(srv, USER)
    assert status == 400 and "exhausted" in body["error"]["message"]


def test_callable_script_sees_request_and_async_callables_work():
    seen = []

    def script(req):
        seen.append((req.index, req.turn, req["model"]))
        return f"turn {req.turn}: {req.messages[-1]['content']}"

    async def ascript(req):
        return {"content": "from async", "finish_reason": "length"}

    with ScriptedServer(script) as srv:
        _, _, body = chat(
            srv, [*USER, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
        )
    assert body["choices"][0]["message"]["content"] == "turn 1: y"
    assert seen == [(0, 1, "m")]
    with ScriptedServer(ascript) as srv:
        _, _, body = chat(srv, USER)
    assert body["choices"][0]["message"]["content"] == "from async"
    assert body["choices"][0]["finish_reason"] == "length"


def test_by_turn_tool_call_then_answer():
    script = by_turn(tool_calls(tool_call("lookup", {"q": "x"})), "the answer")
    with ScriptedServer(script) as srv:
        _, _, first = chat(srv, USER)
        msg = first["choices"][0]["message"]
        call = msg["tool_calls"][0]
        assert call["function"] == {"name": "lookup", "arguments": '{"q": "x"}'} and call["id"]
        assert first["choices"][0]["finish_reason"] == "tool_calls"
        history = [*USER, msg, {"role": "tool", "tool_call_id": call["id"], "content": "found"}]
        _, _, second = chat(srv, history)
        assert second["choices"][0]["message"]["content"] == "the answer"


def test_errors_with_headers_and_statuses():
    with ScriptedServer([error(429, "rate limited", retry_after=7), error(503), "ok"]) as srv:
        status, headers, body = chat(srv, USER)
        assert status == 429 and headers["Retry-After"] == "7"
        assert body["error"]["message"] == "rate limited" and body["error"]["type"] == "rate_limit_error"
        assert chat(srv, USER)[0] == 503
        assert chat(srv, USER)[0] == 200
        assert srv.request_count == 3


def test_broken_script_answers_500_with_the_exception():
    def script(req):
        raise KeyError("oops")

    with ScriptedServer(script) as srv:
        status, _, body = chat(srv, USER)
    assert status == 500 and "KeyError" in body["error"]["message"]


def test_token_ids_and_logprobs_follow_request_or_are_forced():
    with ScriptedServer("hey") as srv:
        _, _, plain = chat(srv, USER)
        _, _, rich = chat(srv, USER, return_token_ids=True, logprobs=True)
    assert "prompt_token_ids" not in plain and plain["choices"][0]["logprobs"] is None
    assert rich["prompt_token_ids"] == FakeTokenizer.encode(FakeTokenizer.render_chat(USER))
    assert rich["choices"][0]["token_ids"] == [104, 101, 121]
    lps = rich["choices"][0]["logprobs"]["content"]
    assert [x["token"] for x in lps] == ["h", "e", "y"]
    assert all(x["logprob"] < 0 for x in lps)
    with ScriptedServer("hey", token_ids=True, logprobs=False) as srv:
        _, _, forced = chat(srv, USER, logprobs=True)
    assert forced["choices"][0]["token_ids"] == [104, 101, 121] and forced["choices"][0]["logprobs"] is None


def test_max_tokens_truncates_with_length_finish():
    with ScriptedServer("abcdefgh") as srv:
        _, _, body = chat(srv, USER, max_tokens=3)
        _, _, comp = post(srv.base_url + "/completions", {"model": "m", "prompt": "p", "max_tokens": 2})
    assert body["choices"][0]["message"]["content"] == "abc"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    assert comp["choices"][0]["text"] == "ab" and comp["choices"][0]["finish_reason"] == "length"


def test_models_endpoint_and_records():
    with ScriptedServer("x", model="tiny") as srv:
        with urllib.request.urlopen(srv.base_url + "/models", timeout=10) as resp:
            data = json.loads(resp.read())
        chat(srv, USER, temperature=0.1)
        assert data["data"][0]["id"] == "tiny"
        (req,) = srv.requests
        assert req.body["temperature"] == 0.1 and req.path == "/v1/chat/completions"
        srv.reset()
        assert srv.requests == []


def test_chat_streams_as_server_sent_events():
    with ScriptedServer("streamed", token_ids=True) as srv:
        request = urllib.request.Request(
            srv.base_url + "/chat/completions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}).encode(),
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            events = [line.removeprefix(b"data: ") for line in resp.read().split(b"\n\n") if line]
        status, _, refused = chat(srv, USER, stream=True, n=2)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "streamed"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]] == [None, "stop"]
    assert chunks[0]["choices"][0]["token_ids"] and chunks[0]["prompt_token_ids"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(chunks[0]["choices"][0]["token_ids"])
    assert status == 400 and "stream" in refused["error"]["message"]


async def test_async_context_manager():
    async with ScriptedServer("async ok") as srv:
        import asyncio

        status, _, body = await asyncio.to_thread(chat, srv, USER)
    assert status == 200 and body["choices"][0]["message"]["content"] == "async ok"
    with pytest.raises(RuntimeError):
        _ = srv.base_url  # stopped servers have no URL


def test_to_reply_forms():
    assert to_reply("x") == Reply(content="x")
    assert to_reply(503).status == 503
    assert to_reply({"content": "y", "delay": 0.1}).delay == 0.1
    assert to_reply(None) == Reply()
    with pytest.raises(ValueError):
        to_reply({"contnet": "typo"})
    assert echo.__name__ == "echo" and reply("z").content == "z"


def _start_fast_server(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifiers.testing.fast_server", "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def test_fast_server_auto_mode_answers_or_calls_tools():
    proc, base = _start_fast_server()
    try:
        status, _, plain = post(base + "/chat/completions", {"model": "m", "messages": USER})
        assert status == 200 and plain["choices"][0]["message"]["content"] == "The answer is 4."
        _, _, first = post(base + "/chat/completions", {"model": "m", "messages": USER, "tools": TOOLS})
        call = first["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "add" and json.loads(call["function"]["arguments"]) == {
            "a": 2,
            "b": 2,
        }
        history = [
            *USER,
            first["choices"][0]["message"],
            {"role": "tool", "tool_call_id": "call_0", "content": "4"},
        ]
        _, _, second = post(base + "/chat/completions", {"model": "m", "messages": history, "tools": TOOLS})
        assert second["choices"][0]["message"]["content"] == "The answer is 4."
        _, _, comp = post(base + "/completions", {"model": "m", "prompt": "x"})
        assert comp["choices"][0]["text"] == "The answer is 4."
        with urllib.request.urlopen(base + "/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "fast-model"
        with urllib.request.urlopen(base + "/stats", timeout=10) as resp:
            assert json.loads(resp.read()) == {"requests": 4}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fast_server_tool_and_answer_modes():
    proc, base = _start_fast_server("--mode", "tool", "--tool-name", "lookup", "--answer", "done")
    try:
        _, _, first = post(base + "/chat/completions", {"model": "m", "messages": USER})
        assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
        tool_msg = {"role": "tool", "tool_call_id": "call_0", "content": "4"}
        _, _, second = post(base + "/chat/completions", {"model": "m", "messages": [*USER, tool_msg]})
        assert second["choices"][0]["message"]["content"] == "done"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    proc, base = _start_fast_server("--mode", "answer")
    try:
        _, _, reply_body = post(base + "/chat/completions", {"model": "m", "messages": USER, "tools": TOOLS})
        assert reply_body["choices"][0]["message"]["content"] == "The answer is 4."
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fast_server_chunked_and_pipelined_requests():
    import socket

    proc, base = _start_fast_server()
    port = int(base.rsplit(":", 1)[1].split("/")[0])
    try:
        body = json.dumps({"model": "m", "messages": USER, "tools": TOOLS}).encode()
        half = len(body) // 2
        chunked = (
            b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % half
            + body[:half]
            + b"\r\n"
            + b"%x\r\n" % (len(body) - half)
            + body[half:]
            + b"\r\n0\r\n\r\n"
        )
        plain = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % len(json.dumps({"messages": USER}))
            + json.dumps({"messages": USER}).encode()
        )
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            payload = chunked + plain
            for i in range(0, len(payload), 7):  # arrive in small pieces
                sock.sendall(payload[i : i + 7])
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        responses = received.split(b"HTTP/1.1 200 OK")[1:]
        assert len(responses) == 2
        assert b'"tool_calls"' in responses[0] and b"The answer is 4." in responses[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fast_server_streams_when_asked():
    """``"stream": true`` gets the same reply as server-sent events ending in ``[DONE]`` (the
    original 0.4.0's interception always streams upstream)."""
    proc, base = _start_fast_server("--tool-name", "calc_add")
    try:
        for messages, tools in ((USER, None), (USER, TOOLS)):
            body = {"model": "m", "messages": messages, "stream": True, **({"tools": tools} if tools else {})}
            req = urllib.request.Request(
                base + "/chat/completions",
                data=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.headers["content-type"] == "text/event-stream"
                events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            delta = chunks[0]["choices"][0]["delta"]
            if tools:
                assert delta["tool_calls"][0]["function"]["name"] == "calc_add"
                assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
            else:
                assert delta["content"] == "The answer is 4."
                assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
            assert chunks[-1]["usage"]["completion_tokens"] == 8
    finally:
        proc.terminate()
        proc.wait(timeout=10)
