"""Training benchmarks, ours vs the peer in the same run (see the README's training section).

(1) The asynchronous loop (``async_steps=1``: batch n+1 is generated while the trainer trains on
    batch n, weights reloaded in place) against the same loop run synchronously (``async_steps=0``:
    generate, then train, then update): RL tokens per second and time to the target reward.
(2) Time to the target reward against TRL's ``GRPOTrainer`` (CPU, no vLLM: it generates with
    transformers) on the same model, environment and hyper-parameters:
      - trivial workload: digit copy (2-token completions) with the 0.37 M-parameter tiny model,
        all runs starting from the same SFT warm-start checkpoint;
      - generation-dominated workload: 64-token completions from a ~4 M-parameter model
        (reward: fraction of the completion that repeats the prompt's digit), a fixed step budget.

Every run uses 16 prompts x 8 rollouts per step, lr 1e-3, temperature 1, no KL, advantages
``reward - group mean``. Ours talks to one real vLLM (CPU build) server started here.

    python benchmarks/train.py [--quick] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET = 0.8
GROUPS, GROUP_SIZE, LR = 16, 8, 1e-3


# ---------------------------------------------------------------------------------------- envs
def digit_copy_env():
    from verifiers.train.config import EnvSection, load_env

    return load_env(EnvSection(id=str(REPO / "examples" / "envs" / "digit_copy.py")))


def repeat_fraction(text: str, answer: str) -> float:
    text = text or ""
    return sum(c == answer for c in text) / max(64, len(text))


def digit_repeat_env():
    """Generation-heavy: write the prompt's digit over and over (64 tokens); reward = fraction right."""
    import random

    from datasets import Dataset

    import verifiers as vf

    rng = random.Random(1)
    rows = [{"question": d, "answer": d} for d in (str(rng.randint(0, 9)) for _ in range(500))]

    def repeat_reward(completion, answer, **kw) -> float:
        return repeat_fraction(completion[-1]["content"] if completion else "", answer)

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[repeat_reward]))


def copy_text_reward(text: str, answer: str) -> float:
    return 1.0 if (text or "").strip() == answer else 0.0


# ------------------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(f"[bench-train] {msg}", file=sys.stderr, flush=True)


def sft_checkpoint(model_dir: Path, out: Path, steps: int = 20) -> Path:
    """The shared starting point of the trivial workload: our SFT warm start, saved with tokenizer."""
    import torch
    from transformers import AutoTokenizer

    from verifiers.train.loop import demonstration_samples, env_rows
    from verifiers.train.trainer import OptimConfig, Trainer, TrainerConfig

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    rows = env_rows(digit_copy_env())
    tr = Trainer(model_dir, TrainerConfig(seq_len=64, micro_batch_rows=64, optim=OptimConfig(lr=3e-3)))
    for s in range(steps):
        tr.sft_step(demonstration_samples(rows, tok, 64, s * 64))
    tr.save_weights(out)
    for f in model_dir.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, out / f.name)
    return out


def ours(label: str, start: Path, server: Any, env_id: str, *, async_steps: int, max_tokens: int,
         steps: int, target: float | None, out: Path, env_args: dict | None = None,
         seq_len: int = 128, dtype: str = "float32") -> dict[str, Any]:
    """One RL run of our loop against the given vLLM server (reloaded to ``start`` first)."""
    from verifiers.train.config import TrainConfig
    from verifiers.train.inference import InferenceServer
    from verifiers.train.loop import run_training

    server.reload_weights(start)
    cfg = TrainConfig(**{
        "model": {"path": str(start)},
        "env": [{"id": env_id, "ratio": 1.0, "args": env_args or {}}],
        "sampling": {"max_tokens": max_tokens, "temperature": 1.0},
        "orchestrator": {"batch_groups": GROUPS, "group_size": GROUP_SIZE, "max_in_flight": 2 * GROUPS,
                         "async_steps": async_steps, "max_off_policy": max(async_steps, 0) + 1,
                         "drop_no_signal": False, "max_seq_len": 128},
        "trainer": {"seq_len": seq_len, "micro_batch_rows": 32, "dtype": dtype, "optim": {"lr": LR}},
        "run": {"steps": steps, "output": str(out), "target_reward": target, "checkpoint_every": 0},
    })
    t0 = time.perf_counter()
    asyncio.run(run_training(cfg, servers=[InferenceServer(server.base_url, server.model)]))
    wall = time.perf_counter() - t0
    rl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r.get("stage") == "rl"]
    return summarise(label, [(r["step"], r["time/elapsed_s"], r["reward/mean"], r["tokens/sampled"]) for r in rl],
                     target, wall)


