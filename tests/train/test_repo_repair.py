"""Training on repo-repair: the agentic loop (the `bash` harness, every command and the scoring test run
in the bubblewrap sandbox) becomes training samples whose tokens and masks are exactly the model's
own turns. First with a scripted server returning vLLM-shaped token data (one group: one rollout fixes
the bug, one does not), then `vf train` end to end with the tiny model on the real vLLM server."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import private_sandbox_root
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.train.orchestrator import EnvEntry, Orchestrator, OrchestratorConfig

ENV_ARGS = {
    "taskset": {"packages": ["schema"]},
    "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox", "timeout": 120}, "max_turns": 3},
}


@pytest.fixture(scope="module", autouse=True)
def _sandbox_dir() -> Iterator[Path]:
    with private_sandbox_root("vf-repo-repair-train-") as root:
        yield root


def _leftovers(root: Path) -> list[Path]:
    """Sandbox work folders (and uv caches) still on disk."""
    return list(root.glob("run-*"))


class _Server:
    def __init__(self, srv):
        from verifiers.clients import ModelClient

        self.client = ModelClient(base_url=srv.base_url)
        self.model = srv.model
        self.healthy = True


def _entry(args):
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.env_rows import env_rows
    from verifiers.train.v1_envs import V1TrainEnv

    env = load_env(EnvSection(id="repo-repair", args=args))
    assert isinstance(env, V1TrainEnv)
    return EnvEntry("repo-repair", env, 1.0, env_rows(env))


async def test_repair_episodes_train_on_the_models_own_tokens_only(_sandbox_dir: Path):
    entry = _entry(ENV_ARGS)
    tasks = {row["task"].data.prompt: row["task"] for row in entry.rows}
    fixes = iter([True, False] * 4)  # the group's first turns, in arrival order: one fixes, one does not

    def first(req):
        task = tasks[next(m["content"] for m in req.messages if m["role"] == "user")]
        if next(fixes):
            command = f"cat > .vf/fix.diff <<'END'\n{task.data.patch}END\ngit apply -R .vf/fix.diff && echo applied"
        else:
            command = "git status --short && echo untouched"
        return tool_calls(tool_call("bash", {"command": command}, id="c1"))

    def second(req):
        return reply("done" if "applied" in req.messages[-1]["content"] else "none")

    def script(req):
        return first(req) if req.messages[-1]["role"] == "user" else second(req)

    with ScriptedServer(script) as srv:
        server = _Server(srv)
        orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=2, max_in_flight=1,
                                                                  async_steps=0, max_seq_len=1 << 16),
                            {"max_tokens": 4096, "logprobs": True, "extra_body": {"return_token_ids": True}},
                            health_check=False)  # fmt: skip
        try:
            batch = await orch.next_batch(timeout=240)
        finally:
            await orch.stop()
            await server.client.aclose()
            await entry.env.aclose()
    tok = srv.tokenizer
    assert sorted(s.reward for s in batch.samples) == [0.0, 1.0]
    for s in batch.samples:
        sampled = tok.decode(t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m)
        masked = tok.decode(t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if not m)
        final = "done" if s.reward == 1.0 else "none"
        # exactly the model's two turns are trained on: its bash call, then its last reply
        assert sampled.startswith("<tool_call>") and sampled.endswith("</tool_call>" + final), sampled[-200:]
        assert ("applied" if s.reward == 1.0 else "untouched") in masked  # the tool's output: masked out
        assert "The test suite of schema" in masked  # the problem statement: masked out
        assert all((lp != 0.0) == bool(m) for lp, m in zip(s.inference_logprobs, s.loss_mask, strict=True))
        assert set(s.advantages) == {0.5 if s.reward == 1.0 else -0.5}
    for rollout in batch.rollouts:
        episode = rollout[3]["episode"]
        (trace,) = episode.traces
        assert trace.agent.runtime["type"] == "sandbox" and not trace.errors
        assert trace.metrics["pass_to_pass"] == 1.0
    assert not _leftovers(_sandbox_dir)  # every rollout's sandbox folder is gone


TOML = """
[model]
path = "{model}"

