"""Tool JSON schemas from type hints and Google-style docstrings, as the classic library sends them."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel

import verifiers as vf
from verifiers.utils.tool_utils import tool_schema


def search(query: str, limit: int = 5, tags: list[str] | None = None, mode: Literal["fast", "exact"] = "fast",
           weight: float = 1.0, strict: bool = False) -> str:
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


class Point(BaseModel):
    x: int
    y: int = 0


def place(points: list[Point], where: Point | None = None) -> str:
    """Place points."""
    return ""


def tally(counts: dict[str, int], label: str = "all") -> str:
    """Tally counts (an open mapping: no strict schema can hold it)."""
    return label


def test_schema_is_the_classic_librarys_strict_pydantic_schema() -> None:
    schema = tool_schema(search)
    assert schema["name"] == "search" and schema["strict"] is True
    assert schema["description"] == "Search the corpus.\n\nLonger explanation that is still part of the description."
    params = schema["parameters"]
    # byte for byte what verifiers 0.3.0 (through openai-agents' function_schema) sends for this function
    assert json.dumps(params) == json.dumps({
        "properties": {
            "query": {"description": "What to look for.", "title": "Query", "type": "string"},
            "limit": {"default": 5, "description": "How many results\nto return at most.", "title": "Limit", "type": "integer"},
            "tags": {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
                     "description": "Only documents with these tags.", "title": "Tags"},
            "mode": {"default": "fast", "description": "Matching mode.", "enum": ["fast", "exact"], "title": "Mode", "type": "string"},
            "weight": {"default": 1.0, "title": "Weight", "type": "number"},
            "strict": {"default": False, "title": "Strict", "type": "boolean"},
        },
        "required": ["query", "limit", "tags", "mode", "weight", "strict"],
        "title": "search_args", "type": "object", "additionalProperties": False,
    })  # fmt: skip


def test_nested_models_are_closed_and_an_open_mapping_keeps_a_plain_schema() -> None:
    params = tool_schema(place)["parameters"]
    assert params["$defs"]["Point"]["additionalProperties"] is False and params["$defs"]["Point"]["required"] == ["x", "y"]
    assert params["required"] == ["points", "where"] and "default" not in params["properties"]["where"]  # a None default is left out
    plain = tool_schema(tally)
    assert "strict" not in plain and plain["parameters"] == {
        "type": "object",
        "properties": {"counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                       "label": {"type": "string", "default": "all"}},
        "required": ["counts"],
    }  # fmt: skip


def test_oai_and_new_shapes_and_skipped_args() -> None:
    oai = vf.convert_func_to_oai_tool(search)
    assert oai["type"] == "function" and oai["function"]["name"] == "search" and oai["function"]["strict"] is True
    hidden = tool_schema(search, skip=["tags", "strict"])
    assert "tags" not in hidden["parameters"]["properties"] and "tags" not in hidden["parameters"]["required"]
    env = vf.ToolEnv(tools=[search], dataset=[{"question": "q"}])
    assert env.oai_tools[0] == oai
    assert env.tool_defs[0] == tool_schema(search)


def test_docstring_sections_are_read_as_the_classic_library_reads_them() -> None:
    """Section titles in any case end the description, as do other sections and admonitions
    (``Keyword Args:``, ``Note:``, ``example:``); only parameter sections describe arguments; a
    parameter section right below the summary still counts; a title with no indented block below
    is text. Checked against verifiers 0.3.0 (its schema builder) on these and 300 generated
    docstrings."""

    def run(code: str, n: int = 3) -> str:
        """Execute python code.
        args:
            code: the complete code
            n: how many

        returns:
            text
        """
        return code

    def keyed(x: int, y: str = "a") -> str:
        """Summary line
        continues here.

        Keyword Args:
            y: why

        ARGS:
            x: ex

        Trailing text.
        """
        return ""

    def notes(x: int) -> str:
        """Double x.
        Note: not a section without a block below

        Example:
            keyed(2)
        """
        return ""

    tools = {t["name"]: t for t in map(tool_schema, (run, keyed, notes))}
    assert tools["run"]["description"] == "Execute python code."
    assert {k: v.get("description") for k, v in tools["run"]["parameters"]["properties"].items()} == {
        "code": "the complete code", "n": "how many",
    }
    assert tools["keyed"]["description"] == "Summary line\ncontinues here."
    assert {k: v.get("description") for k, v in tools["keyed"]["parameters"]["properties"].items()} == {"x": "ex", "y": None}
    assert tools["notes"]["description"] == "Double x.\nNote: not a section without a block below"
