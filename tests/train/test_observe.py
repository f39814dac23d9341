"""Observability: held-out evaluations on each environment's eval split (never its training rows),
sampled rollouts saved per step, TensorBoard and W&B (offline) through their own libraries."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from verifiers.train.config import TrainConfig
from verifiers.train.metrics import Trackers


class FakeServer:
    def __init__(self):
        self.client, self.model, self.healthy = None, "m", True

    async def reload_weights(self, path, version=None):
        return 0.0

    async def aclose(self):
        pass


def rows(lo, hi):
    return [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(lo, hi)]


def fake_env(train, held):
    ds = SimpleNamespace(to_list=lambda: train)
    return SimpleNamespace(dataset=train, get_dataset=lambda: ds,
                           eval_dataset=SimpleNamespace(to_list=lambda: held) if held is not None else None)


def test_heldout_eval_rollout_samples_tensorboard_and_wandb(tiny_model_dir, tmp_path, monkeypatch):
    import verifiers.train.loop as loop

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    asked = []

    async def rollout(entry, row, n, client, model, sampling_args):
        asked.append(row["id"])
        await asyncio.sleep(0)
        out = []
        for i in range(n):
            err = {"type": "RuntimeError", "message": "tool down", "source": "tool:x"} if i == n - 1 else None
            out.append({"reward": float(i % 2), "error": err, "example_id": row["id"],
                        "prompt": row["prompt"], "completion": [{"role": "assistant", "content": str(i)}],
                        "trajectory": [{"tokens": {"prompt_ids": [4, 10 + row["id"] % 50, 5],
                                                   "completion_ids": [6 + i, 7],
                                                   "completion_logprobs": [-2.0, -2.5]}}]})
        return out

    envs = {"fake-a": fake_env(rows(0, 40), rows(1000, 1010)), "fake-b": fake_env(rows(2000, 2040), None)}
    monkeypatch.setattr("verifiers.train.run_roles.load_env", lambda section: envs[section.id])
    out = tmp_path / "run"
    cfg = TrainConfig(**{
        "model": {"path": str(tiny_model_dir)}, "env": [{"id": "fake-a"}, {"id": "fake-b"}],
        "orchestrator": {"batch_groups": 2, "group_size": 4, "max_in_flight": 2, "async_steps": 0,
                         "max_seq_len": 16, "max_error_rate": 0.9},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4}, "sampling": {"max_tokens": 4},
        "run": {"steps": 4, "output": str(out), "eval_every": 2, "eval_groups": 3, "checkpoint_every": 0},
        "logging": {"sample_rollouts": 3, "tensorboard": True, "wandb": True},
    })
    asyncio.run(loop.run_training(cfg, rollout_fn=rollout, servers=[FakeServer()]))

    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    held = [r for r in lines if r.get("stage") == "eval" and r.get("label") == "heldout"]
    assert [r["step"] for r in held] == [2, 4]
    # only fake-a has an eval split; its first 3 eval rows, never a training row
    assert all("eval/fake-a/reward" in r and "eval/fake-b/reward" not in r for r in held)
    assert held[0]["eval/fake-a/reward"] == pytest.approx(1 / 3)  # rewards 0, 1, 0 (+ one failure)
    assert held[0]["eval/fake-a/errors"] == 3
    eval_ids = {i for i in asked if 1000 <= i < 1010}
    assert eval_ids == {1000, 1001, 1002}
    rl = [r for r in lines if r.get("stage") == "rl"]
    assert len(rl) == 4 and all(r["rollouts/errors/tool"] == 2 for r in rl)

    for step in range(1, 5):
        saved = [json.loads(x) for x in (out / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        assert 1 <= len(saved) <= 3
        assert any(s["error"] and s["error"]["message"] == "tool down" for s in saved)
        assert all({"prompt", "completion", "reward", "error", "env", "example"} <= set(s) for s in saved)
        assert all(s["example"] < 1000 for s in saved)  # training rollouts, not the evaluation's

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "loss/policy" in tags and "eval/fake-a/reward" in tags and "rollouts/errors/tool" in tags
    assert [e.step for e in acc.Scalars("loss/policy")] == [1, 2, 3, 4]
    assert [e.step for e in acc.Scalars("eval/fake-a/reward")] == [2, 4]

    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
    assert (out / "metrics.png").stat().st_size > 1000


def test_a_missing_backend_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *a, **kw):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(RuntimeError, match=r"verifiers\[train-logging\]"):
        Trackers(tmp_path, wandb=True)


def test_tracker_names_per_stage():
    assert Trackers.scalars({"stage": "sft", "step": 3, "sft/loss": 1.5}) == ("sft_step", 3, {"sft/loss": 1.5})
    axis, step, nums = Trackers.scalars({"stage": "eval", "label": "heldout", "step": 4, "reward/mean": 0.5,
                                         "eval/a/reward": 0.25, "note": "x"})
    assert (axis, step) == ("eval_step", 4) and nums == {"eval/heldout/reward/mean": 0.5, "eval/a/reward": 0.25}
    assert Trackers.scalars({"stage": "rl", "step": 2, "loss/policy": -0.1, "bad": float("nan")})[2] == \
        {"loss/policy": -0.1}
