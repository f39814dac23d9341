"""Kill a run after a checkpoint, resume it, and get exactly the steps an uninterrupted run makes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("resume_worker.py")


def _env():
    return {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}


def _run(*args, timeout=300):
    subprocess.run([sys.executable, str(WORKER), *map(str, args)], check=True, env=_env(), timeout=timeout,
                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _rl(path):
    return {r["step"]: r for r in map(json.loads, (path / "metrics.jsonl").read_text().splitlines())
            if r.get("stage") == "rl"}


def test_resume_after_kill_gives_the_same_next_steps(tiny_model_dir, tmp_path):
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    _run(tiny_model_dir, ref, 4)

    proc = subprocess.Popen([sys.executable, str(WORKER), str(tiny_model_dir), str(cut), "4", "--stall-after", "2"],
                            env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (cut / "checkpoints" / "step_2" / "meta.json").exists():
            assert proc.poll() is None, "the run ended before its checkpoint"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)  # no chance to clean up: a crash
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert set(_rl(cut)) == {1, 2}

    _run(tiny_model_dir, cut, 4, "--resume")
    a, b = _rl(ref), _rl(cut)
    assert set(b) == {1, 2, 3, 4}
    for step in (3, 4):
        for key in ("loss/policy", "optim/grad_norm", "optim/lr", "reward/mean", "train/loss_tokens",
                    "loss/mismatch_kl"):
            assert abs(a[step][key] - b[step][key]) <= 1e-6 * max(1.0, abs(a[step][key])), (step, key)
    wa = load_file(str(ref / "weights" / "step_4" / "model.safetensors"))
    wb = load_file(str(cut / "weights" / "step_4" / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
