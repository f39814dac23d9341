"""Training on v1 environments: samples from the traces' token data, the v1 run path in the
orchestrator, and `vf train` end to end with a v1 environment against the shared real vLLM server."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

import verifiers.v1 as vf
from verifiers.testing.scripted import FakeTokenizer, ScriptedServer, by_turn
from verifiers.train.orchestrator import EnvEntry, Orchestrator, OrchestratorConfig
from verifiers.train.samples import MissingTokenDataError, rollout_to_samples, trace_samples
from verifiers.v1.episode import Episode
from verifiers.v1.trace import AgentInfo, Trace
from verifiers.v1.types import AssistantMessage, Response, SystemMessage, ToolMessage, TurnTokens, UserMessage

PACKAGE = Path(__file__).parent / "packages" / "vf_train_turns"
SAMPLING = {"max_tokens": 8, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}


def _reply(text: str, prompt_ids: list[int] | None, completion_ids: list[int] | None = None,
           logprobs: list[float] | None = None) -> Response:
    tokens = None if prompt_ids is None else TurnTokens(prompt_ids=prompt_ids, completion_ids=completion_ids or [],
                                                        completion_logprobs=logprobs or [])
    return Response(id="r", created=0, model="m", message=AssistantMessage(content=text), finish_reason="stop",
                    tokens=tokens)


def _trace(trainable: bool = True, name: str = "agent") -> Trace:
    task = vf.Task(vf.TaskData(prompt="q"))
    return Trace.for_task(task, agent=AgentInfo(config=vf.AgentConfig().wire(), name=name, trainable=trainable))


# --- traces -> samples (no server) ---------------------------------------------------------------


def test_multi_turn_trace_maps_to_exact_tokens_and_masks():
    trace = _trace()
    sys_, user = SystemMessage(content="s"), UserMessage(content="q")
    r1 = _reply("a", [1, 2, 3, 4], [10, 11], [-0.1, -0.2])
    trace.commit_turn([sys_, user], r1)
    tool = ToolMessage(tool_call_id="c", content="5", name="add")
    r2 = _reply("b", [1, 2, 3, 4, 10, 11, 20, 21, 22], [12, 13, 14], [-0.3, -0.4, -0.5])
    trace.commit_turn([sys_, user, r1.message, tool], r2)
    user2 = UserMessage(content="again")
    r3 = _reply("c", [1, 2, 3, 4, 10, 11, 20, 21, 22, 12, 13, 14, 30, 31], [15], [-0.6])
    trace.commit_turn([sys_, user, r1.message, tool, r2.message, user2], r3)
    # a prompt whose tokens do not extend the conversation's (a template that re-renders history):
    # the trace starts a new branch, and that branch is a sample of its own
    r4 = _reply("d", [1, 2, 99, 30, 31], [16, 17], [-0.7, -0.8])
    trace.commit_turn([sys_, user, r1.message, user2], r4)

    samples = trace_samples(trace, reward=0.5, example_id=7, policy_version=3, env="turns")

    assert len(samples) == 2
    one, two = samples
    assert one.input_ids == [1, 2, 3, 4, 10, 11, 20, 21, 22, 12, 13, 14, 30, 31, 15]
    assert one.loss_mask == [0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1]  # tool and user tokens out
    assert one.inference_logprobs == [0.0] * 4 + [-0.1, -0.2] + [0.0] * 3 + [-0.3, -0.4, -0.5, 0.0, 0.0, -0.6]
    assert two.input_ids == [1, 2, 99, 30, 31, 16, 17]
    assert two.loss_mask == [0, 0, 0, 0, 0, 1, 1]
    assert two.inference_logprobs == [0.0] * 5 + [-0.7, -0.8]
    for s in samples:
        assert (s.reward, s.example_id, s.policy_version, s.env) == (0.5, 7, 3, "turns")

    cut = trace_samples(trace, max_seq_len=7)
    assert cut[0].input_ids == [1, 2, 3, 4, 10, 11, 20] and cut[0].truncated
    assert not cut[1].truncated and len(cut[1].input_ids) == 7


def test_episode_samples_keep_only_trainable_agents_and_the_episode_reward():
    solver, user = _trace(name="solver"), _trace(trainable=False, name="user")
    solver.commit_turn([UserMessage(content="q")], _reply("a", [1, 2], [3], [-0.5]))
    user.commit_turn([UserMessage(content="q")], _reply("b", [7, 8], [9], [-0.9]))
    episode = Episode(task=solver.task, traces=[user, solver])
    samples = rollout_to_samples({"episode": episode, "reward": 0.25, "example_id": 4}, policy_version=1)
    assert [(s.input_ids, s.loss_mask, s.inference_logprobs) for s in samples] == [([1, 2, 3], [0, 0, 1], [0.0, 0.0, -0.5])]
    assert samples[0].reward == 0.25 and samples[0].example_id == 4 and samples[0].policy_version == 1


def test_a_reply_without_token_data_is_one_clear_error():
    trace = _trace()
    trace.commit_turn([UserMessage(content="q")], _reply("a", None))  # the server sent no token ids
    with pytest.raises(MissingTokenDataError, match=r"without token ids.*return_token_ids"):
        trace_samples(trace)
    trace = _trace()
    trace.commit_turn([UserMessage(content="q")], _reply("a", [1, 2], [3, 4], []))  # ids but no logprobs
    with pytest.raises(MissingTokenDataError, match="2 sampled tokens but 0 logprobs"):
        trace_samples(trace)


# --- the orchestrator runs v1 episodes (scripted server with vLLM-shaped token data) -----------------


class _Server:
    def __init__(self, srv):
        from verifiers.clients import ModelClient

        self.client = ModelClient(base_url=srv.base_url)
        self.model = srv.model
        self.healthy = True


def _v1_entry(**args):
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.env_rows import env_rows
    from verifiers.train.v1_envs import V1TrainEnv

    env = load_env(EnvSection(id=str(PACKAGE), args=args))
    assert isinstance(env, V1TrainEnv)
    return EnvEntry("turns", env, 1.0, env_rows(env))


async def test_orchestrator_runs_v1_episodes_and_trains_on_their_tokens():
    entry = _v1_entry()
    # second replies of different lengths: rewards 1/2 and 1/4 within every group
    seconds = iter(["a", "abc"] * 8)
    with ScriptedServer(by_turn("hi", lambda req: next(seconds))) as srv:
        server = _Server(srv)
        orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=4, max_in_flight=1,
                                                                  async_steps=0, max_seq_len=4096),
                            SAMPLING, health_check=False)
        try:
            batch = await orch.next_batch(timeout=30)
        finally:
            await orch.stop()
            await server.client.aclose()
            await entry.env.aclose()
    tok = FakeTokenizer
    assert len(batch.samples) == 4  # each two-turn episode extends its tokens exactly: one sample each
    assert sorted(s.reward for s in batch.samples) == [0.25, 0.25, 0.5, 0.5]
    for s in batch.samples:
        second = "a" if s.reward == 0.5 else "abc"
        first_prompt = tok.render_chat([{"role": "user", "content": f"Say {s.example_id}."}])
        prompt2 = first_prompt + "hi" + "<|user|>Once more.<|assistant|>"
        assert s.input_ids == tok.encode(prompt2 + second)
        n1, n2 = len(first_prompt), len(prompt2)
        assert s.loss_mask == [0] * n1 + [1, 1] + [0] * (n2 - n1 - 2) + [1] * len(second)
        expected = [tok.logprob(t, i) for i, t in enumerate(tok.encode("hi"))]
        expected2 = [tok.logprob(t, i) for i, t in enumerate(tok.encode(second))]
        assert s.inference_logprobs == [0.0] * n1 + expected + [0.0] * (n2 - n1 - 2) + expected2
        assert set(s.advantages) == {s.reward - 0.375}
    assert all(s[3]["episode"] is not None for s in batch.rollouts)


async def test_v1_episodes_without_token_data_stop_the_batch_with_one_error():
    entry = _v1_entry()
    with ScriptedServer("hi", token_ids=False) as srv:
        server = _Server(srv)
        orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=2, max_in_flight=1,
                                                                  async_steps=0, drop_no_signal=False),
                            SAMPLING, health_check=False)
        try:
            with pytest.raises(MissingTokenDataError, match="without token ids"):
                await orch.next_batch(timeout=30)
        finally:
            await orch.stop()
            await server.client.aclose()
            await entry.env.aclose()



async def test_a_trainable_role_sampling_at_its_own_temperature_stops_the_run():
    entry = _v1_entry(agent={"sampling": {"temperature": 0.5}})  # the [env] table: the role's own sampling
    with ScriptedServer("hi") as srv:
        server = _Server(srv)
        orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=2, max_in_flight=1,
                                                                  async_steps=0, drop_no_signal=False),
                            SAMPLING, health_check=False)
        try:
            with pytest.raises(RuntimeError, match=r"agent 'agent' sampled at temperature 0\.5 but training samples at 1\.0"):
                await orch.next_batch(timeout=30)
        finally:
            await orch.stop()
            await server.client.aclose()
            await entry.env.aclose()


def test_sft_warm_start_on_a_v1_environment_is_refused_before_servers_start(tiny_model_dir, tmp_path):
    import asyncio

    from verifiers.train.config import TrainConfig
    from verifiers.train.loop import run_training

    class NoServer:  # never asked: the run must stop before any rollout
        client, model, healthy = None, "m", True

        async def aclose(self):
            pass

    cfg = TrainConfig(**{"model": {"path": str(tiny_model_dir)}, "env": [{"id": str(PACKAGE)}],
                         "sft": {"steps": 1}, "run": {"steps": 1, "output": str(tmp_path / "run")}})
    with pytest.raises(ValueError, match=r"vf_train_turns has rows without one .*set sft.steps = 0"):
        asyncio.run(run_training(cfg, servers=[NoServer()]))


# --- `vf train` with a v1 environment, real vLLM (CPU), real trainer -----------------------------------


TOML = """
[model]
path = "{model}"

