"""``SandboxEnv``: a tool environment whose ``bash`` tool runs in a per-rollout local sandbox.

The classic API ran each rollout's commands in a remote container; here each rollout gets a
`SandboxSession` of the local sandbox (bubblewrap by default): a work dir that persists across the
rollout's tool calls, each command in a fresh isolated process tree. The session is created in
``setup_state`` and closed by a ``@vf.cleanup`` hook, which the rollout engine runs however the
rollout ends (answered, failed, timed out or cancelled); a ``@vf.teardown`` hook closes any left over.

Constructor keywords of the classic class are accepted. Those that describe a remote container
(``docker_image``, ``start_command``, ``gpu_count``, ``team_id``, ``advanced_configs``, ``labels``,
client pool sizes, retry settings) have no local meaning and are kept as attributes only; the
resource ones map onto sandbox limits: ``memory_gb`` -> address-space limit,
``timeout_per_command_seconds`` -> wall clock per command, ``disk_size_gb`` -> largest file
(capped at 1 GiB), ``environment_vars`` -> environment inside.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.envs.stateful_tool_env import StatefulToolEnv
from verifiers.sandbox import Limits, RunResult, Sandbox, SandboxError, SandboxSession
from verifiers.types import State
from verifiers.utils.decorators import cleanup, teardown

__all__ = ["SandboxEnv", "SandboxError", "format_command_output"]


def format_command_output(result: RunResult, timeout: float) -> str:
    """The tool message for one command: stdout, then ``stderr:`` and stderr, or ``(no output)``."""
    if result.kill_reason == "timeout":
        return f"Error: Command timed out after {timeout:g}s"
    stdout = result.stdout.strip()
    stderr = result.stderr.strip()
    parts = [stdout] if stdout else []
    if stderr:
        parts.append(f"stderr:\n{stderr}")
    if result.kill_reason == "output":
        parts.append("[output truncated: the command wrote more than the output limit and was stopped]")
    elif result.kill_reason == "memory":
        parts.append("[the command ran out of memory]")
    return "\n".join(parts) or "(no output)"


class SandboxEnv(StatefulToolEnv):
    """Tool use with a ``bash`` tool in a local sandbox, one isolated session per rollout."""

    def __init__(
        self,
        sandbox_name: str = "sandbox-env",
        docker_image: str = "python:3.11-slim",
        start_command: str = "tail -f /dev/null",
        cpu_cores: int = 1,
        memory_gb: int = 2,
        disk_size_gb: int = 5,
        gpu_count: int = 0,
        timeout_minutes: int = 60,
        timeout_per_command_seconds: int = 30,
        environment_vars: dict[str, str] | None = None,
        team_id: str | None = None,
        advanced_configs: Any = None,
        labels: list[str] | None = None,
        max_retries: int = 5,
        base_delay: float = 0.5,
        backoff_factor: float = 2.0,
        max_backoff_seconds: float = 30.0,
        jitter: float = 1e-3,
        stop_errors: Sequence[type[BaseException]] | None = None,
        sandbox_client_max_workers: int = 50,
        sandbox_client_max_connections: int = 100,
        sandbox_client_max_keepalive_connections: int = 50,
        *,
        sandbox: Sandbox | None = None,
        sandbox_backend: str | None = None,
        sandbox_limits: Limits | Mapping[str, Any] | None = None,
        python_packages: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            stop_errors=list(stop_errors) if stop_errors is not None else [SandboxError], **kwargs
        )
        self.sandbox_name = sandbox_name
        self.docker_image = docker_image
        self.start_command = start_command
        self.cpu_cores = cpu_cores
        self.memory_gb = memory_gb
        self.disk_size_gb = disk_size_gb
        self.gpu_count = gpu_count
        self.timeout_minutes = timeout_minutes
        self.timeout_per_command_seconds = timeout_per_command_seconds
        self.environment_vars = dict(environment_vars or {})
        self.team_id = team_id
        self.advanced_configs = advanced_configs
        self.labels = list(labels or [])
        self.max_retries = max_retries
        if sandbox is None:
            limits = Limits(
                memory_mb=int(memory_gb * 1024),
                file_size_mb=int(min(disk_size_gb * 1024, 1024)),
            ).merged(dict(sandbox_limits) if isinstance(sandbox_limits, Mapping) else sandbox_limits)
            sandbox = Sandbox(
                sandbox_backend,
                limits=limits,
                timeout=float(timeout_per_command_seconds),
                env=self.environment_vars,
                python_packages=python_packages,
            )
        self.sandbox = sandbox
        self.active_sandboxes: dict[str, SandboxSession] = {}
        self.add_tool(self.bash, args_to_skip=["sandbox_id", "sandbox_state", "working_dir"])

    # ----- the tool ------------------------------------------------------------------------------

    async def bash(
        self,
        command: str,
        sandbox_id: str,
        sandbox_state: dict[str, Any],
        working_dir: str | None = None,
    ) -> str:
        """Run a bash command in the sandbox and return its output.

        Args:
            command: The bash command to run (files in the working directory persist between calls).
        """
        session = self._session(sandbox_id)
        script = command if not working_dir else f"cd {_shell_quote(working_dir)} && {command}"
        started = time.perf_counter()
        result = await session.run(script, timeout=self.timeout_per_command_seconds)
        sandbox_state.setdefault("command_execution_times", []).append(time.perf_counter() - started)
        return format_command_output(result, self.timeout_per_command_seconds)

    # ----- per-rollout lifecycle -----------------------------------------------------------------

    def get_sandbox_files(self, state: State) -> dict[str, str | bytes]:
        """Files to place in a rollout's work dir before its first command. Override per task."""
        return {}

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Create the rollout's sandbox session (a work dir; processes start per command)."""
        started = time.perf_counter()
        session = self.sandbox.session(files=self.get_sandbox_files(state))
        await session.start()
        sandbox_id = session.workdir.name
        self.active_sandboxes[sandbox_id] = session
        state["sandbox_id"] = sandbox_id
        state["sandbox_state"] = {
            "ready": True,
            "ready_wait_time": time.perf_counter() - started,
            "command_execution_times": [],
        }
        result = await super().setup_state(state, **kwargs)
        return result if result is not None else state

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        updated = dict(tool_args)
        if tool_name == "bash":
            updated["sandbox_id"] = state["sandbox_id"]
            updated["sandbox_state"] = state["sandbox_state"]
            updated["working_dir"] = state.get("working_dir")
        return updated

    def get_session(self, state: State) -> SandboxSession:
        """The rollout's live session (e.g. for a reward function that inspects its files)."""
        return self._session(state["sandbox_id"])

    async def post_rollout(self, state: State) -> None:
        """Override to compute what scoring needs from the sandbox (files, a test run) before it is
        destroyed; store the results in ``state``."""

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        sandbox_id = state.get("sandbox_id")
        if sandbox_id is None:
            return
        try:
            if sandbox_id in self.active_sandboxes:
                await self.post_rollout(state)
        finally:
            session = self.active_sandboxes.pop(sandbox_id, None)
            if session is not None:
                await session.close()

    @teardown
    async def teardown_sandboxes(self) -> None:
        """Close sessions of rollouts that never reached their cleanup."""
        sessions = list(self.active_sandboxes.values())
        self.active_sandboxes.clear()
        for session in sessions:
            await session.close()

    def _session(self, sandbox_id: str) -> SandboxSession:
        session = self.active_sandboxes.get(sandbox_id)
        if session is None or session.closed:
            raise SandboxError(f"no live sandbox {sandbox_id!r} (it was closed or never created)")
        return session


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
