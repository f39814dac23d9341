"""``ToolRubric``: metrics that count the model's tool calls (weight 0: logged, not rewarded)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verifiers.rubrics.rubric import Rubric
from verifiers.utils.tool_utils import convert_func_to_oai_tool

__all__ = ["ToolRubric"]


def _calls(completion: Any) -> list[Any]:
    if not isinstance(completion, list):
        return []
    out: list[Any] = []
    for msg in completion:
        if isinstance(msg, Mapping) and msg.get("role") == "assistant":
            out.extend(msg.get("tool_calls") or [])
    return out


def _call_name(call: Any) -> str | None:
    fn = call.get("function") if isinstance(call, Mapping) else None
    return fn.get("name") if isinstance(fn, Mapping) else getattr(call, "name", None)


class ToolRubric(Rubric):
    """Metrics ``total_tool_calls`` and ``<tool>_calls`` for each of ``tools``.

    >>> ToolRubric(tools=[len]).get_reward_func_names()
    ['total_tool_calls', 'len_calls']
    """

    _refuses_unknown_keywords = True  # as 0.1.7's did (no **kwargs; 0.3.0 has no ToolRubric)

    def __init__(self, tools: Sequence[Callable[..., Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tools = list(tools or [])
        self.oai_tools = [convert_func_to_oai_tool(t) for t in self.tools]
        self.tool_names = [t.__name__ for t in self.tools]
        self.add_metric(self.total_tool_calls)
        for name in self.tool_names:
            self.add_metric(self.get_tool_call_count_func(name))

    async def total_tool_calls(self, completion: Any) -> float:
        """How many tool calls the assistant made in ``completion``."""
        return float(len(_calls(completion)))

    def get_tool_call_count_func(self, tool_name: str) -> Callable[..., Any]:
        """A metric counting the calls to ``tool_name``, named ``<tool_name>_calls``."""

        async def count(completion: Any) -> float:
            return float(sum(1 for call in _calls(completion) if _call_name(call) == tool_name))

        count.__name__ = f"{tool_name}_calls"
        return count
