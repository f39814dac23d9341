"""``mini_swe_agent``: the real mini-swe-agent program (``mini``, from PyPI) as a harness.

It runs in the ``sandbox`` runtime (bubblewrap; no Docker), from a tool folder built once per
machine from the package index and mounted read-only (``runtime.prepare_tools``; never installed
per rollout). Its model calls go to the interception proxy, the one network route its sandbox
gets (``runtime.prepare_execution``), so each call is recorded on the trace with the agent's
sampling applied and the upstream's token ids and logprobs kept. Its bash commands run in the
same sandbox, in the work folder (``/workspace``), with the task's environment first on ``PATH``
and mini's own packages out of sight (it is started by its interpreter's absolute path).

Limits: ``step_limit`` (None: the role's ``max_turns``; 0: none) and ``cost_limit`` (0: none;
local models have no price) become mini's ``agent.step_limit`` / ``agent.cost_limit``, so mini
ends its own run at the limit (exit status ``LimitsExceeded``) instead of meeting a refused call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from verifiers.v1.errors import HarnessError
from verifiers.v1.harness import Harness, HarnessConfig
from verifiers.v1.runtimes import ProgramResult
from verifiers.v1.types import content_text


class MiniSWEAgentHarnessConfig(HarnessConfig):
    id: str = "mini_swe_agent"
    version: str = "2.4.6"
    """mini-swe-agent release, pinned (part of the tool folder's key)."""
    litellm_version: str = "1.102.0"
    """litellm, which mini calls models through, pinned as the original does."""
    step_limit: int | None = Field(None, ge=0)
    """mini's ``agent.step_limit``; None: the role's ``max_turns`` (0: no limit)."""
    cost_limit: float = Field(0.0, ge=0)
    """mini's ``agent.cost_limit`` in dollars (0: none)."""
    command_timeout: int = Field(600, gt=0)
    """Seconds one of the agent's bash commands may run (mini's ``environment.timeout``)."""
    config: str = "mini"
    """mini's built-in config (``mini``: tool calls, a ``bash`` tool)."""
    timeout: float | None = Field(None, gt=0)
    """Wall-clock seconds for the whole program (None: the runtime's ``timeout``)."""

    @property
    def requirements(self) -> list[str]:
        return [f"mini-swe-agent=={self.version}", f"litellm=={self.litellm_version}"]


class MiniSWEAgentHarness(Harness[MiniSWEAgentHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = False
    SUPPORTS_MCP = False
    EXECUTES_CODE = True
    NEEDS_CONTAINER = True

    def _tools_of(self, runtime: Any) -> Any:
        prepare = getattr(runtime, "prepare_tools", None)
        if prepare is None:
            raise HarnessError(f'harness {self.config.id!r} needs the sandbox runtime (type = "sandbox"), which mounts its tool folder')
        return prepare(self.config.requirements)

    async def setup(self, runtime: Any) -> None:
        """Build (once per machine) and mount the tool folder; a rollout installs nothing."""
        await self._tools_of(runtime)

    def argv(self, python: str, model: str, task: str, endpoint: str, secret: str, max_turns: int | None) -> list[str]:
        cfg = self.config
        steps = cfg.step_limit if cfg.step_limit is not None else max(max_turns or 0, 0)  # the proxy refuses past max_turns anyway
        sets = {
            "agent.step_limit": steps, "agent.cost_limit": cfg.cost_limit, "environment.timeout": cfg.command_timeout,
            "environment.cwd": "/workspace", "model.cost_tracking": "ignore_errors",
            "model.model_kwargs.custom_llm_provider": "openai", "model.model_kwargs.api_base": endpoint,
            "model.model_kwargs.api_key": secret,
        }  # fmt: skip
        argv = [python, "-I", "-c", _DRIVER, "--model", model, "--model-class", "litellm", "--task", task,
                "--exit-immediately", "--yolo", "--output", "/tmp/mini.traj.json", "-c", cfg.config]  # fmt: skip
        for key, value in sets.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str, mcp_urls: dict[str, str], data: Any) -> ProgramResult:
        if self.config.disabled_tools:
            raise HarnessError("mini-swe-agent has one tool (bash), which cannot be disabled")
        tools = await self._tools_of(runtime)
        task = _task_text(data)
        env = {
            "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "true", "MSWEA_GLOBAL_CONFIG_DIR": "/tmp/mswea",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",  # the engine's client owns retries
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "XDG_CACHE_HOME": "/tmp/.cache", "PAGER": "cat",
            **self.config.env,
        }  # fmt: skip
        argv = self.argv(tools.python, ctx.model, task, endpoint, secret, ctx.max_turns)
        result = await runtime.run_program(argv, env=env, timeout=self.config.timeout)
        trace.info["mini_swe_agent"] = {**_exit_status(result.stderr), "returncode": result.returncode, "timed_out": result.timed_out}
        if not result.ok and trace.is_completed:
            # the rollout was stopped (a stop hook, max_turns) and mini met the refused call: a clean end
            return ProgramResult(0, result.stdout, result.stderr)
        return result


# mini's own command line (``minisweagent.run.mini``), then its exit status on stderr for the
# trace; then out at once: litellm's exit hooks take seconds and do nothing a rollout needs (mini
# has saved its trajectory), and the sandbox is discarded anyway
_DRIVER = r"""
import json, os, sys
from minisweagent.run.mini import app
sys.argv[0] = "mini"
agent = app(standalone_mode=False)
extra = (agent.messages[-1].get("extra") or {}) if getattr(agent, "messages", None) else {}
print("\n[vf-mini] " + json.dumps({"exit_status": extra.get("exit_status"), "steps": getattr(agent, "n_calls", None)}), file=sys.stderr)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def _task_text(data: Any) -> str:
    prompt = data.prompt
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt or []):
        if getattr(message, "role", None) == "user":
            return content_text(message.content)
    return data.prompt_text


def _exit_status(stderr: str) -> dict[str, Any]:
    for line in reversed(stderr.splitlines()):
        if line.startswith("[vf-mini] "):
            try:
                found = json.loads(line[len("[vf-mini] "):])
            except ValueError:
                break
            return found if isinstance(found, dict) else {}
    return {"exit_status": None}


__all__ = ["MiniSWEAgentHarness", "MiniSWEAgentHarnessConfig"]
