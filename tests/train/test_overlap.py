"""Asynchrony of the whole loop, proved with events and counters (never elapsed time): with
async_steps=1, rollout groups of the next batch finish while the trainer is inside its step."""

import asyncio
import json
import threading
from types import SimpleNamespace

from verifiers.train.config import TrainConfig
from verifiers.train.trainer import Trainer


class FakeServer:
    def __init__(self):
        self.client, self.model, self.healthy = None, "m", True

    async def reload_weights(self, path, version=None):
        return 0.0

    async def aclose(self):
        pass


def test_next_batch_is_generated_during_the_training_step(tiny_model_dir, tmp_path, monkeypatch):
    import verifiers.train.loop as loop

    rows = [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(50)]
    env = SimpleNamespace(dataset=rows, get_dataset=lambda: SimpleNamespace(to_list=lambda: rows))
    monkeypatch.setattr("verifiers.train.run_roles.load_env", lambda section: env)
    batch_groups, steps = 2, 4
    state = {"in_step": False, "groups": 0, "finished_in_step": 0, "steps_waited_out": 0}
    step_began: dict[str, asyncio.Event] = {}
    finished_in_step = threading.Event()
    ev_loop: dict[str, asyncio.AbstractEventLoop] = {}

    async def rollout(entry, row, n, client, model, sampling_args):
        ev_loop["loop"] = asyncio.get_running_loop()
        ev = step_began.setdefault("ev", asyncio.Event())
        state["groups"] += 1
        if state["groups"] > batch_groups:  # not the first batch: finish only once a step has begun
            await ev.wait()
            if state["in_step"]:
                state["finished_in_step"] += 1
                finished_in_step.set()
        return [{"reward": float(i % 2), "example_id": row["id"], "trajectory": [
            {"tokens": {"prompt_ids": [4, 10 + row["id"] % 40, 5], "completion_ids": [6 + i, 7],
                        "completion_logprobs": [-2.0, -2.5]}}]} for i in range(n)]

    real_step = Trainer.step

    def step(self, samples):  # runs on the trainer's thread
        finished_in_step.clear()
        state["in_step"] = True
        ev_loop["loop"].call_soon_threadsafe(step_began["ev"].set)
        # A synchronous loop would never get here with a group of the next batch finished: bounded
        # wait, counted, so a regression fails the assertions below instead of hanging.
        if not finished_in_step.wait(timeout=60):
            state["steps_waited_out"] += 1
        state["in_step"] = False
        ev_loop["loop"].call_soon_threadsafe(step_began["ev"].clear)
        return real_step(self, samples)

    monkeypatch.setattr(Trainer, "step", step)
    out = tmp_path / "run"
    cfg = TrainConfig(**{
        "model": {"path": str(tiny_model_dir)}, "env": [{"id": "fake"}],
        "orchestrator": {"batch_groups": batch_groups, "group_size": 4, "max_in_flight": batch_groups,
                         "async_steps": 1, "max_off_policy": 2, "max_seq_len": 16},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4}, "sampling": {"max_tokens": 4},
        "run": {"steps": steps, "output": str(out), "checkpoint_every": 0},
    })
    asyncio.run(loop.run_training(cfg, rollout_fn=rollout, servers=[FakeServer()]))
    assert state["steps_waited_out"] == 0
    assert state["finished_in_step"] >= steps  # every step overlapped generation of the next batch
    rl = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]
    assert max(r["off_policy/max"] for r in rl) >= 1  # and those batches came from the older policy
