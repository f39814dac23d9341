"""ModelClient against a real loopback server: request shape, retries, timeouts, concurrency, token data."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.support.gate import HELD, InFlightGate
from verifiers.clients import ClientConfig, ModelClient, ModelError, ModelTimeoutError
from verifiers.clients import client as client_module
from verifiers.testing import FakeTokenizer, ScriptedServer, disconnect, error, reply, tool_call, tool_calls

MSGS = [{"role": "user", "content": "What is 2+2?"}]


class RecordedWaits:
    """Stands in for ``asyncio`` inside the client module: every ``asyncio.sleep`` the client asks for
    (its retry waits) is recorded and returns at once; everything else is the real ``asyncio``."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result=None):
        self.waits.append(delay)
        await asyncio.sleep(0)
        return result


@pytest.fixture
def recorded_waits(monkeypatch) -> RecordedWaits:
    waits = RecordedWaits()
    monkeypatch.setattr(client_module, "asyncio", waits)
    return waits


def fast(base_url: str, **kw) -> ModelClient:
    """A client with tiny backoff so retry tests run in milliseconds."""
    kw.setdefault("backoff_initial", 0.001)
    kw.setdefault("backoff_max", 0.01)
    return ModelClient(base_url=base_url, **kw)


async def test_chat_sends_body_and_parses_reply():
    with ScriptedServer("four") as srv:
        async with fast(srv.base_url, api_key="sk-test", headers={"X-Run": "r1"}) as client:
            resp = await client.chat(
                model="m1",
                messages=MSGS,
                tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                sampling_args={
                    "temperature": 0.5,
                    "max_tokens": 64,
                    "extra_body": {"top_k": 5, "min_p": 0.1},
                },
            )
    assert resp.message == {"role": "assistant", "content": "four"}
    assert resp.content == "four"
    assert resp.finish_reason == "stop"
    assert resp.raw["object"] == "chat.completion"
    assert resp.usage == {
        "prompt_tokens": len(FakeTokenizer.render_chat(MSGS, srv.requests[0].tools)),
        "completion_tokens": 4,
    }
    (req,) = srv.requests
    assert req.path == "/v1/chat/completions"
    body = req.body
    # sampling args pass through untouched, extra_body is merged into the top level
    assert body["temperature"] == 0.5 and body["max_tokens"] == 64
    assert body["top_k"] == 5 and body["min_p"] == 0.1 and "extra_body" not in body
    assert body["model"] == "m1" and body["messages"] == MSGS and body["tools"][0]["function"]["name"] == "f"
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.headers["x-run"] == "r1"


async def test_api_key_from_environment_variable(monkeypatch):
    monkeypatch.setenv("MY_TEST_KEY", "sk-from-env")
    with ScriptedServer("ok") as srv:
        async with ModelClient(ClientConfig(base_url=srv.base_url, api_key_var="MY_TEST_KEY")) as client:
            await client.chat(model="m", messages=MSGS)
    assert srv.requests[0].headers["authorization"] == "Bearer sk-from-env"


async def test_no_tools_key_when_no_tools():
    with ScriptedServer("ok") as srv:
        async with fast(srv.base_url) as client:
            await client.chat(model="m", messages=MSGS, tools=None)
    assert "tools" not in srv.requests[0].body
    assert "authorization" not in srv.requests[0].headers


async def test_retries_transient_errors_then_succeeds():
    with ScriptedServer([error(503), error(502), "finally"]) as srv:
        async with fast(srv.base_url, max_retries=5) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.content == "finally"
    assert srv.request_count == 3


async def test_gives_up_after_max_retries():
    with ScriptedServer(error(500, "boom")) as srv:
        async with fast(srv.base_url, max_retries=2) as client:
            with pytest.raises(ModelError) as info:
                await client.chat(model="m", messages=MSGS)
    assert srv.request_count == 3  # first try + 2 retries
    assert info.value.status == 500
    assert info.value.transient is True
    assert info.value.attempts == 3
    assert "boom" in info.value.message


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_no_retry_on_other_4xx(status):
    with ScriptedServer([error(status, "bad request: prompt too long"), "never"]) as srv:
        async with fast(srv.base_url, max_retries=5) as client:
            with pytest.raises(ModelError) as info:
                await client.chat(model="m", messages=MSGS)
    assert srv.request_count == 1
    assert info.value.status == status
    assert info.value.transient is False
    assert info.value.message == "bad request: prompt too long"


