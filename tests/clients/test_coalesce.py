"""Identical requests of one event-loop turn sent as one ``n``-sample request (``coalesce_samples``)."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest
from datasets import Dataset

import verifiers as vf
from verifiers.clients import ModelClient, ModelError
from verifiers.testing import ScriptedServer, error, reply

MSGS = [{"role": "user", "content": "Say something"}]
ARGS = {"max_tokens": 32, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}


def counting_script():
    counter = itertools.count()
    return lambda req: reply(f"answer {next(counter)}")


async def test_identical_requests_share_one_request_and_get_their_own_choice():
    with ScriptedServer(counting_script()) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            out = await asyncio.gather(*(client.chat(model="m", messages=MSGS, sampling_args=ARGS) for _ in range(8)))
            other = await client.chat(model="m", messages=MSGS, sampling_args=ARGS)  # a later turn: its own request
    assert len(srv.requests) == 2
    assert srv.requests[0].body["n"] == 8 and "n" not in srv.requests[1].body
    contents = [r.content for r in out]
    assert sorted(contents) == sorted(f"answer {i}" for i in range(8))  # every caller a different sample
    assert other.content == "answer 8"
    for r in out:
        # each caller sees its own tokens, logprobs and usage; the prompt is the shared one
        assert r.completion_token_ids == [ord(c) for c in r.content]
        assert len(r.completion_logprobs) == len(r.completion_token_ids)
        assert r.prompt_token_ids == out[0].prompt_token_ids and r.prompt_token_ids
        assert r.usage["completion_tokens"] == len(r.content)
        assert r.raw["choices"][0]["index"] == 0 and len(r.raw["choices"]) == 1


async def test_only_identical_requests_merge():
    with ScriptedServer(counting_script()) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            calls = [client.chat(model="m", messages=MSGS, sampling_args=ARGS) for _ in range(3)]
            calls += [client.chat(model="m", messages=[{"role": "user", "content": "other"}], sampling_args=ARGS)]
            calls += [client.chat(model="m2", messages=MSGS, sampling_args=ARGS)]
            calls += [client.chat(model="m", messages=MSGS, sampling_args={**ARGS, "temperature": 0.5})]
            await asyncio.gather(*calls)
    assert sorted(r.body.get("n", 1) for r in srv.requests) == [1, 1, 1, 3]


@pytest.mark.parametrize("args", [{**ARGS, "seed": 7}, {**ARGS, "n": 2}, {**ARGS, "extra_body": {"seed": 7}}])
async def test_seeded_or_explicit_n_requests_are_never_merged(args):
    with ScriptedServer(counting_script()) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            await asyncio.gather(*(client.chat(model="m", messages=MSGS, sampling_args=args) for _ in range(4)))
    assert len(srv.requests) == 4


async def test_off_by_default():
    with ScriptedServer(counting_script()) as srv:
        async with ModelClient(base_url=srv.base_url) as client:
            await asyncio.gather(*(client.chat(model="m", messages=MSGS, sampling_args=ARGS) for _ in range(4)))
    assert len(srv.requests) == 4 and all("n" not in r.body for r in srv.requests)


async def test_an_error_reaches_every_caller():
    with ScriptedServer(error(400, "bad request")) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True, max_retries=0) as client:
            out = await asyncio.gather(*(client.chat(model="m", messages=MSGS) for _ in range(4)),
                                       return_exceptions=True)
    assert len(srv.requests) == 1
    assert all(isinstance(e, ModelError) and e.status == 400 for e in out)


async def test_too_few_choices_is_an_error_not_a_hang():
    with ScriptedServer({"body": {"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "one"}, "finish_reason": "stop"}]}}) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            out = await asyncio.gather(*(client.chat(model="m", messages=MSGS) for _ in range(3)),
                                       return_exceptions=True)
    assert all(isinstance(e, ModelError) and "got 1 choices" in str(e) for e in out)


async def test_a_cancelled_caller_does_not_hurt_the_others():
    # each request's reply is held at the server until the test releases it: the cancellations
    # below happen while the shared request is in flight, on any machine
    release = [threading.Event(), threading.Event()]

    async def held(req):
        await asyncio.to_thread(release[req.index].wait, 120)  # 120 s: only a guard against a hang
        return reply("slow")

    async def at_server(count: int) -> None:
        for _ in range(6000):  # a guard: returns as soon as the request has arrived
            if srv.request_count >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"request {count} never reached the server")

    with ScriptedServer(held) as srv:
        try:
            async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
                tasks = [asyncio.create_task(client.chat(model="m", messages=MSGS)) for _ in range(3)]
                await at_server(1)
                tasks[0].cancel()
                release[0].set()
                done = await asyncio.gather(*tasks, return_exceptions=True)
                assert isinstance(done[0], asyncio.CancelledError)
                assert [r.content for r in done[1:]] == ["slow", "slow"]
                # every caller gone: the shared request is cancelled as well
                lone = [asyncio.create_task(client.chat(model="m", messages=MSGS)) for _ in range(2)]
                await at_server(2)
                for t in lone:
                    t.cancel()
                assert all(isinstance(r, asyncio.CancelledError) for r in await asyncio.gather(*lone, return_exceptions=True))
        finally:
            for event in release:
                event.set()
    assert [r.body.get("n") for r in srv.requests] == [3, 2]


async def test_a_group_of_rollouts_is_one_request_per_turn():
    """The SDK path: a SingleTurnEnv group through a coalescing client; rollouts stay independent."""
    rows = Dataset.from_list([{"question": "q1", "answer": "answer 3"}])

    def right(completion, answer, **kw) -> float:
        return float(completion[-1]["content"] == answer)

    env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[right]))
    with ScriptedServer(counting_script()) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            row = env.get_dataset()[0]
            states = await env.run_group([dict(row, rollout_index=i) for i in range(6)], client, "m", ARGS)
    assert len(srv.requests) == 1 and srv.requests[0].body["n"] == 6
    assert sorted(s["completion"][-1]["content"] for s in states) == [f"answer {i}" for i in range(6)]
    assert sorted(s["reward"] for s in states) == [0.0] * 5 + [1.0]
    for s in states:
        step = s["trajectory"][0]
        assert step["tokens"]["completion_ids"] == [ord(c) for c in s["completion"][-1]["content"]]


async def test_a_split_sample_keeps_the_shared_prompt_figures_but_no_cost_of_all_samples():
    usage = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23, "cost": 0.5,
             "prompt_tokens_details": {"cached_tokens": 16}, "completion_tokens_details": {"reasoning_tokens": 2}}
    with ScriptedServer(lambda req: reply("abc", usage=usage)) as srv:
        async with ModelClient(base_url=srv.base_url, coalesce_samples=True) as client:
            out = await asyncio.gather(*(client.chat(model="m", messages=MSGS, sampling_args=ARGS) for _ in range(4)))
    assert len(srv.requests) == 1
    for r in out:
        got = r.raw["usage"]
        assert got["prompt_tokens"] == 20 and got["prompt_tokens_details"] == {"cached_tokens": 16}
        assert got["completion_tokens"] == 3 and got["total_tokens"] == 23
        # counted over all four samples: not this sample's
        assert "cost" not in got and "completion_tokens_details" not in got