[[env]]
id = "repo-repair"
args = {{ taskset = {{ ids = ["{task_id}"] }}, agent = {{ harness = {{ id = "bash" }}, runtime = {{ type = "sandbox", timeout = 120 }}, max_turns = 2 }} }}

[inference]
urls = ["{url}"]
model = "{served}"

[sampling]
max_tokens = 6
# the random tiny model samples only "a" and " ": it never calls a tool, so each episode is one turn;
# the shared server has no tool-call parser, so the request asks for none (the tools stay in the prompt)
extra = {{ extra_body = {{ allowed_token_ids = {allowed}, tool_choice = "none" }} }}

[orchestrator]
batch_groups = 1
group_size = 2
max_in_flight = 1
async_steps = 0
drop_no_signal = false
max_seq_len = 2048

[trainer]
seq_len = 2048
micro_batch_rows = 2

[run]
steps = 1
checkpoint_every = 0
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vf_train_runs_the_repair_loop_with_the_tiny_model(vllm_server, tmp_path, monkeypatch, _sandbox_dir):
    from transformers import AutoTokenizer
    from typer.testing import CliRunner

    from verifiers.train.cli import app
    from verifiers.train.env_servers import EnvServers
    from verifiers.train.trainer import Trainer

    model = tmp_path / "model"
    shutil.copytree(vllm_server.model_dir, model)
    tok = AutoTokenizer.from_pretrained(str(model))
    allowed = tok.convert_tokens_to_ids(["a", " "])
    # the tiny model reads 2048 characters: the schema task with the shortest problem statement
    import repo_repair as rr

    task = min(rr.RepoRepair(rr.RepairConfig(packages=["schema"])).load(), key=lambda t: len(t.data.prompt or ""))
    config = tmp_path / "repair.toml"
    config.write_text(TOML.format(model=model, url=vllm_server.base_url, served=vllm_server.model, allowed=allowed,
                                  task_id=task.data.id))
    trained: list = []
    episodes: list = []
    step, run_group = Trainer.step, EnvServers.run_group

    def recording_step(self, samples):
        trained.extend(samples)
        return step(self, samples)

    async def recording_run_group(self, *args, **kwargs):
        states = await run_group(self, *args, **kwargs)
        episodes.extend(s["episode"] for s in states)
        return states

    monkeypatch.setattr(Trainer, "step", recording_step)
    # the run plays its v1 episodes through an env server pool it launches (the default): what came
    # back over the wire is what is checked
    monkeypatch.setattr(EnvServers, "run_group", recording_run_group)
    out = tmp_path / "run"
    try:
        result = CliRunner().invoke(app, [str(config), "--output", str(out)], catch_exceptions=False)
    finally:
        vllm_server.reload_weights(vllm_server.model_dir)  # leave the shared server as we found it
    assert result.exit_code == 0, result.output[-3000:]
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and math.isfinite(row["loss/policy"])
    assert len(episodes) == 2 and len(trained) == 2
    for episode in episodes:
        (trace,) = episode.traces
        # set up, played and scored in the sandbox: the untouched bug scores 0, with no error
        assert trace.agent.runtime["type"] == "sandbox" and not trace.errors, trace.errors
        assert trace.reward == 0.0 and trace.metrics["fail_to_pass"] == 0.0 and trace.metrics["pass_to_pass"] == 1.0
    for s in trained:
        assert s.reward == 0.0
        assert 0 < sum(s.loss_mask) <= 6 and {t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m} <= set(allowed)
        prompt = tok.decode([t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if not m])
        assert "The test suite of schema" in prompt and '"name": "bash"' in prompt  # the statement and the bash tool
    assert not _leftovers(_sandbox_dir)
