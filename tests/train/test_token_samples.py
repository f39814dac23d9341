"""Token-exact multi-turn samples through the env-server wire.

The same function (``episode_samples``) makes the same samples from an episode played in process
and from the ``WireEpisode`` an ``EnvClient`` assembled from a served run; a chat template that
rewrites history is either made to extend the previous tokens (vLLM: forwarded prompt ids) or the
sample splits, and both are counted (trace ``info["token_prefix"]``, ``samples/extended`` /
``samples/split`` per batch). The vLLM test runs a served multi-turn task against the shared
real CPU vLLM with a template that strips past ``<think>`` blocks."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest

from verifiers.testing.scripted import FakeTokenizer, ScriptedServer, by_turn, tool_call, tool_calls
from verifiers.train.samples import episode_samples, sample_metrics
from verifiers.v1.wire import dump

PACKAGES = Path(__file__).parent / "packages"
CONFIG = {"taskset": {"id": "vf_train_think", "n": 2}}
TOKENS = {"max_tokens": 50, "temperature": 1.0, "logprobs": True, "return_token_ids": True}


@pytest.fixture
def think_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PACKAGES))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("vf_train_think", "vf_train_turns")]:
        sys.modules.pop(name)


@contextlib.asynccontextmanager
async def served(tmp_path):
    """The env served by an ``EnvServer`` on an ipc socket, and an ``EnvClient`` connected to it."""
    from verifiers.v1.serve import EnvClient, EnvServer

    server = EnvServer(CONFIG, address=f"ipc://{tmp_path}/env")
    stop = asyncio.Event()
    serving = asyncio.ensure_future(server.serve(stop))
    try:
        async with EnvClient(server.address) as client:
            await client.wait_for_server_startup(timeout=60)
            yield server, client
    finally:
        stop.set()
        await asyncio.wait_for(serving, 30)


def _in_process_env():
    from verifiers.train.v1_envs import V1TrainEnv
    from verifiers.v1.env import load_environment

    return V1TrainEnv(load_environment(CONFIG))


def _rows(env, strip: bool):
    rows = []
    for row in env.dataset:
        task = row["task"]
        rows.append({**row, "task": type(task)(task.data.model_copy(update={"strip_history": strip}))})
    return rows


def _triple(samples):
    return [(s.input_ids, s.loss_mask, s.inference_logprobs, s.prefix_extended, s.prefix_split) for s in samples]


# a tool call (with a think block), the tool's answer, a reply, the env's follow-up, a last reply
SCRIPT = by_turn(tool_calls(tool_call("add", {"a": 1, "b": 2}), content="<think>t</think>"),
                 "<think>u</think>3", "<think>v</think>again")


async def test_served_and_in_process_episodes_make_the_same_token_exact_samples(think_package, tmp_path):
    from verifiers.clients import ModelClient

    env = _in_process_env()
    tok = FakeTokenizer
    try:
        async with ScriptedServer(SCRIPT) as model, served(tmp_path) as (_, client):
            local_client = ModelClient(base_url=model.base_url)
            try:
                for strip in (False, True):
                    rows = _rows(env, strip)
                    states = await env.run_group(rows, local_client, model.model, TOKENS)
                    wire = [await client.run(model.base_url, model.model, TOKENS, dump(r["task"].data)) for r in rows]
                    for state, episode in zip(states, wire, strict=True):
                        local = episode_samples(state["episode"], reward=1.0)
                        remote = episode_samples(episode, reward=1.0)
                        record = episode_samples(episode.model_dump(mode="python"), reward=1.0)  # a record: the same
                        assert _triple(local) == _triple(remote) == _triple(record)
                        trace = episode.traces[0]
                        assert [type(n.message).__name__ for n in trace.nodes if n.sampled] == ["AssistantMessage"] * 3
                        if not strip:
                            # the whole conversation is one sample: prompt, tool call, tool output and
                            # follow-up masked out, every sampled token in with the server's logprob
                            (s,) = remote
                            call_text = '<tool_call>{"arguments": "{\\"a\\": 1, \\"b\\": 2}", "name": "add"}</tool_call>'
                            replies = ["<think>t</think>" + call_text, "<think>u</think>3", "<think>v</think>again"]
                            sampled = [t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m]
                            assert tok.decode(sampled) == "".join(replies)
                            text = tok.decode(s.input_ids)
                            assert text.endswith("<|user|>Once more.<|assistant|><think>v</think>again")
                            assert "<|tool|>3<|assistant|><think>u</think>3" in text
                            expected = [tok.logprob(t, i) for r in replies for i, t in enumerate(tok.encode(r))]
                            assert [lp for lp, m in zip(s.inference_logprobs, s.loss_mask, strict=True) if m] == expected
                            assert all(lp == 0.0 for lp, m in zip(s.inference_logprobs, s.loss_mask, strict=True) if not m)
                            assert (s.prefix_extended, s.prefix_split) == (0, 0)
                            assert trace.info.get("token_prefix") is None
                        else:
                            # the task rewrote the earlier replies (no <think>): each later turn starts a
                            # new path, so its sample splits there, and the trace and samples say so
                            assert trace.info["token_prefix"] == {"extended": 0, "split": 2}
                            assert sum(s.prefix_split for s in remote) == 2 and len(remote) == 3
                            assert sample_metrics(remote) == {"samples/extended": 0.0, "samples/split": 2.0}
                            for s in remote[1:]:
                                text = tok.decode(s.input_ids)
                                assert "<think>t</think>" not in text and "<think>u</think>3<|" not in text
            finally:
                await local_client.aclose()
    finally:
        await env.aclose()


async def test_the_orchestrator_counts_split_samples_per_batch(think_package):
    from verifiers.train.orchestrator import EnvEntry, Orchestrator, OrchestratorConfig

    env = _in_process_env()
    env.dataset = _rows(env, True)

    class Server:
        def __init__(self, srv):
            from verifiers.clients import ModelClient

            self.client, self.model, self.healthy = ModelClient(base_url=srv.base_url), srv.model, True

    with ScriptedServer(SCRIPT) as srv:
        server = Server(srv)
        orch = Orchestrator([EnvEntry("think", env, 1.0, list(env.dataset))], [server],
                            OrchestratorConfig(batch_groups=1, group_size=2, max_in_flight=1, async_steps=0,
                                               drop_no_signal=False), TOKENS, health_check=False)
        try:
            batch = await orch.next_batch(timeout=30)
        finally:
            await orch.stop()
            await server.client.aclose()
            await env.aclose()
    # two episodes, each split at both later turns: three samples each
    assert len(batch.samples) == 6
    assert batch.metrics["samples/split"] == 4.0 and batch.metrics["samples/extended"] == 0.0


async def test_a_server_that_ignores_forwarded_ids_splits_and_is_never_asked_again():
    import verifiers.v1 as vf
    from verifiers.v1 import prefix
    from verifiers.v1.trace import AgentInfo, Trace
    from verifiers.v1.types import AssistantMessage, Response, TurnTokens, UserMessage

    class Client:  # a server that once took forwarded ids and re-rendered the prompt instead
        base_url = "http://127.0.0.1:9/v1"

        @property
        def http(self):
            raise AssertionError("a client whose server ignored forwarded ids was asked to render again")

    def reply(text, prompt_ids, completion_ids):
        return Response(id="r", created=0, model="m", message=AssistantMessage(content=text), finish_reason="stop",
                        tokens=TurnTokens(prompt_ids=prompt_ids, completion_ids=completion_ids,
                                          completion_logprobs=[-0.5] * len(completion_ids)))

    client, user, again = Client(), UserMessage(content="q"), UserMessage(content="again")
    trace = Trace.for_task(vf.Task(vf.TaskData(prompt="q")), agent=AgentInfo(config=vf.AgentConfig().wire()))
    first = reply("<think>a</think>b", [1, 2], [3, 4])
    trace.commit_turn([user], first)
    honoured = Trace.for_task(vf.Task(vf.TaskData(prompt="q")), agent=AgentInfo(config=vf.AgentConfig().wire()))
    prefix.check_honoured(client, honoured, [1, 2, 3], [1, 2, 3])
    assert honoured.info["token_prefix"] == {"extended": 1, "split": 0}

    prefix.check_honoured(client, trace, [1, 2, 3, 4, 8, 9], [1, 2, 4, 8, 9])  # not what was sent
    trace.commit_turn([user, first.message, again], reply("c", [1, 2, 4, 8, 9], [5]))
    assert trace.info["token_prefix"] == {"extended": 0, "split": 1}
    assert [s.input_ids for s in episode_samples({"task": trace.task.model_dump(), "traces": [trace.model_dump()]})] == [
        [1, 2, 3, 4], [1, 2, 4, 8, 9, 5]]
    later = [user, first.message, again, AssistantMessage(content="c"), UserMessage(content="more")]
    assert await prefix.extended_prompt_ids(client, "m", trace, later, None, {"return_token_ids": True}) is None
    # another conversation recorded on the same trace (a sub-agent's) is a branch, not a split
    trace.commit_turn([UserMessage(content="other"), again], reply("d", [7, 7], [6]))
    assert trace.info["token_prefix"] == {"extended": 0, "split": 1} and len(trace.branches) == 3


# --- real vLLM (CPU): a template that strips past <think> blocks ---------------------------------------


def _think_template() -> str:
    """The tiny model's template, except that an assistant message before the last one loses its
    ``<think>`` block (as reasoning models' templates render history)."""
    from verifiers.serving.tiny_model import CHAT_TEMPLATE

    plain = "{% if message['content'] is string -%}\n{{ message['content'] }}"
    assert plain in CHAT_TEMPLATE
    return CHAT_TEMPLATE.replace(plain, "{% if message['content'] is string -%}\n{{ message['content'].split('</think>')[-1] "
                                        "if message['role'] == 'assistant' and not loop.last else message['content'] }}")


@pytest.mark.vllm
@pytest.mark.slow
async def test_vllm_samples_are_token_exact_extended_or_split(vllm_server, think_package, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from verifiers.clients import ModelClient

    template = _think_template()
    # every reply's think block is forced by a regex; the reply ends on EOS, well within max_tokens
    # (the tools are rendered into the prompt; this server parses no tool calls, so none are asked for)
    sampling = {**TOKENS, "max_tokens": 32, "chat_template": template, "tool_choice": "none",
                "structured_outputs": {"regex": "<think>[a ]{1,3}</think>[a ]{1,3}"}}
    calls: list = []  # (request, vLLM's parsed reply) of every model call the env server made
    chat = ModelClient.chat

    async def recording(self, **kwargs):
        reply = await chat(self, **kwargs)
        calls.append((kwargs, reply))
        return reply

    monkeypatch.setattr(ModelClient, "chat", recording)
    tok = AutoTokenizer.from_pretrained(str(vllm_server.model_dir))

    def rendered(request) -> list[int]:  # what the template renders for a request, by the real tokenizer
        return list(tok.apply_chat_template(request["messages"], tools=request.get("tools"), chat_template=template,
                                            add_generation_prompt=True, tokenize=True, return_dict=False))

    async with served(tmp_path) as (_, client):
        for strip in (False, True):
            for i in range(2):
                data = {"prompt": f"Add {i} and 2.", "name": f"add-{i}", "strip_history": strip}
                first = len(calls)
                episode = await client.run(vllm_server.base_url, vllm_server.model, sampling, data)
                (trace,) = episode.traces
                assert episode.ok, episode.errors or trace.errors
                (req1, r1), (req2, r2) = calls[first:]
                p1, c1, c2 = r1.prompt_token_ids, r1.completion_token_ids, r2.completion_token_ids
                lp1, lp2 = r1.completion_logprobs, r2.completion_logprobs
                assert p1 == rendered(req1)  # turn 1: the template's own render
                assert r1.finish_reason == "stop" and "</think>" in r1.content
                samples = episode_samples(episode, reward=0.5)
                assert sample_metrics(samples) == {"samples/extended": float(not strip), "samples/split": float(strip)}
                if not strip:
                    # the template would drop turn 1's think block; the prompt sent was turn 1's exact
                    # ids, the end-of-turn glue and the follow-up as the template renders it
                    assert rendered(req2)[: len(p1) + len(c1)] != p1 + c1
                    forwarded = req2["sampling_args"]["kv_transfer_params"]["prompt_token_ids"]
                    assert r2.prompt_token_ids == forwarded and forwarded[: len(p1) + len(c1)] == p1 + c1
                    gap = forwarded[len(p1) + len(c1):]
                    assert tok.decode(gap) == "<|im_end|>\n<|im_start|>user\nOnce more.<|im_end|>\n<|im_start|>assistant\n"
                    assert trace.info["token_prefix"] == {"extended": 1, "split": 0}
                    (s,) = samples  # one sample: both turns, token for token what vLLM read and sampled
                    assert s.input_ids == forwarded + c2
                    assert s.loss_mask == [0] * len(p1) + [1] * len(c1) + [0] * len(gap) + [1] * len(c2)
                    assert s.inference_logprobs == [0.0] * len(p1) + lp1 + [0.0] * len(gap) + lp2
                else:
                    # the env rewrote turn 1 in the history itself: nothing to extend, the template's
                    # render is the prompt, and the sample splits there (counted)
                    assert "kv_transfer_params" not in req2["sampling_args"]
                    assert r2.prompt_token_ids == rendered(req2) and "<think>" not in req2["messages"][2]["content"]
                    assert trace.info["token_prefix"] == {"extended": 0, "split": 1}
                    one, two = samples
                    assert (one.input_ids, one.loss_mask, one.inference_logprobs) == (
                        p1 + c1, [0] * len(p1) + [1] * len(c1), [0.0] * len(p1) + lp1)
                    n = len(r2.prompt_token_ids)
                    assert (two.input_ids, two.loss_mask, two.inference_logprobs) == (
                        r2.prompt_token_ids + c2, [0] * n + [1] * len(c2), [0.0] * n + lp2)
