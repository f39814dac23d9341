"""CPU threads of the trainer: fixed, or elastic (every core unless a co-located server generates),
and the packing of a step (no rows added beyond what the ranks need)."""

import random
from types import SimpleNamespace

import pytest
import torch

from verifiers.train.config import TrainConfig
from verifiers.train.loop import Run
from verifiers.train.packing import first_fit_decreasing
from verifiers.train.samples import Sample
from verifiers.train.trainer import Trainer, TrainerConfig

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def samples(n, length=40, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(Sample([rng.randint(3, 90) for _ in range(length)], [0] * 10 + [1] * (length - 10),
                          [-1.0] * length, advantages=[rng.choice([-1.0, 1.0])] * length))
    return out


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_trainer_asks_for_its_threads_before_every_pass(tiny_model_dir, keep_threads):
    tr = Trainer(tiny_model_dir, TrainerConfig(seq_len=64, micro_batch_rows=2))
    asked = []

    def threads():
        n = 1 + len(asked) % 2  # 1, 2, 1, 2 ...
        asked.append(n)
        return n

    tr.threads_fn = threads
    tr.step(samples(6))  # one 40-token sample per 64-token row: 6 rows, 3 micro-batches
    # before each forward and each backward, and once more for clipping + the optimizer step
    assert len(asked) == 3 * 2 + 1
    assert torch.get_num_threads() == asked[-1]
    tr.cfg.cpu_threads = 1  # a fixed count wins over the run's choice
    calls = len(asked)
    tr.step(samples(6, seed=1))
    assert len(asked) == calls and torch.get_num_threads() == 1


def test_step_packs_only_the_rows_it_needs(tiny_model_dir, keep_threads):
    """Rows are not rounded up to whole micro-batches (that once doubled the work of a step)."""
    tr = Trainer(tiny_model_dir, TrainerConfig(seq_len=128, micro_batch_rows=32, cpu_threads=1))
    batch = samples(41, length=100)  # 41 rows of one sample each; 64 if rounded to micro-batches
    m = tr.step(batch)
    assert m["train/rows"] == len(first_fit_decreasing([len(s) for s in batch], 128)) == 41


def test_elastic_threads_follow_generation_on_this_machine(tmp_path, monkeypatch):
    cfg = TrainConfig(model={"path": str(tmp_path / "m")}, env=[{"id": str(ROOT / "examples" / "envs" /
                                                                          "digit_copy.py")}])
    run = Run(cfg, output=tmp_path / "out")
    role = run.role                             # rank 0 of a colocated run
    run.trainer = SimpleNamespace(cpu_share=lambda: 4)
    role.orch = SimpleNamespace(generating=True)
    role.servers = [SimpleNamespace(base_url="http://127.0.0.1:8000/v1")]
    assert run._trainer_threads() == 2          # a local server is generating: leave it half
    role.orch.generating = False
    assert run._trainer_threads() == 4          # nothing generating: every core
    role.orch.generating = True
    role.servers = [SimpleNamespace(base_url="http://10.1.2.3:8000/v1")]
    assert run._trainer_threads() == 4          # the servers are elsewhere
    role.launched_servers = True
    assert run._trainer_threads() == 2          # ... unless the run started its own here
    run.trainer = SimpleNamespace(cpu_share=lambda: 1)
    assert run._trainer_threads() == 1
    role.orch = None
    run.trainer = SimpleNamespace(cpu_share=lambda: 4)
    assert run._trainer_threads() == 4


def test_cpu_share(tiny_model_dir, monkeypatch):
    tr = Trainer(tiny_model_dir, TrainerConfig(seq_len=64, cpu_threads=1))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert tr.cpu_share() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")   # two torchrun processes on this machine
    assert tr.cpu_share() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "3")    # the user's setting wins
    assert tr.cpu_share() == 3
