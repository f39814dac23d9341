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
    for name in [m for m in sys.modules if m == "vf_train_think" or m.startswith("vf_train_think.")]:
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
                            assert all(lp < 0 for lp, m in zip(s.inference_logprobs, s.loss_mask, strict=True) if m)
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
