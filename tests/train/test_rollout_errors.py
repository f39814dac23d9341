"""A failed rollout is never a training signal: errored rollouts are kept out of the loss (alone or
with their group), counted by source, and a run whose rollouts keep failing stops with one message."""

import asyncio
import json

import pytest
from datasets import Dataset

import verifiers as vf
from verifiers.testing.scripted import ScriptedServer, by_turn, tool_call, tool_calls
from verifiers.train.orchestrator import (
    EnvEntry,
    Orchestrator,
    OrchestratorConfig,
    RolloutsFailingError,
)
from verifiers.train.packing import pack

BAD = 99  # completion token of a failed rollout: it must never reach a batch


class FakeServer:
    def __init__(self, name="a"):
        self.client, self.model, self.healthy = name, "m", True

    async def reload_weights(self, path, version=None):
        return 0.0

    async def aclose(self):
        pass


def make_state(row, i, reward, error=None):
    comp = [BAD, BAD] if error else [7 + i, 8]
    st = {"reward": reward, "example_id": row["id"], "error": error, "trajectory": [
        {"tokens": {"prompt_ids": [1, 2, row["id"] % 50 + 3], "completion_ids": comp,
                    "completion_logprobs": [-0.5, -0.5]}}]}
    return st


def rollout_fn(pattern):
    """pattern(row, i) -> (reward, error or None) for rollout i of a group."""
    async def fn(entry, row, n, client, model, sampling_args):
        await asyncio.sleep(0)
        return [make_state(row, i, *pattern(row, i)) for i in range(n)]
    return fn


def tool_error(msg="tool exploded"):
    return {"type": "RuntimeError", "message": msg, "source": "tool:lookup"}


def orch(fn, **cfg):
    c = OrchestratorConfig(**{"batch_groups": 2, "group_size": 4, "max_in_flight": 4, "async_steps": 0,
                              "max_off_policy": 1, **cfg})
    rows = [{"id": i} for i in range(40)]
    return Orchestrator([EnvEntry("e", None, 1.0, rows)], [FakeServer()], c, {}, rollout_fn=fn,
                        health_check=False)


async def test_drop_rollout_computes_advantages_over_the_survivors():
    # rewards 1, 0, 1 and a failed rollout (its reward 0 must not pull the mean down)
    def pattern(row, i):
        return [(1.0, None), (0.0, None), (1.0, None), (0.0, tool_error())][i]

    o = orch(rollout_fn(pattern))
    b = await o.next_batch(timeout=10)
    await o.stop()
    assert len(b.samples) == 6  # 3 survivors x 2 groups
    assert all(BAD not in s.input_ids for s in b.samples)
    advs = sorted({round(s.advantages[0], 6) for s in b.samples})
    assert advs == [round(0 - 2 / 3, 6), round(1 - 2 / 3, 6)]  # group mean over survivors is 2/3
    assert b.metrics["rollouts/errors/tool"] == 2
    assert b.metrics["rollouts/errors"] == 2
    assert b.metrics["rollouts/dropped_frac"] == pytest.approx(2 / 8)
    assert b.metrics["reward/mean"] == pytest.approx(4 / 6)  # failed rollouts are not rewards


async def test_drop_group_drops_every_group_with_a_failure():
    # the 1st and 3rd groups started have one failed rollout; the others are clean
    order = []

    def pattern(row, i):
        if i == 0:
            order.append(row["id"])
        if i == 0 and len(order) in (1, 3):
            return 1.0, {"type": "TimeoutError", "message": "slow", "source": "timeout"}
        return float(i % 2), None

    o = orch(rollout_fn(pattern), on_rollout_error="drop_group", max_error_rate=1.0)
    b = await o.next_batch(timeout=10)
    await o.stop()
    assert [g.example_index for g in b.groups] == [order[1], order[3]]
    assert len(b.samples) == 8 and all(BAD not in s.input_ids for s in b.samples)
    # the batch was made of the 2nd and 4th groups, so exactly the 1st and 3rd were dropped before
    # it: one failed rollout each, and all 4 rollouts of each count as dropped (8 of 16 seen)
    assert b.metrics["rollouts/errors/timeout"] == 2
    assert b.metrics["rollouts/errors"] == 2
    assert o.counters["dropped_error_groups"] == 2
    assert b.metrics["rollouts/dropped_frac"] == pytest.approx(8 / 16)


