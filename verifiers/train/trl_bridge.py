"""Use any of our environments inside TRL's ``GRPOTrainer`` (its experimental ``rollout_func`` hook).

TRL calls ``rollout_func(prompts, trainer)`` with the prompts of its batch (each prompt repeated
``num_generations`` times, consecutively) and expects ``prompt_ids``, ``completion_ids`` and
``logprobs`` (one entry per prompt it passed); any other key is forwarded to the reward functions.
The bridge runs the environment's own rollouts (multi-turn and tools included) against an
OpenAI-compatible server, scores them with the environment's rubric, and returns the env reward as
the ``env_reward`` column, which :func:`env_reward` hands back to TRL as the reward.

Weights: before generating for a new optimizer step, the bridge saves the trainer's model and
reloads it in place on the server (``/collective_rpc reload_weights``; start vLLM with
``VLLM_SERVER_DEV_MODE=1``, e.g. ``vf serve DIR --dev-mode``), so rollouts come from the current
policy. Pass ``sync_weights=False`` to manage that yourself.

Example::

    import verifiers as vf
    from trl import GRPOConfig, GRPOTrainer
    from verifiers.train.trl_bridge import env_reward, make_rollout_func, trl_dataset

    env = vf.load_environment("digit-copy")
    rollout_func = make_rollout_func(env, "http://127.0.0.1:8000/v1", model="tiny",
                                     sampling_args={"max_tokens": 8})
    trainer = GRPOTrainer(model="outputs/tiny-model", reward_funcs=[env_reward],
                          train_dataset=trl_dataset(env), rollout_func=rollout_func,
                          args=GRPOConfig(num_generations=8, per_device_train_batch_size=8,
                                          max_completion_length=8))
    trainer.train()

Multi-turn rollouts are returned as TRL expects: ``completion_ids`` hold every token after the first
prompt (model and environment tokens alike) and ``env_mask`` marks which ones the model sampled;
``logprobs`` are 0.0 on environment tokens. Turns that do not extend the previous tokens exactly are
cut at the first such turn (TRL takes one sequence per rollout).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.train.env_rows import env_rows
from verifiers.train.samples import rollout_to_samples


def _key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, default=str)


def trl_dataset(env: Any):
    """The environment's training rows as a ``datasets.Dataset`` with the ``prompt`` column TRL reads."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": r["prompt"], "example_id": r.get("example_id", i)}
                              for i, r in enumerate(env_rows(env))])


def env_reward(completions: Sequence[Any], env_reward: Sequence[float] | None = None, **kwargs: Any) -> list[float]:
    """TRL reward function: the environment's reward, computed during the rollout."""
    if env_reward is None:
        raise ValueError("env_reward missing: use this reward function together with make_rollout_func")
    return [float(r) for r in env_reward]


