"""Samples from REAL multi-turn tool rollouts: vf.ToolEnv run by the orchestrator against a loopback
OpenAI-compatible server that returns vLLM-shaped token ids and logprobs (one token per character)."""

from datasets import Dataset

import verifiers as vf
from verifiers.testing.scripted import ScriptedServer, by_turn, tool_call, tool_calls
from verifiers.train.orchestrator import EnvEntry, Orchestrator, OrchestratorConfig


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


class Server:
    def __init__(self, srv):
        from verifiers.clients import ModelClient

        self.client = ModelClient(base_url=srv.base_url)
        self.model = srv.model
        self.healthy = True


def answer_is(completion, answer, **kw) -> float:
    return 1.0 if str(completion[-1].get("content", "")).strip() == answer else 0.0


async def test_tool_rollout_samples_mask_tool_tokens():
    env = vf.ToolEnv(dataset=Dataset.from_list([{"question": "2+3?", "answer": "5"}] * 4), tools=[add],
                     max_turns=4, rubric=vf.Rubric(funcs=[answer_is]))
    # Half the rollouts answer right (reward 1), half wrong (reward 0): the group has signal.
    final = iter(["5", "6", "5", "6"] * 4)
    script = by_turn(tool_calls(tool_call("add", {"a": 2, "b": 3})), lambda req: next(final))
    with ScriptedServer(script) as srv:
        server = Server(srv)
        rows = [dict(r) for r in env.get_dataset().to_list()]
        orch = Orchestrator([EnvEntry("tools", env, 1.0, rows)], [server],
                            OrchestratorConfig(batch_groups=1, group_size=4, max_in_flight=1, async_steps=0,
                                               max_seq_len=4096),
                            {"max_tokens": 64, "logprobs": True, "extra_body": {"return_token_ids": True}},
                            health_check=False)
        try:
            batch = await orch.next_batch(timeout=30)
        finally:
            await orch.stop()
            await server.client.aclose()
    tok = srv.tokenizer
    assert len(batch.samples) == 4  # each 2-turn rollout extends its tokens exactly: one sample each
    rewards = sorted(s.reward for s in batch.samples)
    assert rewards == [0.0, 0.0, 1.0, 1.0]
    for s in batch.samples:
        text = tok.decode(s.input_ids)
        sampled = tok.decode(t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m)
        # exactly the model's two turns are trainable: the tool call, then the final answer
        call = '<tool_call>{"arguments": "{\\"a\\": 2, \\"b\\": 3}", "name": "add"}</tool_call>'
        assert sampled in (call + "5", call + "6"), sampled
        # the tool's result and the template around it are in the sequence but masked out
        assert "<|tool|>5" in text
        masked = tok.decode(t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if not m)
        assert "<|tool|>5" in masked and "2+3?" in masked
        # inference logprobs are set exactly on sampled tokens, and advantages are +-0.5
        assert all((lp != 0.0) == bool(m) for lp, m in zip(s.inference_logprobs, s.loss_mask, strict=True))
        assert set(s.advantages) == {0.5 if s.reward == 1.0 else -0.5}
