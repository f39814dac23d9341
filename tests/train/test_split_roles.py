"""The cluster path, CPU-sized: the trainer as `torchrun` with 2 processes (gloo, FSDP2), the
orchestrator as its own process (`vf train --role orchestrator`) starting 2 real vLLM CPU servers,
the two sharing only the run folder; filesystem weight path. The reward rises, and after every step
both servers report the new policy version (GET /weight_info). The orchestrator process plays the
classic environment's episodes (and its evals) on the env-server pool it starts (the default)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RL_STEPS = 12


def test_torchrun_trainer_and_orchestrator_process_with_two_servers(tiny_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    out = tmp_path / "run"
    sets = ["--set", f"model.path={model}", "--set", "inference.num_servers=2", "--steps", str(RL_STEPS),
            "--set", "run.checkpoint_every=0", "--set", "run.eval_groups=8", "--set", "run.peer_timeout_s=600"]
    cfg = str(ROOT / "examples" / "tiny.toml")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    bindir = Path(sys.executable).parent
    orch_log, trainer_log = (tmp_path / "orchestrator.log").open("w"), (tmp_path / "trainer.log").open("w")
    orch = subprocess.Popen([str(bindir / "vf"), "train", cfg, "--role", "orchestrator", "--output", str(out), *sets],
                            cwd=ROOT, env=env, stdout=orch_log, stderr=subprocess.STDOUT)
    trainer = subprocess.Popen([str(bindir / "torchrun"), "--standalone", "--nproc_per_node=2", "-m",
                                "verifiers.train.cli", cfg, "--role", "trainer", "--output", str(out), *sets],
                               cwd=ROOT, env=env, stdout=trainer_log, stderr=subprocess.STDOUT)
    try:
        rc_t = trainer.wait(timeout=900)
        rc_o = orch.wait(timeout=120)
    finally:
        for p in (trainer, orch):
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = f"trainer:\n{(tmp_path / 'trainer.log').read_text()[-3000:]}\norchestrator:\n" \
           f"{(tmp_path / 'orchestrator.log').read_text()[-3000:]}"
    assert rc_t == 0 and rc_o == 0, logs
    assert "env server for digit_copy: tcp://127.0.0.1:" in (tmp_path / "orchestrator.log").read_text(), logs
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    evals = {r["label"]: r["reward/mean"] for r in records if r["stage"] == "eval"}
    assert [r["step"] for r in rl] == list(range(1, RL_STEPS + 1)), logs
    assert set(evals) == {"initial", "after_sft"}
    first = sum(r["reward/mean"] for r in rl[:3]) / 3
    last = sum(r["reward/mean"] for r in rl[-3:]) / 3
    assert last > first + 0.1, [round(r["reward/mean"], 3) for r in rl]
    assert all(r["weights/update_s"] >= 0 for r in rl)
    # Every policy version (0 = after SFT, then one per RL step) reached both servers, which report it.
    applied = [json.loads(line) for line in (out / "orchestrator.jsonl").read_text().splitlines()]
    assert [a["version"] for a in applied] == list(range(RL_STEPS + 1))
    for a in applied:
        assert a["served"] == [str(a["version"])] * 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == RL_STEPS
    assert (out / "checkpoints" / f"step_{RL_STEPS}" / "trainer.pt").exists()
    hb = {r: json.loads((out / "exchange" / f"{r}.json").read_text())["status"] for r in ("trainer", "orchestrator")}
    assert hb == {"trainer": "done", "orchestrator": "done"}
