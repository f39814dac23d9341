"""The v1 taskset of ``benchmarks/rollouts.py``: run unchanged by our ``verifiers.v1`` and by the
original ``verifiers==0.4.0`` (each in its own process, this folder on ``sys.path``).

One task shape, ``n`` copies: "What is 2+2?" with a system prompt, rewarded 1.0 when the last
reply contains "4". With ``mcp = true`` the taskset also serves one MCP toolset to every rollout
(``vbench_mcp_tools.Calc``, a taskset-scoped ``SharedToolsetConfig`` server: one server for the
run, as a trainer's env worker keeps it), so a rollout is two model calls around one MCP tool call.
This module uses only the public ``verifiers.v1`` names both libraries share.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

QUESTION = "What is 2+2?"
SYSTEM_PROMPT = "Answer briefly."


class AddTask(vf.Task):
    @vf.reward(weight=1.0)
    async def correct(self, trace) -> float:
        """1.0 when the answer names 4 and every tool result (the MCP row's ``calc_add``) is 4."""
        tools_ok = all(_text(m.content) == "4" for m in trace.tool_messages)
        return 1.0 if tools_ok and "4" in (trace.last_reply or "") else 0.0


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(
            str(getattr(p, "text", None) or (p.get("text") if isinstance(p, dict) else "") or "")
            for p in content
        ).strip()
    return str(content or "").strip()


class BenchTasksetConfig(vf.TasksetConfig):
    n: int = 100
    """How many (identical) tasks the taskset holds."""
    mcp: bool = False
    """Serve the ``calc`` MCP toolset (``calc_add``) to every rollout."""


class BenchTaskset(vf.Taskset[AddTask, BenchTasksetConfig]):
    def load(self):
        for _ in range(self.config.n):
            yield AddTask(vf.TaskData(prompt=QUESTION, system_prompt=SYSTEM_PROMPT))

    @classmethod
    def toolsets(cls, config: Any) -> list:
        if not getattr(config, "mcp", False):
            return []
        from vbench_mcp_tools import Calc, calc_config

        return [Calc(calc_config())]


__all__ = ["BenchTaskset"]
