"""Tool JSON schemas from type hints and Google-style docstrings."""

from __future__ import annotations

from typing import Literal

import verifiers as vf
from verifiers.utils.tool_utils import tool_schema


def search(query: str, limit: int = 5, tags: list[str] | None = None, mode: Literal["fast", "exact"] = "fast",
           weight: float = 1.0, strict: bool = False, extra: dict[str, int] | None = None) -> str:
    """Search the corpus.

    Longer explanation that is still part of the description.

    Args:
        query: What to look for.
        limit (int): How many results
            to return at most.
        tags: Only documents with these tags.
        mode: Matching mode.

    Returns:
        The matching titles.
    """
    return query


def test_schema_from_hints_and_docstring() -> None:
    schema = tool_schema(search)
    assert schema["name"] == "search"
    assert schema["description"].startswith("Search the corpus.") and "Returns" not in schema["description"]
    props = schema["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "description": "How many results to return at most.", "default": 5}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "Only documents with these tags."}
    assert props["mode"]["enum"] == ["fast", "exact"] and props["mode"]["type"] == "string"
    assert props["weight"]["type"] == "number" and props["strict"]["type"] == "boolean"
    assert props["extra"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert schema["parameters"]["required"] == ["query"]


def test_oai_and_new_shapes_and_skipped_args() -> None:
    oai = vf.convert_func_to_oai_tool(search)
    assert oai["type"] == "function" and oai["function"]["name"] == "search"
    hidden = tool_schema(search, skip=["tags", "extra"])
    assert "tags" not in hidden["parameters"]["properties"]
    env = vf.ToolEnv(tools=[search], dataset=[{"question": "q"}])
    assert env.oai_tools[0] == oai
    assert env.tool_defs[0] == tool_schema(search)