def summarise(label: str, steps: list[tuple[int, float, float, float]], target: float | None,
              wall: float) -> dict[str, Any]:
    """steps: (step, seconds since the RL stage began, mean reward, sampled tokens)."""
    reached = None
    for i in range(len(steps)):
        window = [s[2] for s in steps[max(0, i - 4): i + 1]]
        if target is not None and len(window) == 5 and sum(window) / 5 >= target:
            reached = steps[i]
            break
    total_t = steps[-1][1] if steps else 0.0
    tokens = sum(s[3] for s in steps)
    return {"run": label, "steps": len(steps), "rl_s": round(total_t, 2),
            "tokens_per_s": round(tokens / max(total_t, 1e-9), 1),
            "s_per_step": round(total_t / max(1, len(steps)), 3),
            "time_to_target_s": round(reached[1], 2) if reached else None,
            "steps_to_target": reached[0] if reached else None,
            "final_reward": round(sum(s[2] for s in steps[-5:]) / max(1, len(steps[-5:])), 3),
            "wall_s": round(wall, 1)}


def trl_run(label: str, start: Path, rows: list[dict], reward_text, *, max_tokens: int, steps: int,
            target: float | None, out: Path, bf16: bool = False) -> dict[str, Any]:
    """TRL GRPOTrainer on CPU (transformers generation), same hyper-parameters."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    def reward(completions, answer, **kw):
        return [reward_text(c[-1]["content"] if isinstance(c, list) else c, a) for c, a in zip(completions, answer, strict=True)]

    reward.__name__ = "env_reward"
    torch.set_num_threads(os.cpu_count() or 1)  # TRL has the machine to itself: no vLLM beside it
    ds = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    trace: list[tuple[int, float, float, float]] = []
    t_start = [0.0]

    class Track(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            t_start[0] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                tokens = logs.get("completions/mean_length", max_tokens) * GROUPS * GROUP_SIZE
                trace.append((state.global_step, time.perf_counter() - t_start[0], float(logs["reward"]), tokens))
                window = [t[2] for t in trace[-5:]]
                if target is not None and len(window) == 5 and sum(window) / 5 >= target:
                    control.should_training_stop = True

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=GROUPS * GROUP_SIZE, num_generations=GROUP_SIZE,
        gradient_accumulation_steps=1, max_completion_length=max_tokens, learning_rate=LR, beta=0.0,
        temperature=1.0, scale_rewards="none", lr_scheduler_type="constant", warmup_steps=0,
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=bf16,
        seed=0, disable_tqdm=True, max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.99,
        gradient_checkpointing=False,  # TRL turns it on by default; it only costs time on a tiny model
    )
    trainer = GRPOTrainer(model=str(start), reward_funcs=[reward], train_dataset=ds, args=args,
                          callbacks=[Track()])
    t0 = time.perf_counter()
    trainer.train()
    return summarise(label, trace, target, time.perf_counter() - t0)


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["run", "steps", "rl_s", "s_per_step", "tokens_per_s", "steps_to_target", "time_to_target_s",
            "final_reward"]
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    for r in rows:
        lines.append(" | ".join("-" if r.get(c) is None else str(r.get(c)) for c in cols))
    return "\n".join(lines)


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a (target not reached)"


# ----------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller step budgets (smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--skip-generation", action="store_true", help="only the trivial workload")
    ap.add_argument("--skip-trivial", action="store_true", help="only the generation-dominated workload")
    a = ap.parse_args()
    max_steps = 40 if a.quick else 100
    gen_steps = 3 if a.quick else 8
    work = Path(tempfile.mkdtemp(prefix="vf-bench-train-"))
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} CPUs", "target_reward": TARGET}
    try:
        # ---- trivial workload ------------------------------------------------------------------
        if not a.skip_trivial:
            trivial_workload(work, max_steps, results)
        # ---- generation-dominated workload -----------------------------------------------------
        if not a.skip_generation:
            generation_workload(work, gen_steps, results)
        if a.json:
            a.json.write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def policy_server(model: Path, extra_args: list[str] | None = None) -> Any:
    """The vLLM server our runs talk to, started with the same arguments ``vf train`` would use."""
    from verifiers.serving.vllm import VLLMServer
    from verifiers.train.inference import single_process_args

    srv = VLLMServer(model, dev_mode=True, max_model_len=256, served_model_name="policy",
                     extra_args=extra_args or [])
    srv.extra_args = single_process_args(srv.extra_args, srv.variant)
    return srv


def trivial_workload(work: Path, max_steps: int, results: dict[str, Any]) -> None:
    """Digit copy from one SFT checkpoint: time to the target reward, ours (async, sync) vs TRL."""
    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model
    from verifiers.train.loop import env_rows

    tiny = write_tiny_model(work / "tiny", TinyModelSpec(seed=0))
    start = sft_checkpoint(tiny, work / "tiny-sft")
    rows = [dict(r) for r in env_rows(digit_copy_env())]
    env_path = str(REPO / "examples" / "envs" / "digit_copy.py")
    log("starting vLLM for the tiny model")
    with policy_server(start) as srv:
        trivial = [
            ours("ours async (async_steps=1)", start, srv, env_path, async_steps=1, max_tokens=2,
                 steps=max_steps, target=TARGET, out=work / "a1"),
            ours("ours sync (async_steps=0)", start, srv, env_path, async_steps=0, max_tokens=2,
                 steps=max_steps, target=TARGET, out=work / "a0"),
        ]
    log("TRL GRPOTrainer (CPU, transformers generation) on the trivial workload")
    trivial.append(trl_run("TRL GRPOTrainer", start, rows, copy_text_reward, max_tokens=2, steps=max_steps,
                           target=TARGET, out=work / "trl1"))
    results["trivial"] = trivial
    print("\n## Trivial workload: digit copy, 2-token completions, 0.37 M params, from one SFT checkpoint\n")
    print(table(trivial))
    a1, a0, t1 = trivial
    print(f"\nasync vs sync: tokens/s {ratio(a1['tokens_per_s'], a0['tokens_per_s'])}, "
          f"time to target {ratio(a0['time_to_target_s'], a1['time_to_target_s'])} faster")
    print(f"ours (async) vs TRL: time to target {ratio(a1['time_to_target_s'], t1['time_to_target_s'])} of TRL's")


def generation_workload(work: Path, gen_steps: int, results: dict[str, Any]) -> None:
    """64-token completions from a ~4 M-parameter model: time per step, ours (async, sync) vs TRL."""
    from transformers import AutoModelForCausalLM

    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model
    from verifiers.train.loop import env_rows

    big = write_tiny_model(work / "small", TinyModelSpec(hidden=256, layers=4, heads=4, intermediate=1024, seed=0))
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(str(big)).parameters())
    env_file = work / "digit_repeat.py"
    env_file.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom benchmarks.train import digit_repeat_env\n"
        "def load_environment(**kw):\n    return digit_repeat_env()\n")
    rep_rows = [dict(r) for r in env_rows(digit_repeat_env())]
    log(f"starting vLLM for the {n_params / 1e6:.1f} M-parameter model")
    with policy_server(big, ["--max-num-seqs", "256"]) as srv:
        gen = [
            ours("ours async (async_steps=1)", big, srv, str(env_file), async_steps=1, max_tokens=64,
                 steps=gen_steps, target=None, out=work / "g1", seq_len=256),
            ours("ours sync (async_steps=0)", big, srv, str(env_file), async_steps=0, max_tokens=64,
                 steps=gen_steps, target=None, out=work / "g0", seq_len=256),
        ]
    log("TRL GRPOTrainer on the generation-dominated workload")
    gen.append(trl_run("TRL GRPOTrainer", big, rep_rows, repeat_fraction, max_tokens=64,
                       steps=gen_steps, target=None, out=work / "trl2"))
    results["generation"] = gen
    results["generation_params"] = n_params
    print(f"\n## Generation-dominated workload: 64-token completions, {n_params / 1e6:.1f} M params, "
          f"{gen_steps} steps of 128 rollouts\n")
    print(table(gen))
    g1, g0, t2 = gen
    print(f"\nasync vs sync: tokens/s {ratio(g1['tokens_per_s'], g0['tokens_per_s'])}; "
          f"ours (async) s/step vs TRL: {ratio(g1['s_per_step'], t2['s_per_step'])} of TRL's")


if __name__ == "__main__":
    main()
