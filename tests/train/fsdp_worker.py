"""Run by test_trainer.py under torchrun (2 ranks, gloo) and as a single process: one RL step on fixed
samples, then rank 0 saves the full weights and the step's metrics.

Adam's eps is large here on purpose: with eps=1e-8 the first Adam step is ~lr*sign(g), which turns
float-summation-order noise in near-zero gradients into lr-sized weight differences."""

import json
import random
import sys

import torch

from verifiers.train.fsdp import destroy, init_distributed
from verifiers.train.samples import Sample
from verifiers.train.trainer import OptimConfig, Trainer, TrainerConfig


def fixed_samples(n=12, seed=0, vocab=300):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.randint(3, 12)
        c = rng.randint(1, 8)
        ids = [rng.randint(6, vocab - 1) for _ in range(p + c)]
        lps = [0.0] * p + [-rng.uniform(3.0, 8.0) for _ in range(c)]
        out.append(Sample(ids, [0] * p + [1] * c, lps, advantages=[(-1) ** i * 0.5] * (p + c)))
    return out


def main(model_dir: str, out_path: str) -> None:
    info = init_distributed()
    torch.manual_seed(0)
    cfg = TrainerConfig(seq_len=32, micro_batch_rows=2, optim=OptimConfig(lr=1e-2, max_grad_norm=1.0, eps=1e-3))
    tr = Trainer(model_dir, cfg, dist_info=info)
    metrics = tr.step(fixed_samples())
    sd = tr.full_state_dict()
    if info.is_main:
        torch.save({"weights": sd, "metrics": metrics}, out_path)
        print(json.dumps(metrics))
    destroy(info)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
