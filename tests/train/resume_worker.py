"""Run by test_resume.py in a subprocess: a short training run whose rollouts are deterministic
(no server; token data derived from the example and the policy version), so that an interrupted and
resumed run can be compared step for step with an uninterrupted one.

    python resume_worker.py MODEL_DIR OUT_DIR STEPS [--resume] [--stall-after VERSION]

``--stall-after V`` makes rollouts started under policy version >= V hang, so that the test can kill
the process while it waits for a batch (after the checkpoint of step V was written).
"""

import asyncio
import random
import sys
from types import SimpleNamespace

from verifiers.train.config import TrainConfig
from verifiers.train.loop import run_training


class FakeServer:
    def __init__(self):
        self.client, self.model, self.healthy = None, "m", True
        self.version = 0

    async def reload_weights(self, path, version=None):
        # The weights folder is <run>/weights/step_<version>: what a real server would now serve.
        self.version = int(str(path).rsplit("step_", 1)[1])
        return 0.0

    async def aclose(self):
        pass


def make_rollout_fn(server, stall_after):
    async def rollout(entry, row, n, client, model, sampling_args):
        if stall_after is not None and server.version >= stall_after:
            await asyncio.sleep(3600)
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
    model_dir, out_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resume = "--resume" in sys.argv
    stall = int(sys.argv[sys.argv.index("--stall-after") + 1]) if "--stall-after" in sys.argv else None
    rows = [{"id": i, "prompt": [{"role": "user", "content": str(i)}], "answer": "0"} for i in range(50)]
    env = SimpleNamespace(dataset=rows, get_dataset=lambda: SimpleNamespace(to_list=lambda: rows))
    import verifiers.train.run_roles as run_roles

    run_roles.load_env = lambda section: env
    cfg = TrainConfig(**{
        "model": {"path": model_dir}, "env": [{"id": "fake", "ratio": 1.0}],
        "inference": {"weight_update": "filesystem"}, "sampling": {"max_tokens": 3},
        "orchestrator": {"batch_groups": 3, "group_size": 4, "max_in_flight": 3, "async_steps": 0,
                         "max_off_policy": 0, "max_seq_len": 16, "drop_no_signal": True},
        "trainer": {"seq_len": 16, "micro_batch_rows": 4, "optim": {"lr": 5e-3, "schedule": "cosine",
                                                                   "warmup_steps": 1}},
        "run": {"steps": steps, "checkpoint_every": 2, "output": out_dir, "seed": 1},
    })
    server = FakeServer()
    asyncio.run(run_training(cfg, resume=resume, rollout_fn=make_rollout_fn(server, stall), servers=[server]))


if __name__ == "__main__":
    main()