async def test_group_left_with_fewer_than_two_is_dropped():
    order = []

    def pattern(row, i):  # the first group started keeps one rollout only
        if i == 0:
            order.append(row["id"])
        if row["id"] == order[0]:
            return (1.0, None) if i == 0 else (0.0, tool_error())
        return float(i % 2), None

    o = orch(rollout_fn(pattern), max_error_rate=1.0)
    b = await o.next_batch(timeout=10)
    await o.stop()
    assert order[0] not in [g.example_index for g in b.groups] and len(b.groups) == 2
    assert o.counters["dropped_error_groups"] == 1
    assert all(BAD not in s.input_ids for s in b.samples)


async def test_sustained_failures_stop_the_run_with_the_commonest_error():
    started = []

    def pattern(row, i):
        started.append(row["id"])
        if i == 3:
            return 0.0, {"type": "ModelError", "message": "bad request", "source": "model"}
        return 0.0, tool_error("lookup service returned 503")

    o = orch(rollout_fn(pattern), error_window=32, max_error_rate=0.5)
    with pytest.raises(RolloutsFailingError) as info:
        await o.next_batch(timeout=30)
    await o.stop()
    msg = str(info.value)
    assert "RuntimeError from tool:lookup" in msg and "lookup service returned 503" in msg
    assert "32 of the last 32 rollouts" in msg
    # within a bound: the window plus what was in flight, never an endless retry loop
    assert len(started) <= 32 + 4 * 4


async def test_failures_below_the_threshold_do_not_stop_the_run():
    def pattern(row, i):
        return (float(i % 2), tool_error()) if i == 0 else (float(i % 2), None)

    o = orch(rollout_fn(pattern), error_window=16, max_error_rate=0.5)
    for v in range(1, 4):
        b = await o.next_batch(timeout=10)
        assert b.metrics["rollouts/error_frac"] == pytest.approx(0.25)
        await o.update_weights(None, v)
    await o.stop()


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    if key == "bad":
        raise RuntimeError("lookup backend down")
    return "value-" + key


def answer_is(completion, answer, **kw) -> float:
    return 1.0 if str(completion[-1].get("content", "")).strip() == answer else 0.0


class Server:
    def __init__(self, srv):
        from verifiers.clients import ModelClient

        self.client = ModelClient(base_url=srv.base_url)
        self.model = srv.model
        self.healthy = True


async def test_tool_failing_for_half_the_rollouts_never_reaches_a_packed_batch():
    """A real ToolEnv whose tool raises for half the rollouts (a stop error: the rollout ends with
    state["error"] from tool:lookup): no token of a failed rollout is in any packed row, and the
    step's metrics count the failures."""
    env = vf.ToolEnv(dataset=Dataset.from_list([{"question": "find k", "answer": "value-k"}] * 8),
                     tools=[lookup], max_turns=4, rubric=vf.Rubric(funcs=[answer_is]),
                     stop_errors=[RuntimeError])
    calls = iter(["bad", "k", "bad", "k"] * 64)
    finals = iter(["value-k", "nope"] * 128)
    script = by_turn(lambda req: tool_calls(tool_call("lookup", {"key": next(calls)})),
                     lambda req: next(finals))
    with ScriptedServer(script) as srv:
        server = Server(srv)
        rows = [dict(r) for r in env.get_dataset().to_list()]
        o = Orchestrator([EnvEntry("tools", env, 1.0, rows)], [server],
                         OrchestratorConfig(batch_groups=2, group_size=4, max_in_flight=1, async_steps=0,
                                            max_seq_len=4096, drop_no_signal=False, max_error_rate=0.9),
                         {"max_tokens": 64, "logprobs": True, "extra_body": {"return_token_ids": True}},
                         health_check=False)
        try:
            batches = []
            for v in range(1, 3):
                batches.append(await o.next_batch(timeout=60))
                await o.update_weights(None, v)
        finally:
            await o.stop()
            await server.client.aclose()
    tok = srv.tokenizer
    total_errors = 0.0
    for b in batches:
        packed = pack(b.samples, 4096)
        for r in range(packed.num_rows):
            text = tok.decode(t for t in packed.input_ids[r].tolist() if t)
            assert "lookup backend down" not in text and '"bad"' not in text
        assert all("value-k" in tok.decode(s.input_ids) for s in b.samples)
        # one group in flight at a time and the tool calls alternate bad, k: each group of 4 has
        # exactly 2 failed rollouts, so each batch of 2 groups has 4 of 8
        assert b.metrics["rollouts/errors/tool"] == 4
        total_errors += b.metrics["rollouts/errors/tool"]
        assert b.metrics["rollouts/dropped_frac"] == pytest.approx(4 / 8)
        assert len(b.samples) == 4
    assert total_errors == 8