async def test_429_is_retried_honouring_retry_after(recorded_waits):
    # backoff_initial=0 makes the jittered wait 0 s, so any wait comes from Retry-After
    with ScriptedServer([error(429, "slow down", retry_after=0.4), "ok"]) as srv:
        async with fast(srv.base_url, backoff_initial=0.0, backoff_max=5.0) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.content == "ok"
    assert srv.request_count == 2
    assert recorded_waits.waits == [0.4]  # the one wait before the retry is the server's


async def test_retry_after_ms_header(recorded_waits):
    with ScriptedServer([error(503, headers={"retry-after-ms": "300"}), "ok"]) as srv:
        async with fast(srv.base_url, backoff_initial=0.0, backoff_max=5.0) as client:
            await client.chat(model="m", messages=MSGS)
    assert srv.request_count == 2
    assert recorded_waits.waits == [0.3]


def test_parse_retry_after_forms():
    assert client_module.parse_retry_after({"retry-after": "2"}) == 2.0
    assert client_module.parse_retry_after({"retry-after": "-3"}) == 0.0
    assert client_module.parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert client_module.parse_retry_after({}) is None
    assert client_module.parse_retry_after({"retry-after": "garbage"}) is None
    http_date = "Wed, 21 Oct 2015 07:28:00 GMT"  # in the past: no wait
    assert client_module.parse_retry_after({"retry-after": http_date}) == 0.0


async def test_backoff_is_exponential_with_full_jitter(monkeypatch):
    bounds: list[tuple[float, float]] = []

    def fake_uniform(low: float, high: float) -> float:
        bounds.append((low, high))
        return 0.0

    monkeypatch.setattr(client_module.random, "uniform", fake_uniform)
    with ScriptedServer(error(503)) as srv:
        async with ModelClient(
            base_url=srv.base_url, max_retries=5, backoff_initial=0.1, backoff_max=0.5
        ) as client:
            with pytest.raises(ModelError):
                await client.chat(model="m", messages=MSGS)
    assert srv.request_count == 6
    assert bounds == [(0.0, 0.1), (0.0, 0.2), (0.0, 0.4), (0.0, 0.5), (0.0, 0.5)]


async def test_timeout_is_per_request_and_retried():
    # the server never answers: only the client's own per-request timeout can end each attempt
    with ScriptedServer(reply("late", delay=HELD)) as srv:
        async with fast(srv.base_url, timeout=1.0, max_retries=1) as client:
            with pytest.raises(ModelTimeoutError) as info:
                await asyncio.wait_for(client.chat(model="m", messages=MSGS), 120)  # guard against a hang
    assert info.value.transient is True and info.value.status is None
    assert srv.request_count == 2


async def test_timeout_then_success():
    with ScriptedServer([reply("late", delay=HELD), "quick"]) as srv:
        async with fast(srv.base_url, timeout=0.3) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.content == "quick"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused_is_transient_and_retried():
    async with fast(f"http://127.0.0.1:{_closed_port()}/v1", max_retries=2) as client:
        with pytest.raises(ModelError) as info:
            await client.chat(model="m", messages=MSGS)
    assert info.value.status is None
    assert info.value.transient is True
    assert info.value.attempts == 3


async def test_dropped_connection_is_retried():
    with ScriptedServer([disconnect(), disconnect(), "recovered"]) as srv:
        async with fast(srv.base_url) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.content == "recovered"
    assert srv.request_count == 3


