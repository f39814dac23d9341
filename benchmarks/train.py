"""Training benchmarks, ours vs the peer in the same run (see the README's training section).

(1) The asynchronous loop (``async_steps=1``: batch n+1 is generated while the trainer trains on
    batch n, weights reloaded in place) against the same loop run synchronously (``async_steps=0``:
    generate, then train, then update): RL tokens per second and time to the target reward.
(2) Time to the target reward against TRL's ``GRPOTrainer`` (CPU, no vLLM: it generates with
    transformers) on the same model, environment and hyper-parameters:
      - trivial workload: digit copy (2-token completions) with the 0.42 M-parameter tiny model,
        all runs starting from the same SFT warm-start checkpoint, fp32;
      - generation-dominated workload: 64-token completions from a 4.2 M-parameter model (reward:
        the fraction of the completion that repeats the prompt's digit), all runs starting from the
        same short SFT warm start (reward ~0.3), in bf16 (TRL's default precision; our trainer
        autocasts to bf16 and vLLM serves bf16) and in fp32 (everything fp32).

(3) The workload asynchronous RL is for: an agentic relay whose answers need 2-4 tool calls, each
    tool an ``asyncio.sleep`` with log-normal latency (median 0.3 s, p99 3 s), 16-32 tokens per turn
    with the model choosing when to stop, 8 prompts x 4 rollouts per step, all from one SFT warm
    start: ours asynchronous (``--agent-async-steps``, default 4: up to five batches of groups in
    flight, the trainer takes groups as they finish, a group more than five versions old is dropped;
    the tools' latency, not the trainer, sets the pace here, so more room in flight is what makes a
    step shorter, and the token-level importance ratios correct for the older policies), ours
    synchronous (both with the episodes played by the embedded env-server pool, the default), and
    TRL's ``GRPOTrainer`` driven through our TRL bridge on the same vLLM server. Steps to the target
    vary a lot between runs, so each contender runs ``--agent-repeats`` rounds (default 3, seed =
    round) and the rows are medians, with every run's steps and time to the target beside them.
    Reported per run: step time, time and steps to the target, CPU seconds (the run's process, its
    env-server pool and the vLLM server), mean off-policy steps, trainer/inference mismatch (ours:
    mean k3 KL per sampled token; TRL logs none for a ``rollout_func``). Goals (issue 20): at least
    3x the synchronous loop's time to target, at most 0.25x TRL's. Figures:
    verifiers/train/README.md ("The agentic workload").

(4) ``--only proof`` / ``--only transport``: env servers against the in-process path (see
    verifiers/train/README.md, "One machine: env servers or in process?").

Workloads (1) and (2) use 16 prompts x 8 rollouts per step, lr 1e-3 (1e-4 on the generation-dominated
workload, where 1e-3 collapses both ours and TRL), temperature 1, no KL, advantages
``reward - group mean``; the target counts as reached when the mean reward of 5 consecutive steps
is at or above it. Ours talks to one real vLLM (CPU build) server started here.

Precision follows the machine (``--precision auto``, the default): bf16 only where the CPU computes
it natively (``avx512_bf16`` or ``amx_bf16`` in /proc/cpuinfo), else fp32 with one line saying why;
an AVX2-only CPU emulates bf16 at tens of times the cost. The CPU's relevant flags are printed with
the tables. SIGTERM / Ctrl-C stop the vLLM servers and the worker processes the script started.

    python benchmarks/train.py [--quick] [--precision auto|bf16|fp32|both]
                               [--only trivial|generation|agentic|transport|proof] [--agent-async-steps N]
                               [--agent-repeats N]
                               [--json OUT.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET = 0.8          # trivial workload
GEN_TARGET = 0.5      # generation-dominated workload (from ~0.3 after its short warm start)
GEN_TOKENS = 64
GEN_LR = 1e-4         # at 1e-3 both ours and TRL collapse on it (entropy -> 0, reward -> ~0.05)
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


# Agentic workload: each answer needs 2-4 tool calls, each tool call waits a log-normal latency.
TOOL_MEDIAN_S, TOOL_P99_S = 0.3, 3.0
AGENT_TOKENS = 32          # per turn at most (16-32: the model stops when it likes, like its demos)
AGENT_TARGET = 0.85        # mean per-turn reward (5-step average), from ~0.67 after the warm start
AGENT_LR = 1e-3
AGENT_GROUPS, AGENT_GROUP_SIZE = 8, 4   # 32 rollouts per step (multi-turn: ~100 turns of samples)


def tool_latency(rng) -> float:
    """Log-normal: median TOOL_MEDIAN_S, 99th percentile TOOL_P99_S (z(0.99) = 2.326)."""
    import math

    sigma = math.log(TOOL_P99_S / TOOL_MEDIAN_S) / 2.326
    return rng.lognormvariate(math.log(TOOL_MEDIAN_S), sigma)


def relay_env(num_examples: int = 500, seed: int = 3):
    """A tool-using relay: the prompt gives a digit; every model turn is a call to the relay tool,
    which answers (after a log-normal latency) with the next digit of a hidden chain of 2-4; the
    rollout ends after the last hop. Each turn must repeat the digit the model was last given (16-48
    times); reward = the mean over turns of the share of the turn's characters that are right."""
    import asyncio as aio
    import random

    from datasets import Dataset

    import verifiers as vf
    from verifiers.utils.decorators import stop

    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        chain = "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(2, 4)))
        rows.append({"question": chain[0], "answer": chain})
    latency_rng = random.Random(seed + 1)

    class RelayEnv(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kw):
            await aio.sleep(tool_latency(latency_rng))  # the tool's latency
            hop = state["turn"]
            return [{"role": "user", "content": state["answer"][hop]}]

        @stop
        async def relay_done(self, state, **kw) -> bool:
            return state["turn"] >= len(state["answer"])

    def relay_reward(completion, answer, **kw) -> float:
        turns = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
        if not turns:
            return 0.0
        return sum(repeat_turn(t, answer[i]) for i, t in enumerate(turns[: len(answer)])) / len(answer)

    return RelayEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[relay_reward]), max_turns=4)


