"""Run by test_split_resume.py: one role of a split run whose servers and rollouts are fakes (token
data derived from the example and the policy version the fake server holds), so that an interrupted
and resumed split run can be compared step for step with an uninterrupted one.

    python split_worker.py ROLE MODEL_DIR OUT_DIR STEPS [--resume] [--fail-at-version V]
"""

import asyncio
import random
import sys
from types import SimpleNamespace

from verifiers.train.config import TrainConfig


class FakeServer:
    def __init__(self, fail_at=None):
        self.client, self.model, self.healthy = None, "m", True
        self.base_url, self.root_url = "http://fake/v1", "http://fake"
        self.version = "default"
        self.fail_at = fail_at

    async def reload_weights(self, path, version=None):
        if self.fail_at is not None and version == self.fail_at:
            raise RuntimeError(f"fake server cannot load version {version}")
        self.version = str(version)
        return 0.0

    async def weight_version(self):
        return self.version

    async def call(self, name, json=None):
        if name == "set_version":
            self.version = json["new_version"]

    async def check_health(self):
        return True

    async def aclose(self):
        pass


def make_rollout_fn(server):
    async def rollout(entry, row, n, client, model, sampling_args):
        rng = random.Random(f"{row['id']}:{server.version}")
        states = []
        for _ in range(n):
            comp = [rng.randint(6, 90) for _ in range(3)]
            states.append({"reward": float(comp[0] % 2), "example_id": row["id"], "trajectory": [
                {"tokens": {"prompt_ids": [4, 10 + row["id"] % 50, 5], "completion_ids": comp,
                            "completion_logprobs": [-4.0, -4.5, -5.0]}}]})
        return states
    return rollout


def main() -> None:
    role, model_dir, out_dir, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    resume = "--resume" in sys.argv
    fail_at = int(sys.argv[sys.argv.index("--fail-at-version") + 1]) if "--fail-at-version" in sys.argv else None
    rows = [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(50)]
    env = SimpleNamespace(dataset=rows, get_dataset=lambda: SimpleNamespace(to_list=lambda: rows))
    import verifiers.train.loop as loop
    import verifiers.train.roles as roles
    import verifiers.train.run_roles as run_roles

    run_roles.load_env = roles.load_env = lambda section: env
    cfg = TrainConfig(**{
        "model": {"path": model_dir}, "env": [{"id": "fake", "ratio": 1.0}],
        "inference": {"weight_update": "filesystem"}, "sampling": {"max_tokens": 3},
        "orchestrator": {"batch_groups": 3, "group_size": 4, "max_in_flight": 3, "async_steps": 0,
                         "max_off_policy": 0, "max_seq_len": 16, "drop_no_signal": True},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4, "optim": {"lr": 5e-3}},
        "run": {"steps": steps, "checkpoint_every": 2, "output": out_dir, "seed": 1, "peer_timeout_s": 120},
    })
    if role == "orchestrator":
        server = FakeServer(fail_at)
        asyncio.run(roles.run_orchestrator(cfg, resume=resume, rollout_fn=make_rollout_fn(server), servers=[server]))
    else:
        asyncio.run(loop.run_training(cfg, resume=resume, role="trainer"))


if __name__ == "__main__":
    main()