[[env]]
id = "{env}"
args = {{ n = 4 }}

[inference]
urls = ["{url}"]
model = "{served}"

[sampling]
max_tokens = 6
# The random tiny model samples only "a" and " ": text that tokenises back to the same ids, so each
# second turn's prompt extends the first turn's tokens exactly (one sample per episode, both turns in
# it), and replies of varying stripped length give the group a signal.
extra = {{ extra_body = {{ allowed_token_ids = {allowed} }} }}

[orchestrator]
batch_groups = 2
group_size = 4
max_in_flight = 2
async_steps = 0
drop_no_signal = false
max_seq_len = 256

[trainer]
seq_len = 256
micro_batch_rows = 8

[run]
steps = 2
checkpoint_every = 0

[logging]
sample_rollouts = 2
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vf_train_on_a_v1_environment_through_env_servers(vllm_server, tmp_path):
    """`vf train` on a v1 env, in a fresh interpreter with ``-W error::ResourceWarning``: the run
    starts an env-server pool for the env (worker processes), every group's episodes are played
    there against the shared vLLM server, every trained sample is one trace branch as the env server
    sent it (token for token, mask for mask, logprob for logprob), the progress bar advances with
    ``eval_every = 0``, and nothing is left: no child process, no env-server process, no unclosed
    session or socket."""
    import os
    import subprocess
    import sys

    from transformers import AutoTokenizer

    model = tmp_path / "model"
    shutil.copytree(vllm_server.model_dir, model)  # the trainer starts from the weights the server holds
    config = tmp_path / "v1.toml"
    tok = AutoTokenizer.from_pretrained(str(model))
    allowed = tok.convert_tokens_to_ids(["a", " "])
    config.write_text(TOML.format(model=model, env=PACKAGE, url=vllm_server.base_url, served=vllm_server.model,
                                  allowed=allowed))
    out, record_path = tmp_path / "run", tmp_path / "record.json"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        proc = subprocess.run([sys.executable, "-W", "error::ResourceWarning", str(Path(__file__).parent / "v1_train_worker.py"),
                               str(config), str(out), str(record_path)], capture_output=True, text=True, timeout=600,
                              env=env, cwd=tmp_path)
    finally:
        vllm_server.reload_weights(vllm_server.model_dir)  # leave the shared server as we found it
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(record_path.read_text())
    assert record["exit_code"] == 0, record["output"]
    assert "Unclosed" not in proc.stderr and "ResourceWarning" not in proc.stderr, proc.stderr[-3000:]
    # the run's env-server pool and its workers existed, and none of them is left
    assert len(record["env_server_pids"]) >= 2
    assert record["children_left"] == []
    assert not [p for p in record["env_server_pids"] if Path(f"/proc/{p}").exists()]
    assert record["progress"][-2:] == [1, 2]  # eval_every = 0: the RL bar still moves every step

    rl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rl] == [1, 2] and [r["policy_version"] for r in rl] == [0, 1]
    assert all(math.isfinite(r["loss/policy"]) and r["weights/update_s"] > 0 for r in rl)
    assert all(r["groups/rescheduled_infra"] == 0 for r in rl)
    assert (out / "model" / "config.json").is_file()
    saved = [json.loads(line) for line in (out / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert saved and all("[agent agent]" in r["completion"] and "Once more." in r["completion"] for r in saved)

    # every trained sample is one branch of a trace the env server sent, token for token, mask for mask
    branches = {tuple(b["ids"]): b for b in record["branches"]}
    trained = record["samples"]
    assert len(trained) == 2 * 2 * 4  # 2 steps x 2 groups x 4 episodes, one sample each
    follow_up = tok.encode("Once more.", add_special_tokens=False)
    for s in trained:
        b = branches[tuple(s["ids"])]
        assert s["mask"] == b["mask"]
        assert s["lps"] == b["lps"]
        assert any(s["lps"][i] != 0.0 for i, m in enumerate(s["mask"]) if m)
        # the sampled tokens are what vLLM reported generating, call by call
        assert sum(s["mask"]) == b["completion_tokens"]
        assert {t for t, m in zip(s["ids"], s["mask"], strict=True) if m} <= set(allowed)
        # both turns in one sample: the user's follow-up is in it, masked out
        assert b["calls"] == 2
        runs = [m for i, m in enumerate(s["mask"]) if i == 0 or m != s["mask"][i - 1]]
        assert runs == [0, 1, 0, 1]
        gap = [t for t, m in zip(s["ids"], s["mask"], strict=True) if not m]
        assert any(gap[i:i + len(follow_up)] == follow_up for i in range(len(gap)))
    assert len({s["reward"] for s in trained}) > 1  # the group had signal: the loss saw nonzero advantages


@pytest.mark.vllm
@pytest.mark.slow
def test_vf_train_resumes_through_env_servers(vllm_server, tmp_path):
    """A run through its env-server pool, stopped after step 2 with a checkpoint per step, then
    `vf train --resume` to step 3: the resumed run starts a pool of its own again, trains step 3
    from the checkpoint's policy (version 2), and each run leaves no process behind."""
    import os
    import subprocess
    import sys

    from transformers import AutoTokenizer

    model = tmp_path / "model"
    shutil.copytree(vllm_server.model_dir, model)
    config = tmp_path / "v1.toml"
    tok = AutoTokenizer.from_pretrained(str(model))
    allowed = tok.convert_tokens_to_ids(["a", " "])
    text = TOML.format(model=model, env=PACKAGE, url=vllm_server.base_url, served=vllm_server.model, allowed=allowed)
    assert "checkpoint_every = 0" in text
    config.write_text(text.replace("checkpoint_every = 0", "checkpoint_every = 1"))
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    records = []
    try:
        for i, extra in enumerate((["--steps", "2"], ["--steps", "3", "--resume"])):
            record_path = tmp_path / f"record{i}.json"
            proc = subprocess.run([sys.executable, str(Path(__file__).parent / "v1_train_worker.py"), str(config), str(out),
                                   str(record_path), *extra], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
            records.append(json.loads(record_path.read_text()))
            assert records[-1]["exit_code"] == 0, records[-1]["output"]
    finally:
        vllm_server.reload_weights(vllm_server.model_dir)
    for record in records:  # each run had its own pool, and nothing of either is left
        assert len(record["env_server_pids"]) >= 2 and record["children_left"] == []
        assert not [p for p in record["env_server_pids"] if Path(f"/proc/{p}").exists()]
    assert not set(records[0]["env_server_pids"]) & set(records[1]["env_server_pids"])
    assert records[0]["samples"] and records[1]["samples"]  # the resumed run trained on episodes of its own pool
    rl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rl][-1] == 3 and rl[-1]["policy_version"] == 2
    assert [r["step"] for r in rl if r["step"] <= 2][:2] == [1, 2]
    assert all(r["groups/rescheduled_infra"] == 0 for r in rl)