def repeat_turn(text: str, digit: str) -> float:
    text = text or ""
    return sum(c == digit for c in text) / max(16, len(text))


def relay_demos(tok, n: int, offset: int):
    """Warm-start demonstrations for the relay: one turn of a relay conversation (any hop, with the
    earlier turns as history), repeating the digit last given 16-32 times, then EOS."""
    import random

    from verifiers.train.samples import Sample

    rng = random.Random(offset)
    out = []
    for _ in range(n):
        chain = "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(2, 4)))
        hop = rng.randrange(len(chain))
        msgs: list[dict[str, str]] = []
        for i in range(hop):
            msgs += [{"role": "user", "content": chain[i]},
                     {"role": "assistant", "content": chain[i] * rng.randint(16, AGENT_TOKENS)}]
        msgs.append({"role": "user", "content": chain[hop]})
        enc = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        prompt = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        comp = [*tok.encode(chain[hop] * rng.randint(16, AGENT_TOKENS), add_special_tokens=False), tok.eos_token_id]
        out.append(Sample(prompt + comp, [0] * len(prompt) + [1] * len(comp), [0.0] * (len(prompt) + len(comp))))
    return out


def copy_text_reward(text: str, answer: str) -> float:
    return 1.0 if (text or "").strip() == answer else 0.0


# ------------------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(f"[bench-train] {msg}", file=sys.stderr, flush=True)


def sft_checkpoint(model_dir: Path, out: Path, steps: int = 20, *, lr: float = 3e-3, batch: int = 64,
                   seq_len: int = 64, demos=None) -> Path:
    """A shared starting point: our SFT warm start on demonstrations, saved with the tokenizer.

    ``demos(tokenizer, n, offset)`` gives the samples of one step (default: the digit-copy env's).
    """
    import torch
    from transformers import AutoTokenizer

    from verifiers.train.loop import demonstration_samples, env_rows
    from verifiers.train.trainer import OptimConfig, Trainer, TrainerConfig

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if demos is None:
        rows = env_rows(digit_copy_env())

        def demos(tok, n, offset):
            return demonstration_samples(rows, tok, n, offset)

    tr = Trainer(model_dir, TrainerConfig(seq_len=seq_len, micro_batch_rows=64, optim=OptimConfig(lr=lr)))
    for s in range(steps):
        tr.sft_step(demos(tok, batch, s * batch))
    tr.save_weights(out)
    for f in model_dir.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, out / f.name)
    return out


def repeat_demos(tok, n: int, offset: int):
    """Demonstrations for the generation workload: the prompt's digit written 64 times, then EOS."""
    from verifiers.train.samples import Sample

    out = []
    for k in range(n):
        d = str((offset + 7 * k) % 10)
        enc = tok.apply_chat_template([{"role": "user", "content": d}], add_generation_prompt=True, tokenize=True)
        prompt = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        comp = [*tok.encode(d * GEN_TOKENS, add_special_tokens=False), tok.eos_token_id]
        out.append(Sample(prompt + comp, [0] * len(prompt) + [1] * len(comp), [0.0] * (len(prompt) + len(comp))))
    return out


#: Worker pools alive now: a SIGTERM kills their processes before unwinding (see install_signal_handlers).
_POOLS: list[Any] = []


def _kill_workers() -> None:
    for pool in list(_POOLS):
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                proc.kill()