async def test_run_whose_rollouts_all_fail_stops_with_the_message(tiny_model_dir, tmp_path):
    """The whole loop: every rollout fails, the run raises the message and trains no step."""
    from types import SimpleNamespace

    import verifiers.train.loop as loop
    import verifiers.train.run_roles as run_roles
    from verifiers.train.config import TrainConfig

    rows = [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(50)]
    env = SimpleNamespace(dataset=rows, get_dataset=lambda: SimpleNamespace(to_list=lambda: rows))
    started = []

    async def failing(entry, row, n, client, model, sampling_args):
        started.append(row["id"])
        await asyncio.sleep(0)
        return [make_state(row, i, 0.0, {"type": "SandboxError", "message": "no sandbox", "source": "setup"})
                for i in range(n)]

    cfg = TrainConfig(**{
        "model": {"path": str(tiny_model_dir)}, "env": [{"id": "fake"}],
        "orchestrator": {"batch_groups": 2, "group_size": 4, "max_in_flight": 2, "max_seq_len": 16,
                         "error_window": 16},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4}, "sampling": {"max_tokens": 4},
        "run": {"steps": 3, "output": str(tmp_path / "run"), "checkpoint_every": 0},
    })
    orig = run_roles.load_env
    run_roles.load_env = lambda section: env
    try:
        with pytest.raises(RolloutsFailingError, match=r"SandboxError from setup.*no sandbox"):
            await loop.run_training(cfg, rollout_fn=failing, servers=[FakeServer()])
    finally:
        run_roles.load_env = orig
    assert len(started) <= (16 + 2 * 4) // 4 + 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] \
        if (tmp_path / "run" / "metrics.jsonl").exists() else []
    assert not [r for r in lines if r.get("stage") == "rl"]


def test_vf_train_stops_with_one_line_when_every_rollout_fails(tiny_model_dir, tmp_path):
    """`vf train` against a server whose every rollout fails in the rubric: exit 1 with one error line
    naming the error (no traceback), before any training step."""
    import subprocess
    import sys
    from pathlib import Path

    env_file = tmp_path / "broken_env.py"
    env_file.write_text(
        "import verifiers as vf\n"
        "from datasets import Dataset\n"
        "def broken(completion, answer, **kw):\n"
        "    raise RuntimeError('grader offline')\n"
        "def load_environment(**kw):\n"
        "    return vf.SingleTurnEnv(dataset=Dataset.from_list([{'question': str(i), 'answer': '1'} for i in range(50)]),\n"
        "                            rubric=vf.Rubric(funcs=[broken]))\n")
    cfg = tmp_path / "broken.toml"
    cfg.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[[env]]\nid = "{env_file}"\n'
        '[inference]\nweight_update = "none"\n[sampling]\nmax_tokens = 2\n'
        '[orchestrator]\nbatch_groups = 2\ngroup_size = 4\nmax_in_flight = 2\nmax_seq_len = 64\nerror_window = 16\n'
        '[trainer]\nseq_len = 64\n[run]\nsteps = 3\neval_groups = 0\n')
    vf = Path(sys.executable).with_name("vf")
    with ScriptedServer("1") as srv:
        proc = subprocess.run([str(vf), "train", str(cfg), "--output", str(tmp_path / "run"), "--url", srv.base_url,
                               "--set", f"inference.model={srv.model}"],
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "error: stopping: 16 of the last 16 rollouts ended in an error" in proc.stderr
    assert "grader offline" in proc.stderr and "Traceback" not in proc.stderr
