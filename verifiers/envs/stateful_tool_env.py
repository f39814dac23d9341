"""``StatefulToolEnv``: tools that need per-rollout state the model must not see (a sandbox id,
a session handle)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verifiers.envs.tool_env import ToolEnv
from verifiers.types import State

__all__ = ["StatefulToolEnv"]


class StatefulToolEnv(ToolEnv):
    """Register tools with ``add_tool(func, args_to_skip=[...])``: the skipped arguments are left out
    of the schema the model sees, and :meth:`update_tool_args` fills them in before each call.

    ``update_tool_args`` is called with keywords (``tool_name``, ``tool_args``, ``messages``,
    ``state``), so subclasses written with either argument order work; it may be sync or async.
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(tools=tools, max_turns=max_turns, **kwargs)

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: State, **kwargs: Any) -> dict[str, Any]:
        """Return the arguments to call ``tool_name`` with (inject hidden ones here)."""
        return tool_args