def install_signal_handlers() -> None:
    """SIGTERM (and SIGINT) kill the worker processes, then unwind: every ``with`` block that
    started a vLLM server stops it on the way out, so nothing this script started keeps running."""
    def handler(signum: int, frame: Any) -> None:
        _kill_workers()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def cpu_report() -> dict[str, Any]:
    """What decides CPU precision here: torch's capability and the bf16/AVX flags of /proc/cpuinfo."""
    import torch

    from verifiers.train.trainer import cpu_flags

    flags = cpu_flags()
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni")
    model = ""
    with contextlib.suppress(OSError):
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    return {"cpu": model, "cores": os.cpu_count(), "capability": torch.backends.cpu.get_cpu_capability(),
            "flags": [f for f in wanted if f in flags]}


def choose_precisions(asked: str) -> list[str]:
    """``auto``: bf16 where the CPU has it natively, else fp32 (with the reason printed)."""
    from verifiers.train.trainer import cpu_precision

    if asked == "both":
        return ["bf16", "fp32"]
    _dtype, why = cpu_precision("bfloat16")
    if asked in ("bf16", "fp32"):
        if asked == "bf16" and why:
            log(f"precision: bf16 forced; {why.split(':')[0]} (the trainer will fall back to fp32)")
        return [asked]
    if why:
        log(f"precision: {why}")
        return ["fp32"]
    return ["bf16"]


def in_fresh_process(fn, *args: Any, **kwargs: Any) -> Any:
    """Run one contender in a new Python process, as a user would run it (``vf train``, a TRL script).

    Why: torch's CPU kernels run on an OpenMP team per calling thread, and once a process has two
    teams libgomp stops spinning between kernels (measured: a tiny-model step 0.095 s -> 0.157 s).
    Runs sharing this process would slow each other down for reasons no user would meet.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        _POOLS.append(pool)
        try:
            return pool.submit(fn, *args, **kwargs).result()
        finally:
            _POOLS.remove(pool)


def ours(label: str, start: Path, server: Any, env_id: str, **kw: Any) -> dict[str, Any]:
    """One RL run of our loop (in a fresh process) against the given vLLM server, reloaded to ``start``."""
    server.reload_weights(start)
    pid = server.process.pid if getattr(server, "process", None) is not None else None
    return in_fresh_process(ours_run, label, start, server.base_url, server.model, env_id,
                            server_pid=pid, **kw)


def ours_run(label: str, start: Path, base_url: str, model: str, env_id: str, *, async_steps: int,
             max_tokens: int, steps: int, target: float | None, out: Path, env_args: dict | None = None,
             seq_len: int = 128, dtype: str = "float32", lr: float = LR, max_in_flight: int | None = None,
             server_pid: int | None = None, groups: int = GROUPS, group_size: int = GROUP_SIZE,
             env_server: str = "auto", workers: int = 1, seed: int = 0) -> dict[str, Any]:
    from verifiers.train.config import TrainConfig
    from verifiers.train.inference import InferenceServer
    from verifiers.train.loop import run_training

    cfg = TrainConfig(**{
        "model": {"path": str(start)},
        "env": [{"id": env_id, "ratio": 1.0, "args": env_args or {}, "server": env_server, "workers": workers}],
        "sampling": {"max_tokens": max_tokens, "temperature": 1.0},
        "inference": {"weights_dtype": dtype},  # what the server runs: it reloads the files as they are
        "orchestrator": {"batch_groups": groups, "group_size": group_size,
                         "max_in_flight": max_in_flight or 2 * groups,
                         "async_steps": async_steps, "max_off_policy": max(async_steps, 0) + 1,
                         "drop_no_signal": False, "max_seq_len": seq_len, "seed": seed},
        "trainer": {"seq_len": seq_len, "micro_batch_rows": 8, "dtype": dtype, "optim": {"lr": lr}},
        "run": {"steps": steps, "output": str(out), "target_reward": target, "checkpoint_every": 0, "seed": seed},
        "logging": {"sample_rollouts": 0},
    })
    cpu0, srv0, kids0 = process_cpu_s(), pid_cpu_s(server_pid), children_cpu_s()
    t0 = time.perf_counter()
    asyncio.run(run_training(cfg, servers=[InferenceServer(base_url, model)]))
    wall = time.perf_counter() - t0
    rl = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r.get("stage") == "rl"]
    res = summarise(label, [(r["step"], r["time/elapsed_s"], r["reward/mean"], r["tokens/sampled"]) for r in rl],
                    target, wall)
    res["orchestrator_cpu_s"] = round(process_cpu_s() - cpu0, 1)  # this process: orchestrator + trainer
    res["env_server_cpu_s"] = round(children_cpu_s() - kids0, 1)  # embedded env-server pools (reaped children)
    res["cpu_s"] = round(res["orchestrator_cpu_s"] + res["env_server_cpu_s"] + pid_cpu_s(server_pid) - srv0, 1)
    res["off_policy_mean"] = round(sum(r.get("off_policy/mean", 0.0) for r in rl) / max(1, len(rl)), 2)
    res["mismatch_kl"] = float(f"{sum(r.get('loss/mismatch_kl', 0.0) for r in rl) / max(1, len(rl)):.3g}")
    return res


def process_cpu_s() -> float:
    """CPU seconds of this process (user + system, all threads)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def children_cpu_s() -> float:
    """CPU seconds of this process's finished (reaped) children and theirs."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def pid_cpu_s(pid: int | None) -> float:
    """CPU seconds of another process so far (``/proc/PID/stat``), 0 when unknown."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


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


