"""The proof, CI-sized: `vf train examples/tiny.toml` against a real vLLM server (CPU build) with
in-place weight reloads every step; reward rises from the random level to a learned level, and the RL
stage shows its own gain after the SFT warm start. The classic environment's episodes (training
groups, held-out evals, sampled rollouts) are played by the env-server pool the run starts (the
default, ``server = "auto"``)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_vf_train_tiny_reward_rises(vllm_server, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(vllm_server.model_dir, model)  # the trainer starts from the weights the server holds
    out = tmp_path / "run"
    vf = Path(sys.executable).with_name("vf")
    try:
        proc = subprocess.run(
            [str(vf), "train", str(ROOT / "examples" / "tiny.toml"), "--output", str(out),
             "--url", vllm_server.base_url, "--set", f"inference.model={vllm_server.model}",
             "--set", f"model.path={model}", "--set", "run.target_reward=0.85", "--steps", "80"],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        vllm_server.reload_weights(vllm_server.model_dir)  # leave the shared server as we found it
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run folder: {out}" in proc.stderr
    assert "env server for digit_copy: tcp://127.0.0.1:" in proc.stderr  # the embedded pool played them
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    sft = [r for r in records if r["stage"] == "sft"]
    assert len(sft) == 20 and sft[-1]["sft/loss"] < sft[0]["sft/loss"]
    assert summary["reward_initial"] < 0.1                       # random level
    assert summary["reward_final"] > 0.8                         # learned
    assert summary["reward_final"] - summary["reward_after_sft"] > 0.4   # the RL stage's own gain
    for key in ("step", "reward/mean", "loss/policy", "policy_version", "off_policy/max", "tokens_per_s"):
        assert key in rl[0], key
    assert [r["policy_version"] for r in rl] == list(range(len(rl)))
    assert all(r["weights/update_s"] > 0 for r in rl)           # a real reload after every step
    assert max(r["off_policy/max"] for r in rl) >= 1            # generation overlapped training
    assert (out / "metrics.png").stat().st_size > 1000
    assert [r for r in records if r["stage"] == "eval" and r.get("label") == "heldout"]  # evals during training
    assert any((out / "rollouts").glob("step_*.jsonl"))                                 # sampled rollouts
