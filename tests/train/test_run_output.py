"""What `vf train --output DIR` leaves: the trained model itself (`DIR/model`, loadable as it is),
and a last line whose RL time is the RL stage's, not the whole run's."""

import asyncio
import io
import json
from types import SimpleNamespace

import torch
from rich.console import Console

from verifiers.train.config import TrainConfig


class FakeServer:
    def __init__(self):
        self.client, self.model, self.healthy = None, "m", True

    async def reload_weights(self, path, version=None):
        return 0.0

    async def aclose(self):
        pass


def test_the_output_folder_holds_the_trained_model_and_the_rl_time(tiny_model_dir, tmp_path, monkeypatch):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import verifiers.train.loop as loop

    rows = [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(40)]
    monkeypatch.setattr("verifiers.train.run_roles.load_env", lambda section: SimpleNamespace(
        dataset=rows, get_dataset=lambda: SimpleNamespace(to_list=lambda: rows), eval_dataset=None))

    async def rollout(entry, row, n, client, model, sampling_args):
        await asyncio.sleep(0)
        return [{"reward": float(i % 2), "error": None, "example_id": row["id"], "prompt": row["prompt"],
                 "completion": [{"role": "assistant", "content": str(i)}],
                 "trajectory": [{"tokens": {"prompt_ids": [4, 10 + row["id"] % 50, 5], "completion_ids": [6 + i, 7],
                                            "completion_logprobs": [-2.0, -2.5]}}]} for i in range(n)]

    out = tmp_path / "run"
    cfg = TrainConfig(**{
        "model": {"path": str(tiny_model_dir)}, "env": [{"id": "fake"}],
        "orchestrator": {"batch_groups": 2, "group_size": 4, "max_in_flight": 2, "async_steps": 0, "max_seq_len": 16},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4, "optim": {"lr": 1e-2}}, "sampling": {"max_tokens": 4},
        "loss": {"ratio_low": 1e-6, "ratio_high": 1e6},  # the made-up logprobs must not mask every token
        "run": {"steps": 3, "output": str(out), "checkpoint_every": 0},
    })
    buf = io.StringIO()
    summary = asyncio.run(loop.run_training(cfg, rollout_fn=rollout, servers=[FakeServer()],
                                            console=Console(file=buf, width=300)))

    model = out / "model"
    assert summary["model"] == str(model.resolve())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in model.iterdir()}
    assert not (out / ".model.tmp").exists()
    # the trained weights (the last checkpoint's), not the starting ones
    trained = torch.load(out / "checkpoints" / "step_3" / "trainer.pt", weights_only=False)["model"]
    saved = load_file(str(model / "model.safetensors"))
    start = load_file(str(tiny_model_dir / "model.safetensors"))
    assert saved.keys() <= trained.keys()
    assert all(torch.equal(saved[k], trained[k]) for k in saved)
    assert any(not torch.equal(saved[k], start[k]) for k in saved if k in start)
    loaded = AutoModelForCausalLM.from_pretrained(str(model))
    assert AutoTokenizer.from_pretrained(str(model)).decode([10]) == AutoTokenizer.from_pretrained(
        str(tiny_model_dir)).decode([10])
    assert sum(p.numel() for p in loaded.parameters()) > 0

    rl = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"stage": "rl"' in x]
    assert summary["rl_s"] == rl[-1]["time/elapsed_s"]
    log = buf.getvalue()
    assert f"(3 RL steps in {summary['rl_s']:.0f} s; the whole run took {summary['wall_s']:.0f} s)" in log
    assert f"trained model: {model.resolve()}" in log