def trl_run(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """TRL GRPOTrainer on CPU (transformers generation), same hyper-parameters, in a fresh process."""
    return in_fresh_process(trl_run_here, *args, **kwargs)


def trl_run_here(label: str, start: Path, rows: list[dict], reward_text, *, max_tokens: int, steps: int,
                 target: float | None, out: Path, bf16: bool = False, lr: float = LR) -> dict[str, Any]:
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
        gradient_accumulation_steps=1, max_completion_length=max_tokens, learning_rate=lr, beta=0.0,
        temperature=1.0, scale_rewards="none", lr_scheduler_type="constant", warmup_steps=0,
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=bf16,
        seed=0, disable_tqdm=True, max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.99,
        gradient_checkpointing=False,  # TRL turns it on by default; it only costs time on a tiny model
    )
    trainer = GRPOTrainer(model=str(start), reward_funcs=[reward], train_dataset=ds, args=args,
                          callbacks=[Track()])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # one printed dict per step would bury the tables
    t0 = time.perf_counter()
    trainer.train()
    return summarise(label, trace, target, time.perf_counter() - t0)


def trl_bridge_run(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """TRL GRPOTrainer driven through our TRL bridge on our vLLM server, in a fresh process."""
    return in_fresh_process(trl_bridge_run_here, *args, **kwargs)


def trl_bridge_run_here(label: str, start: Path, base_url: str, model: str, env_file: str, *, steps: int,
                        target: float | None, out: Path, max_tokens: int, completion_len: int, lr: float,
                        server_pid: int | None = None, groups: int = GROUPS,
                        group_size: int = GROUP_SIZE, seed: int = 0) -> dict[str, Any]:
    """TRL's own loop (synchronous: generate through the bridge, then train), weights reloaded into the
    same vLLM server before each step by the bridge."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.trl_bridge import env_reward, make_rollout_func, trl_dataset

    env = load_env(EnvSection(id=env_file))
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))  # vLLM is beside it, like ours co-located
    trace: list[tuple[int, float, float, float]] = []
    mismatch: list[float] = []
    t_start = [0.0]

    class Track(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            t_start[0] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                tokens = logs.get("completions/mean_length", max_tokens) * groups * group_size
                trace.append((state.global_step, time.perf_counter() - t_start[0], float(logs["reward"]), tokens))
                for k, v in logs.items():
                    if "logp_difference/mean" in k or ("is_ratio" in k.lower() and "mean" in k):
                        mismatch.append(float(v))
                        break
                window = [t[2] for t in trace[-5:]]
                if target is not None and len(window) == 5 and sum(window) / 5 >= target:
                    control.should_training_stop = True

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=groups * group_size, num_generations=group_size,
        gradient_accumulation_steps=1, max_completion_length=completion_len, learning_rate=lr, beta=0.0,
        temperature=1.0, scale_rewards="none", lr_scheduler_type="constant", warmup_steps=0,
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
        seed=seed, disable_tqdm=True, max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.99,
        gradient_checkpointing=False,
    )
    rollout_func = make_rollout_func(env, base_url, model=model, sampling_args={"max_tokens": max_tokens},
                                     max_concurrent=groups)
    with rollout_func:  # its model client (an HTTP session), loop thread and weights folder: closed on every path
        trainer = GRPOTrainer(model=str(start), reward_funcs=[env_reward], train_dataset=trl_dataset(env), args=args,
                              rollout_func=rollout_func, callbacks=[Track()])
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        cpu0, srv0 = process_cpu_s(), pid_cpu_s(server_pid)
        t0 = time.perf_counter()
        trainer.train()
    res = summarise(label, trace, target, time.perf_counter() - t0)
    res["cpu_s"] = round(process_cpu_s() - cpu0 + pid_cpu_s(server_pid) - srv0, 1)
    res["off_policy_mean"] = 0.0  # the bridge reloads the weights before every step: on-policy
    res["mismatch_kl"] = float(f"{sum(mismatch) / len(mismatch):.3g}") if mismatch else None
    return res


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["run", "steps", "rl_s", "s_per_step", "tokens_per_s", "steps_to_target", "time_to_target_s",
            "final_reward"]
    if any("cpu_s" in r for r in rows):
        cols += ["cpu_s", "off_policy_mean", "mismatch_kl"]
    if any("each_time_to_target_s" in r for r in rows):
        cols += ["each_steps_to_target", "each_time_to_target_s"]
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
    ap.add_argument("--skip-trivial", action="store_true", help="skip the trivial workload")
    ap.add_argument("--skip-agentic", action="store_true", help="skip the agentic (tool latency) workload")
    ap.add_argument("--only", choices=["trivial", "generation", "agentic", "transport", "proof"],
                    help="run one workload only (transport, proof: env servers vs in process; only when asked)")
    ap.add_argument("--agent-async-steps", type=int, default=4,
                    help="async_steps of the agentic workload's asynchronous run (default 4)")
    ap.add_argument("--agent-repeats", type=int, default=None,
                    help="rounds of the agentic workload (each contender once per round, seed = round; "
                         "rows are medians; default 3, 1 with --quick)")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32", "both"], default="auto",
                    help="precision(s) of the generation-dominated workload (auto: bf16 only on CPUs "
                         "with native bf16, else fp32)")
    a = ap.parse_args()
    if a.agent_repeats is not None and a.agent_repeats < 1:
        ap.error("--agent-repeats must be at least 1")
    install_signal_handlers()
    max_steps = 40 if a.quick else 100
    gen_steps = 15 if a.quick else 60
    work = Path(tempfile.mkdtemp(prefix="vf-bench-train-"))
    cpu = cpu_report()
    print(f"machine: {cpu['cpu'] or 'unknown CPU'}, {cpu['cores']} cores, torch CPU capability "
          f"{cpu['capability']}, flags: {' '.join(cpu['flags']) or '(none of avx2/avx512/amx)'}", flush=True)
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} CPUs", "cpu": cpu, "target_reward": TARGET,
                               "generation_target_reward": GEN_TARGET}
    agent_steps = 20 if a.quick else 60
    want = {a.only} if a.only else {"trivial", "generation", "agentic"} - (
        {"trivial"} if a.skip_trivial else set()) - ({"generation"} if a.skip_generation else set()) - (
        {"agentic"} if a.skip_agentic else set())
    try:
        if "trivial" in want:
            trivial_workload(work, max_steps, results)
        if "generation" in want:
            generation_workload(work, gen_steps, results, choose_precisions(a.precision))
        if "agentic" in want:
            agentic_workload(work, agent_steps, results, async_steps=a.agent_async_steps,
                             repeats=a.agent_repeats or (1 if a.quick else 3))
        if "transport" in want:
            transport_workload(work, 5 if a.quick else 20, results)
        if "proof" in want:
            proof_workload(work, 20 if a.quick else 40, results)
        if a.json:
            a.json.write_text(json.dumps(results, indent=2))
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}): servers and workers stopped")
        raise SystemExit(130) from None
    finally:
        _kill_workers()
        shutil.rmtree(work, ignore_errors=True)


def policy_server(model: Path, extra_args: list[str] | None = None) -> Any:
    """The vLLM server our runs talk to, started with the same arguments ``vf train`` would use."""
    from verifiers.serving.vllm import VLLMServer
    from verifiers.train.inference import single_process_args

    srv = VLLMServer(model, dev_mode=True, max_model_len=256, served_model_name="policy",
                     extra_args=extra_args or [])
    srv.extra_args = single_process_args(srv.extra_args, srv.variant)
    return srv


def report(title: str, rows: list[dict[str, Any]]) -> None:
    """The table, then async vs sync and ours vs TRL (rows: ours async, ours sync, TRL)."""
    a1, a0, trl = rows
    cpu = cpu_report()
    print(f"\n## {title}\n")
    print(f"(CPU: {cpu['cpu'] or 'unknown'}, capability {cpu['capability']}, flags {' '.join(cpu['flags'])})\n")
    print(table(rows))
    print(f"\nasync vs sync: tokens/s {ratio(a1['tokens_per_s'], a0['tokens_per_s'])}, "
          f"time to target {ratio(a0['time_to_target_s'], a1['time_to_target_s'])} faster")
    print(f"ours (async) vs TRL: time to target {ratio(a1['time_to_target_s'], trl['time_to_target_s'])} of TRL's, "
          f"time per step {ratio(a1['s_per_step'], trl['s_per_step'])} of TRL's", flush=True)


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
    report("Trivial workload: digit copy, 2-token completions, 0.42 M params, fp32, from one SFT checkpoint",
           trivial)


def generation_workload(work: Path, max_steps: int, results: dict[str, Any], precisions: list[str]) -> None:
    """64-token completions from a ~4 M-parameter model: time to the target reward, ours vs TRL."""
    from transformers import AutoModelForCausalLM

    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model
    from verifiers.train.loop import env_rows

    big = write_tiny_model(work / "small", TinyModelSpec(hidden=256, layers=4, heads=4, intermediate=1024, seed=0))
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(str(big)).parameters())
    # A short warm start (reward ~0.3) shared by every run, so that RL has signal from the start.
    start = sft_checkpoint(big, work / "small-sft", steps=6, lr=1e-3, batch=32, seq_len=128, demos=repeat_demos)
    env_file = work / "digit_repeat.py"
    env_file.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom benchmarks.train import digit_repeat_env\n"
        "def load_environment(**kw):\n    return digit_repeat_env()\n")
    rep_rows = [dict(r) for r in env_rows(digit_repeat_env())]
    results["generation_params"] = n_params
    for precision in precisions:
        bf16 = precision == "bf16"
        dtype = "bfloat16" if bf16 else "float32"
        log(f"starting vLLM ({dtype}) for the {n_params / 1e6:.1f} M-parameter model")
        with policy_server(start, ["--max-num-seqs", "256", "--dtype", dtype]) as srv:
            gen = [
                ours("ours async (async_steps=1)", start, srv, str(env_file), async_steps=1,
                     max_tokens=GEN_TOKENS, steps=max_steps, target=GEN_TARGET, out=work / f"g1-{precision}",
                     seq_len=256, dtype=dtype, lr=GEN_LR),
                ours("ours sync (async_steps=0)", start, srv, str(env_file), async_steps=0,
                     max_tokens=GEN_TOKENS, steps=max_steps, target=GEN_TARGET, out=work / f"g0-{precision}",
                     seq_len=256, dtype=dtype, lr=GEN_LR),
            ]
        log(f"TRL GRPOTrainer ({precision}) on the generation-dominated workload")
        gen.append(trl_run("TRL GRPOTrainer", start, rep_rows, repeat_fraction, max_tokens=GEN_TOKENS,
                           steps=max_steps, target=GEN_TARGET, out=work / f"trl2-{precision}", bf16=bf16,
                           lr=GEN_LR))
        results[f"generation_{precision}"] = gen
        report(f"Generation-dominated workload: {GEN_TOKENS}-token completions, {n_params / 1e6:.1f} M params, "
               f"{precision}, from one SFT checkpoint", gen)


def agentic_workload(work: Path, max_steps: int, results: dict[str, Any], async_steps: int = 4,
                     repeats: int = 3) -> None:
    """The workload asynchronous RL is for: multi-turn tool use with slow, heavy-tailed tools.

    Every contender starts from the same SFT checkpoint and talks to the same vLLM server: ours
    asynchronous (up to ``async_steps + 1`` batches of groups in flight, the most the off-policy
    budget admits; the trainer takes groups as they finish), ours synchronous (one batch, then train,
    then update), and TRL's GRPOTrainer driven through our TRL bridge (its own synchronous loop, the
    bridge reloads the weights before each step).

    Steps to the target vary a lot from run to run (the sampled tokens, the tools' latencies and
    which groups finish first all differ), so the contenders run ``repeats`` rounds, round r with
    seed r for all three (data order, trainer and TRL seeds), and each row is the median over the
    rounds; a run that never reaches the target counts as slower than any that does.
    """
    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model

    tiny = write_tiny_model(work / "agent-tiny", TinyModelSpec(seed=0))
    start = sft_checkpoint(tiny, work / "agent-sft", steps=30, lr=3e-3, batch=32, seq_len=256, demos=relay_demos)
    env_file = work / "relay.py"
    env_file.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom benchmarks.train import relay_env\n"
        "def load_environment(**kw):\n    return relay_env()\n")
    seq = 256
    g, gs = AGENT_GROUPS, AGENT_GROUP_SIZE
    log(f"agentic workload: tools with log-normal latency (median {TOOL_MEDIAN_S} s, p99 {TOOL_P99_S} s), "
        f"2-4 calls per answer, up to {AGENT_TOKENS} tokens per turn, {repeats} round(s)")
    labels = (f"ours async (async_steps={async_steps}, up to {async_steps + 1} batches in flight, env servers)",
              "ours sync (async_steps=0)", "TRL GRPOTrainer (our bridge, same vLLM)")
    runs: list[list[dict[str, Any]]] = [[], [], []]
    with policy_server(start, ["--max-num-seqs", "256"]) as srv:
        common = {"max_tokens": AGENT_TOKENS, "steps": max_steps, "target": AGENT_TARGET, "seq_len": seq,
                  "lr": AGENT_LR, "groups": g, "group_size": gs}
        for r in range(repeats):
            log(f"agentic round {r + 1} of {repeats} (seed {r})")
            runs[0].append(ours(labels[0], start, srv, str(env_file), async_steps=async_steps,
                                max_in_flight=(async_steps + 1) * g, out=work / f"ag{async_steps}-{r}", seed=r,
                                **common))
            runs[1].append(ours(labels[1], start, srv, str(env_file), async_steps=0, max_in_flight=g,
                                out=work / f"ag0-{r}", seed=r, **common))
            srv.reload_weights(start)
            runs[2].append(trl_bridge_run(labels[2], start, srv.base_url, srv.model, str(env_file),
                                          steps=max_steps, target=AGENT_TARGET, out=work / f"agtrl-{r}",
                                          max_tokens=AGENT_TOKENS, completion_len=seq, lr=AGENT_LR, groups=g,
                                          group_size=gs, server_pid=srv.process.pid if srv.process else None,
                                          seed=r))
            a, s_, t = (x[-1]["time_to_target_s"] for x in runs)
            log(f"round {r + 1}: time to target async {a} s, sync {s_} s, TRL {t} s "
                f"(async vs sync {ratio(s_, a)}, async vs TRL {ratio(a, t)})")
    rows = [median_row(label, rs) for label, rs in zip(labels, runs, strict=True)]
    results["agentic"] = rows
    results["agentic_runs"] = runs
    report(f"Agentic workload: 2-4 tool calls per answer (log-normal latency, median {TOOL_MEDIAN_S} s, "
           f"p99 {TOOL_P99_S} s), 16-{AGENT_TOKENS} tokens per turn, {g}x{gs} rollouts per step, "
           f"0.42 M params, fp32, median of {repeats} round(s)", rows)


def median_row(label: str, rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from repeated runs: the median of each figure; time and steps to the target take a run
    that never reached it as slower than every run that did (None when the median run did not)."""
    import statistics

    def med(key: str, missing_last: bool = False) -> Any:
        vals = [r.get(key) for r in rs]
        if missing_last:
            ranked = sorted(vals, key=lambda v: (v is None, v or 0.0))
            return ranked[(len(ranked) - 1) // 2]  # the lower median: a real run's figure
        nums = [v for v in vals if isinstance(v, (int, float))]
        return round(statistics.median(nums), 3) if nums else None

    row: dict[str, Any] = {"run": label}
    for key in ("steps", "rl_s", "s_per_step", "tokens_per_s", "final_reward", "cpu_s", "off_policy_mean",
                "mismatch_kl", "wall_s"):
        row[key] = med(key)
    row["steps_to_target"] = med("steps_to_target", missing_last=True)
    row["time_to_target_s"] = med("time_to_target_s", missing_last=True)
    row["each_time_to_target_s"] = "/".join("-" if r.get("time_to_target_s") is None else
                                            f"{r['time_to_target_s']:g}" for r in rs)
    row["each_steps_to_target"] = "/".join("-" if r.get("steps_to_target") is None else
                                           str(r["steps_to_target"]) for r in rs)
    return row


def proof_workload(work: Path, steps: int, results: dict[str, Any]) -> None:
    """Does a one-machine ``vf train`` keep an in-process path? The CPU proof's pieces (the tiny
    model from one SFT checkpoint, digit copy (a classic env), one real vLLM server, 16 groups x 8,
    async_steps=1, the full ``steps`` without a target stop) with the episodes played by an
    embedded env-server pool (1 worker; ``server = "auto"``) and in the orchestrator's loop
    (``server = "in_process"``), alternated twice. Per run: seconds per RL step and the CPU seconds
    per step of the run's process (orchestrator + trainer), the env-server pool and vLLM."""
    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model

    tiny = write_tiny_model(work / "proof-tiny", TinyModelSpec(seed=0))
    start = sft_checkpoint(tiny, work / "proof-sft")
    env_path = str(REPO / "examples" / "envs" / "digit_copy.py")
    log("starting vLLM for the tiny model")
    rows = []
    with policy_server(start) as srv:
        for rep in range(2):
            for label, where in (("env servers (embedded pool, 1 worker)", "auto"), ("in process", "in_process")):
                r = ours(label, start, srv, env_path, async_steps=1, max_tokens=2, steps=steps, target=None,
                         out=work / f"proof-{where}-{rep}", env_server=where)
                n = max(1, r["steps"])
                r["cpu_s_per_step"] = round(r["cpu_s"] / n, 3)
                r["run_cpu_s_per_step"] = round(r["orchestrator_cpu_s"] / n, 3)
                r["env_server_cpu_s_per_step"] = round(r["env_server_cpu_s"] / n, 3)
                rows.append(r)
    results["proof"] = rows
    cols = ["run", "steps", "s_per_step", "final_reward", "run_cpu_s_per_step", "env_server_cpu_s_per_step",
            "cpu_s_per_step", "wall_s"]
    print("\n## The CPU proof's pieces: env servers vs in process (digit copy, tiny model, real vLLM)\n")
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols))
    served = [r for r in rows if not r["run"].startswith("in process")]
    local = [r for r in rows if r["run"].startswith("in process")]

    def mean(rs: list[dict[str, Any]], key: str) -> float:
        return sum(r[key] for r in rs) / len(rs)

    print(f"\nenv servers vs in process (mean of {len(served)}): s/step "
          f"{ratio(mean(served, 's_per_step'), mean(local, 's_per_step'))}, CPU s/step (all processes) "
          f"{ratio(mean(served, 'cpu_s_per_step'), mean(local, 'cpu_s_per_step'))}", flush=True)


