"""``isolated-verifier``: one solver plays the task with its scoring held back; its declared
artifacts are collected after the task's finalize, and the task's own metrics and rewards then
run onto the solver's trace in a fresh runtime (set up by the task, artifacts restored, then the
task's ``stage_verifier``), so what the solver did to its box beyond the artifacts cannot sway
the score. A failed setup, restore, staging or scoring is retried in a new box
(``[env.verifier] retries``); the last failure stays on the trace.

Model-graded judges are refused here (this env is for deterministic checks). Difference from the
original: the subprocess runtime is allowed (each box a fresh temporary folder, artifacts relative
paths in it); the original requires a container runtime.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import Field, field_validator

from verifiers.v1.agents import AgentConfig, Agents
from verifiers.v1.configs import BaseConfig
from verifiers.v1.env import Env
from verifiers.v1.episode import Episode
from verifiers.v1.errors import TaskError
from verifiers.v1.loading import EnvConfig
from verifiers.v1.runtimes import RuntimeConfig, SubprocessConfig, make_runtime, resolve_runtime_config
from verifiers.v1.scoring import invoke
from verifiers.v1.task import Task
from verifiers.v1.trace import Trace


class VerifierConfig(BaseConfig):
    runtime: RuntimeConfig | None = None
    """The verifier's box; None: a fresh one like the solver's."""
    env: dict[str, str] | None = None
    """Environment of the verifier's processes; None: the runtime config's own."""
    retries: int = Field(2, ge=0)
    """Further fresh-box attempts after a failed setup, restore, staging or scoring."""

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> Any:
        return None if value is None else resolve_runtime_config(value)


class IsolatedVerifierEnvConfig(EnvConfig):
    agent: AgentConfig = AgentConfig()
    verifier: VerifierConfig = VerifierConfig()


class IsolatedVerifierEnv(Env[IsolatedVerifierEnvConfig]):
    async def run(self, task: Task, agents: Agents) -> None:
        if task.config.judges:
            raise ValueError("isolated-verifier runs the task's deterministic metrics and rewards; model-graded judges are not supported here")
        self.verifier_config()
        await agents.agent.run(task.defer_scoring(), collect_artifacts=True)

    def verifier_config(self) -> RuntimeConfig:
        config = self.config.verifier.runtime or self.config.agent.runtime
        if self.config.verifier.env is not None and isinstance(config, SubprocessConfig):
            config = config.model_copy(update={"env": dict(self.config.verifier.env)})
        if isinstance(config, SubprocessConfig) and config.workdir is not None:
            raise ValueError("isolated-verifier needs a fresh box per check: leave the subprocess runtime's workdir unset")
        return config

    async def finalize(self, task: Task, episode: Episode) -> None:
        solution = episode.traces[0]
        if solution.ok:
            episode.traces[0] = await self.grade(self.verifier_config(), task, solution)

    async def stage_verifier(self, task: Task, solution: Trace, runtime: Any) -> None:
        from verifiers.v1.artifacts import restore

        await invoke(task.setup, {"trace": solution, "runtime": runtime})
        await restore(runtime, dict(solution.state.artifacts))
        await task.stage_verifier(solution, runtime)

    async def verify(self, task: Task, solution: Trace, runtime: Any) -> None:
        await task.score(solution, runtime)

    async def grade(self, config: RuntimeConfig, task: Task, solution: Trace) -> Trace:
        """Score a copy of ``solution`` in a fresh box per attempt; the copy that scored cleanly
        (else the last attempt's, its errors recorded) replaces the solver's trace."""
        setup_limit = self.config.agent.timeout.setup or task.data.timeout.setup
        last: Trace | None = None
        for attempt in range(self.config.verifier.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.25 * 2 ** (attempt - 1), 5.0))
            graded = solution.model_copy(deep=True)
            graded.state = solution.state
            before = len(graded.errors)  # an earlier try's errors (retries) are not this grade's
            runtime = make_runtime(config)
            try:
                await runtime.start()
                async with asyncio.timeout(setup_limit):
                    await self.stage_verifier(task, graded, runtime)
                graded.timing.scoring.start = time.time()
                await self.verify(task, graded, runtime)
                graded.timing.scoring.end = time.time()
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                what = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
                graded.record_error(TaskError(f"verifier attempt {attempt + 1} of {self.config.verifier.retries + 1}: {what}"))
            finally:
                await runtime.stop()
            graded.ok = len(graded.errors) == before
            if graded.ok:
                return graded
            last = graded
        assert last is not None
        return last


__all__ = ["IsolatedVerifierEnv", "IsolatedVerifierEnvConfig", "VerifierConfig"]
