"""``PythonEnv``: a tool environment with a persistent ``python`` REPL per rollout, sandboxed locally.

Variables, imports and functions persist across the rollout's ``python`` calls (one interpreter
kept alive in the rollout's sandbox session); the tool answers like an interactive interpreter:
printed output, ``stderr:`` output, the traceback of an error, and ``Out[n]: <repr>`` for a
trailing expression. A call that runs past ``timeout_per_command_seconds`` is stopped; its
interpreter is replaced (state lost, and the next answer says so).

``pip_install_packages`` cannot install anything (the sandbox has no network); the packages it
names are made importable from the host's installation instead (read-only), when installed there.
"""

from __future__ import annotations

import time
from typing import Any

from verifiers.envs.sandbox_env import SandboxEnv
from verifiers.sandbox import RunResult
from verifiers.types import State
from verifiers.utils.decorators import cleanup

__all__ = ["PythonEnv", "format_python_output"]


def format_python_output(result: RunResult, execution_count: int, timeout: float) -> str:
    """The tool message for one cell, shaped like an interactive interpreter's answer."""
    if result.kill_reason == "timeout":
        return (
            f"Error: execution timed out after {timeout:g}s; the Python session was restarted "
            "and earlier variables are gone"
        )
    parts: list[str] = []
    stdout = result.stdout.rstrip()
    if stdout:
        parts.append(stdout)
    stderr = result.stderr.rstrip()
    if stderr:
        # a failing cell's traceback is on stderr already; label only plain stderr output
        parts.append(stderr if result.exit_code != 0 and "Traceback" in stderr else f"stderr:\n{stderr}")
    if result.value is not None:
        parts.append(f"Out[{execution_count}]: {result.value}")
    if result.kill_reason == "output":
        parts.append("[output truncated at the output limit]")
    return "\n".join(parts) or "(no output)"


class PythonEnv(SandboxEnv):
    """Tool use with a persistent Python interpreter in a local sandbox, one per rollout."""

    def __init__(
        self,
        pip_install_packages: str = "numpy sympy scipy",
        max_startup_wait_seconds: int = 30,
        **kwargs: Any,
    ) -> None:
        packages = [p for p in pip_install_packages.split() if p]
        kwargs.setdefault("sandbox_name", "python-env")
        kwargs.setdefault("python_packages", packages)
        super().__init__(**kwargs)
        self.pip_install_packages = pip_install_packages
        self.max_startup_wait_seconds = max_startup_wait_seconds
        self.add_tool(self.python, args_to_skip=["sandbox_id", "sandbox_state", "python_state"])
        self.remove_tool(self.bash)  # the model sees only the python tool

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await super().setup_state(state, **kwargs)
        state["python_state"] = {"ready": False, "execution_count": 0, "ready_wait_time": 0.0}
        return state

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        updated = super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        if tool_name == "python":
            updated["sandbox_id"] = state["sandbox_id"]
            updated["sandbox_state"] = state["sandbox_state"]
            updated["python_state"] = state["python_state"]
        return updated

    async def python(
        self,
        code: str,
        sandbox_id: str,
        sandbox_state: dict[str, Any],
        python_state: dict[str, Any],
    ) -> str:
        """Execute Python code in a persistent interpreter and return its output.

        Args:
            code: Python source to run; variables persist between calls, and the value of a final
                expression is shown.
        """
        session = self._session(sandbox_id)
        started = time.perf_counter()
        result = await session.run_python(code, timeout=self.timeout_per_command_seconds)
        elapsed = time.perf_counter() - started
        if not python_state.get("ready"):
            python_state["ready"] = True
            python_state["ready_wait_time"] = elapsed
        sandbox_state.setdefault("command_execution_times", []).append(elapsed)
        python_state["execution_count"] = python_state.get("execution_count", 0) + 1
        return format_python_output(result, python_state["execution_count"], self.timeout_per_command_seconds)

    @cleanup
    async def cleanup_python_state(self, state: State) -> None:
        state.pop("python_state", None)