def transport_workload(work: Path, batches: int, results: dict[str, Any]) -> None:
    """Does a one-machine run need an in-process path? The orchestrator alone (no trainer: a
    consumer takes each batch at once) on a v1 env (``sort-numbers``) against a scripted
    OpenAI-compatible server (vLLM-shaped token data, 50 ms per reply), its episodes played by an
    embedded env-server pool (1 and 2 workers) and in its own event loop. Per run: batches/s and the
    CPU seconds of the orchestrator's process and of the pool's processes, in a fresh process each."""
    rows = [in_fresh_process(transport_run, label, where, workers, batches)
            for label, where, workers in (("env servers, embedded pool (1 worker)", "embedded", 1),
                                          ("env servers, embedded pool (2 workers)", "embedded", 2),
                                          ("in process", "in_process", 1))]
    results["transport"] = rows
    cols = ["run", "batches", "episodes", "wall_s", "episodes_per_s", "orchestrator_cpu_s", "env_server_cpu_s",
            "cpu_ms_per_episode"]
    print("\n## Transport: env servers vs in process (orchestrator only, sort-numbers, scripted server)\n")
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols))
    e1, e2, ip = rows
    print(f"\nepisodes/s: embedded 1 worker {ratio(e1['episodes_per_s'], ip['episodes_per_s'])}, 2 workers "
          f"{ratio(e2['episodes_per_s'], ip['episodes_per_s'])} of in process; CPU per episode (all processes): "
          f"{ratio(e1['cpu_ms_per_episode'], ip['cpu_ms_per_episode'])}, "
          f"{ratio(e2['cpu_ms_per_episode'], ip['cpu_ms_per_episode'])}", flush=True)


