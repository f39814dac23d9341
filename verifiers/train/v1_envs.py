"""v1 environments in training: a ``verifiers.v1`` Env as the orchestrator sees an environment.

The orchestrator asks an environment for its rows and for ``run_group(rows, client, model,
sampling_args)``. :class:`V1TrainEnv` answers both for a v1 Env, in this process: each row is one
task of the taskset, and a group is ``group_size`` episodes of that task run through the v1 run
path (``verifiers.v1.rollout``: agents, harness, interception, the task's hooks, scoring,
``finalize``) on the engine's group stage, against the training's inference client. Each state
keeps its episode (``state["episode"]``); the samples come from its traces' token ids, masks and
logprobs (``verifiers.train.samples.episode_samples``), and the group's advantages are over its
episodes' rewards (the mean over each episode's trainable traces, as ``vf eval`` reports it).

Torch-free, like the orchestrator.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["V1TrainEnv", "check_episode_temperature", "describe_episode", "is_v1_env"]


def is_v1_env(env: Any) -> bool:
    """Whether ``env`` is a v1 ``Env`` (never imports ``verifiers.v1`` for a classic one)."""
    module = sys.modules.get("verifiers.v1.env")
    return module is not None and isinstance(env, module.Env)


class V1TrainEnv:
    """A v1 ``Env`` with the surface training reads from an environment: ``dataset`` (one row per
    task: ``example_id``, ``task``, ``prompt``), ``eval_dataset`` (None: tasksets have no eval
    split), ``run_group`` and ``aclose``."""

    def __init__(self, env: Any, server_table: dict[str, Any] | None = None) -> None:
        from verifiers.v1.rollout import EpisodeRunner

        env.check()  # a role whose harness or runtime cannot start here: refused before any server starts
        taskset = env.taskset
        name = env.config.taskset.id
        if not taskset.bounded:
            raise ValueError(
                f"taskset {name!r} is endless (INFINITE): training reads every task of a taskset up front; "
                f"give it a bounded configuration (a task count in its [[env]] args)")
        tasks = list(taskset)
        if not tasks:
            raise ValueError(f"taskset {name!r} yields no tasks")
        self.env = env
        self.env_id = env.env_id
        self.env_args: dict[str, Any] = dict(getattr(env, "env_args", {}) or {})
        self.dataset = [{"example_id": t.data.idx if t.data.idx is not None else i, "task": t,
                         "prompt": t.data.prompt} for i, t in enumerate(tasks)]
        self.eval_dataset = None
        # the [env] table an env server loads to play this env's episodes (verifiers.train.env_servers)
        self.server_table = server_table
        self._runner = EpisodeRunner(env)
        self._started: asyncio.Task | None = None

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.ensure_future(self._runner.start())
        await asyncio.shield(self._started)

    async def run_group(self, inputs: Sequence[Mapping[str, Any]], client: Any, model: str,
                        sampling_args: Mapping[str, Any] | None = None, **_: Any) -> list[Any]:
        """``len(inputs)`` episodes of one task, scored; each state carries its ``episode``."""
        from verifiers.engine.group import run_group

        await self._start()
        rows = [{"example_id": r["example_id"], "rollout_index": r.get("rollout_index", i), "task": r["task"]}
                for i, r in enumerate(inputs)]
        args = dict(sampling_args or {})
        states = await run_group(self._runner.plan, rows, client, model, args)
        for state in states:
            episode = state.get("_episode")
            state["episode"] = episode
            if episode is None:
                continue
            check_episode_temperature(episode, args.get("temperature"))
            describe_episode(state, episode, state["_task"].data.prompt)
        return states

    async def aclose(self) -> None:
        """Stop what the episodes shared (the env's resources, the proxy, the roles' clients)."""
        if self._started is not None:
            self._started = None
            await self._runner.close()


def describe_episode(state: dict[str, Any], episode: Any, prompt: Any) -> None:
    """The readable rollout (``rollouts/step_N.jsonl``): the task's prompt and what the agents said."""
    state["prompt"] = prompt
    state["completion"] = "\n\n".join(f"[agent {t.agent.name}]\n{t.transcript}"
                                       for t in episode.traces if t.agent.trainable)


def check_episode_temperature(episode: Any, temperature: float | None) -> None:
    """A trainable agent sampling at another temperature than the trainer's would train on
    logprobs of a different distribution: stop with what to change."""
    if temperature is None:
        return
    for trace in (t for t in episode.traces if t.agent.trainable):
        for call in trace.calls:
            used = call.sampling.temperature if call.sampling is not None else None
            if used is not None and float(used) != float(temperature):
                raise ValueError(
                    f"agent {trace.agent.name!r} sampled at temperature {used} but training samples at "
                    f"{temperature} (sampling.temperature = trainer.temperature): remove the role's own "
                    f"sampling temperature, or make the role untrainable (agents.<role>.trainable = False)")