class _LoopThread:
    """A private event loop in a thread, so the bridge works whether or not TRL's caller has a loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread, then close the loop (idempotent)."""
        if self.loop.is_closed():
            return
        # the loop's default executor (asyncio.to_thread in environments) has threads of its own
        with contextlib.suppress(Exception):
            self.run(self.loop.shutdown_default_executor())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def make_rollout_func(env: Any, client: Any, *, model: str, sampling_args: dict[str, Any] | None = None,
                      sync_weights: bool = True, max_concurrent: int = 64, max_error_rate: float = 0.5,
                      error_window: int = 128) -> Callable[[list[Any], Any], dict]:
    """Build a TRL ``rollout_func`` that runs ``env`` against the server behind ``client``.

    ``client``: a base URL, a :class:`~verifiers.clients.ModelClient`, a ``ClientConfig`` or an
    ``openai.AsyncOpenAI``. ``sampling_args`` are sent as is, plus what token data needs
    (``logprobs`` and ``return_token_ids``).

    A rollout that recorded an error is never a training signal, as in ``vf train``: its tokens get
    ``env_mask`` 0 (TRL multiplies its loss mask by it), and its reward is the mean reward of the
    rollouts of its group that did not fail, so it does not move the group's baseline (TRL computes
    group statistics over every sample it is given; this is the closest a ``rollout_func`` can come to
    leaving the sample out). A group in which every rollout failed gets reward 0 everywhere and no
    loss tokens. When more than ``max_error_rate`` of the last ``error_window`` rollouts failed,
    :class:`~verifiers.train.orchestrator.RolloutsFailingError` stops training with the commonest error.

    ``rollout_func.close()`` (also ``with make_rollout_func(...) as f``) closes what the bridge opened:
    the model client it made (its HTTP session; a client passed in stays the caller's), its event
    loop thread and its weights folder. Call it when training ends, on every path.
    """
    from collections import Counter, deque

    from verifiers.clients import ModelClient
    from verifiers.train.orchestrator import RolloutsFailingError, rollout_error

    mc = ModelClient.from_any(client)
    own_client = mc is not client
    rows = {_key(r["prompt"]): r for r in env_rows(env)}
    args = dict(sampling_args or {})
    args["logprobs"] = True
    args["extra_body"] = {**args.get("extra_body", {}), "return_token_ids": True}
    runner = _LoopThread()
    sem_holder: dict[str, asyncio.Semaphore] = {}
    state = {"step": None}
    recent: deque[bool] = deque(maxlen=error_window)  # did each of the last rollouts fail?
    seen_errors: Counter[tuple[str, str]] = Counter()
    samples_of_errors: dict[tuple[str, str], str] = {}
    weights_dir = tempfile.mkdtemp(prefix="vf-trl-weights-")

    async def reload(path: str) -> None:
        import httpx

        root = mc.base_url[: -len("/v1")] if mc.base_url.endswith("/v1") else mc.base_url
        async with httpx.AsyncClient(timeout=600) as h:
            r = await h.post(f"{root}/collective_rpc",
                             json={"method": "reload_weights", "kwargs": {"weights_path": path}})
            r.raise_for_status()

    async def group(row: dict[str, Any], n: int) -> list[Any]:
        sem = sem_holder.setdefault("s", asyncio.Semaphore(max_concurrent))
        inputs = [dict(row, rollout_index=i) for i in range(n)]
        async with sem:
            return list(await env.run_group(inputs, mc, model, args))

    async def run_all(prompts: list[Any]) -> list[Any]:
        # Consecutive equal prompts are one group (TRL repeats each prompt num_generations times).
        runs: list[tuple[dict[str, Any], int]] = []
        for p in prompts:
            k = _key(p)
            if k not in rows:
                raise KeyError("prompt not found in the environment's dataset; build the TRL dataset with trl_dataset(env)")
            if runs and _key(runs[-1][0]["prompt"]) == k:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((rows[k], 1))
        return list(await asyncio.gather(*(group(r, n) for r, n in runs)))

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if sync_weights and trainer is not None and state["step"] != trainer.state.global_step:
            model_ = trainer.accelerator.unwrap_model(trainer.model)
            model_.save_pretrained(weights_dir, safe_serialization=True)
            runner.run(reload(weights_dir))
            state["step"] = trainer.state.global_step
        groups = runner.run(run_all(prompts))
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "env_reward": []}
        for states in groups:
            errors = [rollout_error(st) for st in states]
            recent.extend(e is not None for e in errors)
            for e in errors:
                if e is not None:
                    seen_errors[(str(e.get("source") or "unknown"), e.get("type") or "Error")] += 1
                    samples_of_errors.setdefault((str(e.get("source") or "unknown"), e.get("type") or "Error"),
                                                  e.get("message", ""))
            ok_rewards = [float(st.get("reward") or 0.0) for st, e in zip(states, errors, strict=True) if e is None]
            baseline = sum(ok_rewards) / len(ok_rewards) if ok_rewards else 0.0
            samples = [(rollout_to_samples(st) or [None])[0] for st in states]
            donor = next((x for x in samples if x is not None), None)
            for st, err, sample in zip(states, errors, samples, strict=True):
                if sample is None:
                    if err is None:
                        raise ValueError("a rollout produced no model turn (and recorded no error)")
                    if donor is None:  # every rollout of the group failed before the model answered
                        raise RolloutsFailingError(
                            f"every rollout of a group failed before a model turn: {err.get('source')}: "
                            f"{err.get('type')}: {err.get('message', '')[:300]}")
                    sample = donor  # same prompt; its completion is fully masked below
                # The first run of loss-masked-0 tokens is the prompt; everything after is the completion.
                first = sample.loss_mask.index(1) if 1 in sample.loss_mask else len(sample.input_ids)
                out["prompt_ids"].append(sample.input_ids[:first])
                out["completion_ids"].append(sample.input_ids[first:])
                out["logprobs"].append(sample.inference_logprobs[first:])
                if err is None:
                    out["env_mask"].append(sample.loss_mask[first:])
                    out["env_reward"].append(float(st.get("reward") or 0.0))
                else:
                    out["env_mask"].append([0] * (len(sample.input_ids) - first))
                    out["env_reward"].append(baseline)
        if len(recent) >= min(error_window, 32) and sum(recent) > max_error_rate * len(recent):
            (src, typ), count = seen_errors.most_common(1)[0]
            raise RolloutsFailingError(
                f"{sum(recent)} of the last {len(recent)} rollouts failed (more than {max_error_rate:.0%}); "
                f"commonest: {src}: {typ} ({count}x), e.g. {samples_of_errors[(src, typ)][:300]!r}")
        return out

    def close() -> None:
        if runner.loop.is_closed():
            return
        try:
            if own_client:
                runner.run(mc.aclose())
        finally:
            runner.close()
            shutil.rmtree(weights_dir, ignore_errors=True)

    return _RolloutFunc(rollout_func, close)


class _RolloutFunc:
    """The ``rollout_func`` TRL calls, with ``close()`` (and ``with``) for what the bridge opened."""

    def __init__(self, fn: Callable[[list[Any], Any], dict], close: Callable[[], None]) -> None:
        self._fn = fn
        self.close = close

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        return self._fn(prompts, trainer)

    def __enter__(self) -> _RolloutFunc:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