async def test_first_retry_after_a_dropped_keepalive_connection_is_immediate(monkeypatch, recorded_waits):
    monkeypatch.setattr(client_module.random, "uniform", lambda low, high: high)  # worst-case jitter
    with ScriptedServer([disconnect(), "fresh"]) as srv:
        async with ModelClient(base_url=srv.base_url, backoff_initial=5.0, backoff_max=5.0) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.content == "fresh" and srv.request_count == 2
    assert recorded_waits.waits == [0.0]  # no 5 s (worst-case jitter) backoff for a stale connection


async def test_semaphore_bounds_requests_in_flight():
    # replies are held until 4 requests are in flight together: the bound is reached, never passed
    gate = InFlightGate(4, total=24)
    with ScriptedServer(gate) as srv:
        async with fast(srv.base_url, max_concurrent_requests=4) as client:
            results = await asyncio.gather(*[client.chat(model="m", messages=MSGS) for _ in range(24)])
    assert [r.content for r in results] == ["ok"] * 24
    assert gate.batches == 6
    assert srv.max_in_flight == 4


async def test_unbounded_client_runs_requests_concurrently():
    # no reply leaves the server before all 50 requests are in it at once
    gate = InFlightGate(50, total=50)
    with ScriptedServer(gate) as srv:
        async with fast(srv.base_url) as client:
            results = await asyncio.gather(*[client.chat(model="m", messages=MSGS) for _ in range(50)])
    assert [r.content for r in results] == ["ok"] * 50
    assert gate.batches == 1 and srv.max_in_flight == 50


async def test_token_ids_and_logprobs_extraction():
    with ScriptedServer("4") as srv:
        async with fast(srv.base_url) as client:
            resp = await client.chat(
                model="m",
                messages=MSGS,
                sampling_args={"logprobs": True, "extra_body": {"return_token_ids": True}},
            )
    assert srv.requests[0].body["return_token_ids"] is True
    expected_prompt = FakeTokenizer.encode(FakeTokenizer.render_chat(MSGS))
    assert resp.prompt_token_ids == expected_prompt
    assert resp.completion_token_ids == [ord("4")]
    assert resp.completion_logprobs == [FakeTokenizer.logprob(ord("4"), 0)]
    assert resp.usage == {"prompt_tokens": len(expected_prompt), "completion_tokens": 1}
    step = resp.to_dict(include_raw=False)
    assert "raw" not in step and step["completion_token_ids"] == [52]
    json.dumps(step)


async def test_token_data_absent_when_not_requested():
    with ScriptedServer("4") as srv:
        async with fast(srv.base_url) as client:
            resp = await client.chat(model="m", messages=MSGS)
    assert resp.prompt_token_ids is None
    assert resp.completion_token_ids is None
    assert resp.completion_logprobs is None


def test_parse_vllm_chat_shape_without_server():
    body = {
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi", "refusal": None, "tool_calls": []},
                "finish_reason": "length",
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "h", "logprob": -0.5}, {"token": "i", "logprob": -0.25}]},
            }
        ],
    }
    resp = client_module.parse_chat_response(body)
    assert resp.message == {"role": "assistant", "content": "hi"}  # None fields and empty tool_calls dropped
    assert resp.prompt_token_ids == [1, 2, 3]
    assert resp.completion_token_ids == [7, 8]
    assert resp.completion_logprobs == [-0.5, -0.25]
    assert resp.finish_reason == "length"
    assert resp.usage == {"prompt_tokens": 3, "completion_tokens": 2}  # from token ids when usage is absent


