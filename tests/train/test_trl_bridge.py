"""TRL's GRPOTrainer trains with one of our environments through the rollout_func bridge (real vLLM)."""

import shutil
from pathlib import Path

import pytest

from verifiers.train.config import EnvSection, load_env
from verifiers.train.trl_bridge import env_reward, make_rollout_func, trl_dataset

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_grpo_trainer_runs_on_our_env(vllm_server, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    model = tmp_path / "model"
    shutil.copytree(vllm_server.model_dir, model)
    env = load_env(EnvSection(id=str(ROOT / "examples" / "envs" / "digit_copy.py"), args={"num_examples": 64}))
    calls = []
    inner = make_rollout_func(env, vllm_server.base_url, model=vllm_server.model, sampling_args={"max_tokens": 2})

    def rollout_func(prompts, trainer):
        out = inner(prompts, trainer)
        calls.append(out)
        return out

    args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=2, learning_rate=1e-3, max_steps=2, logging_steps=1,
                      save_strategy="no", report_to=[], use_cpu=True, bf16=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(model), reward_funcs=[env_reward], train_dataset=trl_dataset(env),
                          args=args, rollout_func=rollout_func)
    try:
        trainer.train()
    finally:
        vllm_server.reload_weights(vllm_server.model_dir)
    assert len(calls) >= 2
    out = calls[0]
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["logprobs"]) == 8
    for ids, lps, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"], strict=True):
        assert 1 <= len(ids) <= 2 and len(lps) == len(ids) and all(m == 1 for m in mask)
        assert all(lp <= 0 for lp in lps)
    assert all(r in (0.0, 1.0) for r in out["env_reward"])
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
