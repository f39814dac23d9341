"""Trainer: FSDP2 under torchrun equals a single process; checkpoint resume after a kill."""

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("fsdp_worker.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_fsdp2_two_process_step_equals_single_process(tiny_model_dir, tmp_path):
    single = tmp_path / "single.pt"
    dist = tmp_path / "dist.pt"
    subprocess.run([sys.executable, str(WORKER), str(tiny_model_dir), str(single)], check=True, env=_env(),
                   timeout=300, cwd=ROOT)
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(WORKER), str(tiny_model_dir),
                    str(dist)], check=True, env=_env(), timeout=300, cwd=ROOT)
    a, b = torch.load(single), torch.load(dist)
    assert a["weights"].keys() == b["weights"].keys()
    initial = {k: v for k, v in __import__("safetensors.torch", fromlist=["load_file"]).load_file(
        str(tiny_model_dir / "model.safetensors")).items()}
    moved = 0.0
    for k in a["weights"]:
        assert torch.allclose(a["weights"][k], b["weights"][k], atol=1e-6, rtol=1e-5), k
        if k in initial:
            moved = max(moved, float((a["weights"][k] - initial[k]).abs().max()))
    assert moved > 1e-4  # the step really changed the weights
    for key in ("loss/policy", "optim/grad_norm", "train/loss_tokens", "loss/mismatch_kl"):
        assert abs(a["metrics"][key] - b["metrics"][key]) < 1e-5 * max(1.0, abs(a["metrics"][key])), key


def test_training_loop_under_torchrun_matches_single_process(tiny_model_dir, tmp_path):
    """The whole loop (rank 0 orchestrates and broadcasts batches; both ranks train with FSDP2;
    collective weight saves and checkpoints) gives the single-process run's metrics."""
    import json

    worker = Path(__file__).with_name("resume_worker.py")
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run([sys.executable, str(worker), str(tiny_model_dir), str(tmp_path / "one"), "3"], check=True,
                   env=_env(), timeout=300, cwd=ROOT, capture_output=True)
    subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", str(worker), str(tiny_model_dir),
                    str(tmp_path / "two"), "3"], check=True, env=_env(), timeout=300, cwd=ROOT, capture_output=True)

    def rl(d):
        return [r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]

    one, two = rl(tmp_path / "one"), rl(tmp_path / "two")
    assert len(one) == len(two) == 3
    assert any(r["optim/grad_norm"] > 0 for r in one)
    for a, b in zip(one, two, strict=True):
        for key in ("loss/policy", "optim/grad_norm", "reward/mean", "train/loss_tokens"):
            assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), (a["step"], key)
    assert (tmp_path / "two" / "checkpoints" / "step_3" / "trainer.pt").exists()