async def test_tool_calls_with_malformed_arguments_come_through_verbatim():
    script = tool_calls(tool_call("add", {"a": 1, "b": 2}), tool_call("broken", '{"a": 1,'))
    with ScriptedServer(script) as srv:
        async with fast(srv.base_url) as client:
            resp = await client.chat(model="m", messages=MSGS)
    calls = resp.tool_calls
    assert [c["function"]["name"] for c in calls] == ["add", "broken"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert calls[1]["function"]["arguments"] == '{"a": 1,'
    assert resp.finish_reason == "tool_calls"
    assert all(c["id"] for c in calls)


async def test_completions_text_tokens_and_logprobs():
    with ScriptedServer("abc") as srv:
        async with fast(srv.base_url) as client:
            resp = await client.completion(
                model="base",
                prompt="2+2=",
                sampling_args={"logprobs": 1, "extra_body": {"return_token_ids": True}},
            )
    assert srv.requests[0].path == "/v1/completions"
    assert srv.requests[0].body["prompt"] == "2+2="
    assert resp.text == "abc" and resp.content == "abc"
    assert resp.prompt_token_ids == FakeTokenizer.encode("2+2=")
    assert resp.completion_token_ids == FakeTokenizer.encode("abc")
    assert resp.completion_logprobs == [FakeTokenizer.logprob(t, i) for i, t in enumerate(b"abc")]
    assert resp.usage == {"prompt_tokens": 4, "completion_tokens": 3}


async def test_malformed_success_body_is_a_non_transient_error():
    with ScriptedServer(reply(body={"object": "chat.completion", "choices": []})) as srv:
        async with fast(srv.base_url) as client:
            with pytest.raises(ModelError) as info:
                await client.chat(model="m", messages=MSGS)
    assert info.value.status == 200 and not info.value.transient
    assert srv.request_count == 1


async def test_non_json_error_body_text_is_the_message():
    with ScriptedServer(reply(body="upstream exploded", status=400)) as srv:
        async with fast(srv.base_url) as client:
            with pytest.raises(ModelError, match="upstream exploded"):
                await client.chat(model="m", messages=MSGS)


async def test_models_and_httpx_surface():
    with ScriptedServer("ok", model="served-model") as srv:
        async with fast(srv.base_url, api_key="k") as client:
            assert await client.models() == ["served-model"]
            response = await client.http.get("/models")
            assert response.status_code == 200
            assert response.json()["data"][0]["id"] == "served-model"
            assert srv.requests == []  # GET /models is not recorded as a completion request


def test_client_reused_across_event_loops():
    import gc
    import warnings

    with ScriptedServer("ok") as srv, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        client = fast(srv.base_url)
        for _ in range(3):
            assert asyncio.run(client.chat(model="m", messages=MSGS)).content == "ok"
        asyncio.run(client.aclose())
        gc.collect()
    assert srv.request_count == 3
    # sessions left behind by closed loops were released, not leaked with "unclosed" warnings
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_from_any_openai_client():
    import openai

    with ScriptedServer("ok") as srv:
        oai = openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-openai", max_retries=3, timeout=12.5)
        client = ModelClient.from_any(oai)
        assert client.base_url == srv.base_url
        assert client.config.max_retries == 3
        assert client.config.timeout == 12.5
        async with client:
            await client.chat(model="m", messages=MSGS)
        await oai.close()
    assert srv.requests[0].headers["authorization"] == "Bearer sk-openai"


def test_from_any_other_forms():
    cfg = ClientConfig(base_url="http://h:1/v1/", max_retries=1)
    existing = ModelClient(cfg)
    assert ModelClient.from_any(existing) is existing
    assert ModelClient.from_any(cfg).base_url == "http://h:1/v1"
    from_dict = ModelClient.from_any(
        {"base_url": "http://h:2/v1", "api_key": "x", "max_concurrent_requests": 8}
    )
    assert from_dict.base_url == "http://h:2/v1" and from_dict.config.max_concurrent_requests == 8
    assert ModelClient.from_any("http://h:3/v1").base_url == "http://h:3/v1"
    assert ModelClient.from_any(None).base_url == ClientConfig().base_url.rstrip("/")
    assert ModelClient.from_any(existing, timeout=5).config.timeout == 5
    with pytest.raises(TypeError):
        ModelClient.from_any(42)
    with pytest.raises(ValueError):  # overrides are validated like the config itself
        ModelClient(cfg, timeout="not a number")
    with pytest.raises(ValueError):
        ModelClient.from_any({"base_url": "x", "not_a_field": 1})


def test_model_error_is_picklable_and_readable():
    import pickle

    err = ModelError(503, "overloaded", True, attempts=4)
    again = pickle.loads(pickle.dumps(err))
    assert (again.status, again.message, again.transient, again.attempts) == (503, "overloaded", True, 4)
    assert str(err) == "HTTP 503: overloaded after 4 attempts"
    timeout = pickle.loads(pickle.dumps(ModelTimeoutError("slow")))
    assert isinstance(timeout, ModelTimeoutError) and timeout.transient


def test_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, verifiers.clients as c; c.ClientConfig; c.ModelClient; "
        "print(','.join(m for m in ('aiohttp', 'httpx', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


async def test_openai_request_options_in_sampling_args():
    with ScriptedServer(reply("slow", delay=HELD)) as srv:  # only the 0.2 s timeout can end the call
        async with fast(srv.base_url, max_retries=0) as client:
            with pytest.raises(ModelTimeoutError):
                await client.chat(model="m", messages=MSGS, sampling_args={"timeout": 0.2})
    with ScriptedServer("ok") as srv:
        async with fast(srv.base_url, api_key="k") as client:
            await client.chat(
                model="m",
                messages=MSGS,
                sampling_args={
                    "temperature": 0.0,
                    "extra_headers": {"X-Session": "abc"},
                    "extra_query": {"trace": "1"},
                    "extra_body": {"skip_special_tokens": False},
                },
            )
    (req,) = srv.requests
    assert req.headers["x-session"] == "abc" and req.headers["authorization"] == "Bearer k"
    assert req.query == {"trace": "1"}
    assert set(req.body) == {"model", "messages", "temperature", "skip_special_tokens"}


def _reference_body(body) -> bytes:
    """What the client sent before its encoder was built once: json.dumps, compact, UTF-8."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=client_module._json_default).encode()


def test_request_bodies_are_byte_identical_to_json_dumps():
    import dataclasses

    from pydantic import BaseModel

    from verifiers.types import AssistantMessage, SystemMessage, ToolCall, UserMessage

    class Part(BaseModel):
        type: str = "text"
        text: str = "voilà"
        note: str | None = None

    @dataclasses.dataclass
    class Extra:
        weight: float = 0.1

    call = ToolCall(id="c1", name="add", arguments={"a": 1})
    body = {
        "model": "m/ü",
        "messages": [
            SystemMessage("Réponds brièvement. 答えて 🙂 \u2028 \x00 \"quoted\" back\\slash"),
            UserMessage([Part()]),
            AssistantMessage(content=None, tool_calls=[call]),
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
        ],
        "temperature": 0.7,
        "top_p": 1e-300,
        "floats": [0.1 + 0.2, 1e22, -0.0, 3.0, float("nan"), float("inf"), float("-inf")],
        "ints": [0, -1, 2**70],
        "flags": [True, False, None],
        "tuple": (1, "two"),
        "set": {"only"},
        "extra": Extra(),
        "nested": {"deep": [[{"k": "v"}]], 5: "int key", 1.5: "float key", None: "null key"},
    }
    got = client_module.encode_body(body)
    assert got == _reference_body(body)
    assert "Réponds".encode() in got and b"\\u" not in got.split(b"\\u0000")[0]  # non-ASCII not escaped
    # what the server reads back is what was sent (NaN / Infinity as Python's json writes them)
    again = json.loads(got)
    assert again["messages"][1]["content"] == [{"type": "text", "text": "voilà"}]  # exclude_none
    assert again["floats"][0] == 0.1 + 0.2 and again["ints"][2] == 2**70


def test_a_body_that_cannot_be_sent_fails_before_sending():
    with pytest.raises(TypeError, match="cannot send object"):
        client_module.encode_body({"model": "m", "messages": [{"role": "user", "content": object()}]})
    looped: dict = {"role": "user"}
    looped["content"] = [looped]
    with pytest.raises((ValueError, RecursionError)):
        client_module.encode_body({"model": "m", "messages": [looped]})
    # a failed body leaves nothing behind: the same message encodes fine afterwards
    msg = {"role": "user", "content": "hi"}
    assert client_module.encode_body({"messages": [msg, msg]}) == _reference_body({"messages": [msg, msg]})