def transport_run(label: str, where: str, workers: int, batches: int) -> dict[str, Any]:
    from verifiers.testing.scripted import ScriptedServer
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.env_rows import env_rows
    from verifiers.train.env_servers import EnvServers
    from verifiers.train.orchestrator import EnvEntry, Orchestrator, OrchestratorConfig

    section = EnvSection(id=str(REPO / "environments" / "sort-numbers"), args={"n": 256}, server=where, workers=workers)
    env = load_env(section)
    entry = EnvEntry("sort", env, 1.0, env_rows(env))
    sampling = {"max_tokens": 16, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}

    async def main() -> dict[str, Any]:
        from verifiers.clients import ModelClient

        servers = EnvServers()
        with ScriptedServer("1 2 3", delay=0.05) as srv:
            server = SimpleNamespace(client=ModelClient(base_url=srv.base_url), model=srv.model, healthy=True)
            servers.start([entry], [section])
            try:
                servers.ready(log=lambda _m: None)
                await servers.wait_ready()
                orch = Orchestrator([entry], [server], OrchestratorConfig(
                    batch_groups=GROUPS, group_size=GROUP_SIZE, max_in_flight=2 * GROUPS, async_steps=1,
                    drop_no_signal=False, max_seq_len=256), sampling, rollout_fn=servers.rollout_fn(),
                    health_check=False)
                try:
                    await orch.next_batch()  # warm-up (imports, the first episodes)
                    cpu0, kids0, t0 = process_cpu_s(), _pool_cpu_s(servers), time.perf_counter()
                    n = 0
                    for _ in range(batches):
                        batch = await orch.next_batch()
                        n += len(batch.rollouts)
                        orch.set_version(orch.batches_out)  # the consumer "trained": the next batch may start
                    wall = time.perf_counter() - t0
                    cpu, kids = process_cpu_s() - cpu0, _pool_cpu_s(servers) - kids0
                finally:
                    await orch.stop()
            finally:
                await servers.aclose()
                await server.client.aclose()
                with contextlib.suppress(Exception):
                    await env.aclose()
        return {"run": label, "batches": batches, "episodes": n, "wall_s": round(wall, 1),
                "episodes_per_s": round(n / wall, 1), "orchestrator_cpu_s": round(cpu, 1),
                "env_server_cpu_s": round(kids, 1), "cpu_ms_per_episode": round(1000 * (cpu + kids) / max(1, n), 2)}

    return asyncio.run(main())


def _pool_cpu_s(servers: Any) -> float:
    """CPU seconds so far of the embedded pools' processes (each pool and its workers)."""
    total = 0.0
    for target in servers.targets.values():
        if target.process is None:
            continue
        pids = {target.process.pid}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == target.process.pid:
                        pids.add(int(pid))
        total += sum(pid_cpu_s(p) for p in pids)
    return total


if __name__ == "__main__":
    main()
