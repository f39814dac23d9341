"""JSON schemas for tools, built from a Python function's type hints and Google-style docstring.

``tool_schema(f)`` gives the NEW shape ``{"name", "description", "parameters", "strict"}``
(``tool_defs``; ``convert_func_to_tool_def(f)`` returns it as a ``vf.Tool``);
``convert_func_to_oai_tool(f)`` wraps it in the OpenAI shape ``{"type": "function", "function": ...}``
(``oai_tools``, OLD). The schema is the one the classic library sends (both generations build it
the same way): the parameters as a pydantic model named ``<function>_args`` (so each property has a
``title``, and keys come in pydantic's order), made *strict* as OpenAI's structured outputs want it:
every property is listed in ``required`` (a default stays in the schema), every object is closed
(``additionalProperties: false``), a ``None`` default is left out. A parameter's description is its
docstring entry, continuation lines kept as lines. A parameter whose type cannot be made strict (an
open mapping such as ``dict[str, float]``, which the classic library refuses) or that pydantic cannot
describe keeps a plain schema from :func:`type_to_schema`, and the tool is sent without ``strict``.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "VALID_TOOL_CONTENT_PART_TYPES",
    "convert_func_to_oai_tool",
    "convert_func_to_tool_def",
    "is_valid_tool_content_parts",
    "parse_docstring",
    "tool_schema",
    "type_to_schema",
]

# a Google-style section or admonition title: an unindented ``Word words:`` line (any case), with
# an optional title after the colon
_HEADER = re.compile(r"^(\w[\s\w-]*):(\s+\S.*)?\s*$", re.IGNORECASE)
_PARAMETER_SECTIONS = frozenset({"args", "arguments", "params", "parameters"})
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def _blank(line: str) -> bool:
    return not line.strip()


def _section_break(lines: list[str], i: int) -> bool:
    """Whether ``lines[i]`` opens a section or admonition, by the rules of the Google-docstring
    reader the classic library's tool schemas go through (griffe): a title line with an indented
    block right below it (or below one more line), a blank line above it, and no blank line
    between the title and a block that starts two lines down."""
    line = lines[i]
    if ":" not in line or not _HEADER.match(line):
        return False
    below = i + 1 < len(lines) and not _blank(lines[i + 1]) and lines[i + 1].startswith(" ")
    two_below = i + 2 < len(lines) and not _blank(lines[i + 2]) and lines[i + 2].startswith(" ")
    if not (below or two_below):
        return False
    blank_below = i + 1 < len(lines) and _blank(lines[i + 1])
    return (i == 0 or _blank(lines[i - 1])) and not (two_below and blank_below)


def _block(lines: list[str], start: int) -> tuple[list[str], int]:
    """The indented block from ``start`` (blank lines first skipped) and the index after it."""
    i = start
    while i < len(lines) and _blank(lines[i]):
        i += 1
    if i >= len(lines) or not lines[i].startswith(" "):
        return [], start
    indent = len(lines[i]) - len(lines[i].lstrip())
    block = []
    while i < len(lines) and (lines[i].startswith(" " * indent) or _blank(lines[i])):
        block.append(lines[i])
        i += 1
    return block, i


def _parameter_docs(block: list[str], args: dict[str, str]) -> None:
    current: str | None = None
    arg_indent: int | None = None
    for line in block:
        if _blank(line):
            continue
        indent = len(line) - len(line.lstrip())
        am = _ARG_LINE.match(line)
        if am and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = am.group(1)
            args[current] = am.group(3).strip()
        elif current is not None:
            # a continuation line stays a line, less the entry's indent plus one level (4)
            cut = min(indent, (arg_indent or 0) + 4)
            args[current] = (args[current] + "\n" + line[cut:].rstrip()).strip()


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description}), as the classic
    library's tool schemas read one: the description is the first text block (text before any
    section or admonition, or between them), the arguments come from the ``Args:`` sections (any
    spelling: ``Arguments``, ``Params``, ``Parameters``, in any case). A parameter section right
    below a text line still counts, as the schema builder puts a blank line above it first."""
    if not doc:
        return "", {}
    raw = inspect.cleandoc(doc).splitlines()
    lines: list[str] = []
    for i, line in enumerate(raw):
        if (
            i > 0 and lines and not _blank(lines[-1]) and line.rstrip(": \t").lower() in _PARAMETER_SECTIONS
            and re.match(r"^\w+:\s*$", line) and i + 1 < len(raw) and raw[i + 1].startswith((" ", "\t"))
        ):  # fmt: skip
            lines.append("")
        lines.append(line)
    texts: list[str] = []
    current: list[str] = []
    args: dict[str, str] = {}
    in_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = line.lstrip(" ").startswith("```")
        if in_code or fence:
            in_code = in_code != fence
            current.append(line)
            i += 1
            continue
        if not _section_break(lines, i):
            current.append(line)
            i += 1
            continue
        block, after = _block(lines, i + 1)
        if not block:
            current.append(line)
            i += 1
            continue
        if any(current):
            texts.append("\n".join(current).rstrip("\n"))
        current = []
        if _HEADER.match(line).group(1).lower() in _PARAMETER_SECTIONS:  # type: ignore[union-attr]
            _parameter_docs(block, args)
        i = after
    if any(current):
        texts.append("\n".join(current).rstrip("\n"))
    return (texts[0].strip() if texts else ""), args


def type_to_schema(tp: Any) -> dict[str, Any]:
    """A JSON schema for a Python type annotation (unknown types become an unconstrained schema)."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = type_to_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return type_to_schema(non_null[0])
        return {"anyOf": [type_to_schema(a) for a in args]}
    if origin is typing.Literal:
        values = list(args)
        schema: dict[str, Any] = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1:
            schema.update(_PRIMITIVES.get(kinds.pop(), {}))
        return schema
    if origin is tuple or tp is tuple:
        schema = {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            schema["items"] = type_to_schema(args[0])
        elif args:
            schema["prefixItems"] = [type_to_schema(a) for a in args]
        return schema
    if origin in (list, set, frozenset, Iterable) or tp in (list, set, frozenset):
        schema = {"type": "array"}
        if args:
            schema["items"] = type_to_schema(args[0])
        return schema
    if origin is dict or tp is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_to_schema(args[1])
        return schema
    if isinstance(tp, type):
        for base, schema in _PRIMITIVES.items():
            if issubclass(tp, base):
                return dict(schema)
    return {}


_PRIMITIVES: dict[type, dict[str, Any]] = {
    bool: {"type": "boolean"},  # before int: bool is an int subclass
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
}


def tool_schema(func: Callable[..., Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """``{"name", "description", "parameters", "strict"}`` for ``func``; arguments in ``skip`` are
    hidden (left out of the model, as the classic ``add_tool(args_to_skip=...)`` leaves them)."""
    skipped = set(skip)
    name = getattr(func, "__name__", None) or type(func).__name__
    description, arg_docs = parse_docstring(inspect.getdoc(func))
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:
        hints = getattr(func, "__annotations__", {}) or {}
    params = [
        (pname, param) for pname, param in inspect.signature(func).parameters.items()
        if pname not in skipped and pname not in ("self", "cls") and param.kind is not param.VAR_KEYWORD
    ]  # fmt: skip
    parameters = _model_schema(name, params, hints, arg_docs)
    if parameters is not None and _strict(parameters):
        return {"name": name, "description": description, "parameters": parameters, "strict": True}
    return {"name": name, "description": description, "parameters": _plain_schema(params, hints, arg_docs)}


def _annotation_description(tp: Any) -> str | None:
    """A description given as a string in ``Annotated[T, "..."]``."""
    if typing.get_origin(tp) is typing.Annotated:
        return next((x for x in typing.get_args(tp)[1:] if isinstance(x, str)), None)
    return None


def _model_schema(name: str, params: list[tuple[str, inspect.Parameter]], hints: dict[str, Any], docs: dict[str, str]) -> dict[str, Any] | None:
    """The parameters' JSON schema as pydantic writes it for a model ``<name>_args`` of them (None:
    pydantic cannot describe one of the types)."""
    import pydantic

    fields: dict[str, Any] = {}
    for pname, param in params:
        tp = hints.get(pname, param.annotation)
        if tp is inspect.Parameter.empty:
            tp = Any
        desc = docs.get(pname) or _annotation_description(tp)
        if param.kind is param.VAR_POSITIONAL:  # *args: each positional argument's type
            fields[pname] = (list[tp], pydantic.Field(default_factory=list, description=desc))  # type: ignore[valid-type]
        elif param.default is param.empty:
            fields[pname] = (tp, pydantic.Field(..., description=desc))
        else:
            fields[pname] = (tp, pydantic.Field(default=param.default, description=desc))
    try:
        model = pydantic.create_model(f"{name}_args", **fields)
        return model.model_json_schema()
    except Exception:  # a type pydantic cannot describe (an arbitrary class, a forward reference ...)
        return None


def _strict(schema: Any, root: dict[str, Any] | None = None) -> bool:
    """Make ``schema`` strict in place (every object closed, every property required, ``None``
    defaults left out, a ``$ref`` with other keys inlined); False when it cannot be (an open
    object: ``additionalProperties`` other than false)."""
    if not isinstance(schema, dict):
        return True
    root = schema if root is None else root
    ok = all(_strict(d, root) for d in (schema.get("$defs") or {}).values())
    if schema.get("type") is None and isinstance(schema.get("properties"), dict):
        schema["type"] = "object"
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        if schema.setdefault("additionalProperties", False) is not False:
            return False
    elif schema.get("additionalProperties", False) is not False:
        return False
    props = schema.get("properties")
    if isinstance(props, dict):
        schema["required"] = list(props)
        ok = all([_strict(p, root) for p in props.values()]) and ok
    if isinstance(schema.get("items"), dict):
        ok = _strict(schema["items"], root) and ok
    for key in ("anyOf", "allOf"):
        if isinstance(schema.get(key), list):
            ok = all([_strict(v, root) for v in schema[key]]) and ok
    if isinstance(schema.get("oneOf"), list):
        variants = schema.pop("oneOf")
        ok = all([_strict(v, root) for v in variants]) and ok
        schema["anyOf"] = [*(schema.get("anyOf") or []), *variants]
    if "default" in schema and schema["default"] is None:
        del schema["default"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and len(schema) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            del schema["$ref"]
            schema.update({**target, **schema})  # the schema's own keys keep their place, and win
            ok = _strict(schema, root) and ok
    return ok


def _plain_schema(params: list[tuple[str, inspect.Parameter]], hints: dict[str, Any], docs: dict[str, str]) -> dict[str, Any]:
    """A non-strict schema from :func:`type_to_schema`: a parameter without a default is required."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in params:
        schema = type_to_schema(hints.get(pname, param.annotation))
        if param.kind is param.VAR_POSITIONAL:
            schema = {"type": "array", "items": schema}
        if docs.get(pname):
            schema.setdefault("description", docs[pname])
        if param.default is param.empty and param.kind is not param.VAR_POSITIONAL:
            required.append(pname)
        elif param.default is not param.empty and param.default is not None and _json_safe(param.default):
            schema["default"] = param.default
        properties[pname] = schema
    return {"type": "object", "properties": properties, "required": required}


def _json_safe(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | list | dict)


def convert_func_to_oai_tool(func: Callable[..., Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The OpenAI tool dict ``{"type": "function", "function": {...}}`` for ``func``."""
    return {"type": "function", "function": tool_schema(func, skip)}


def convert_func_to_tool_def(func: Callable[..., Any], skip: Iterable[str] = ()) -> Any:
    """The provider-agnostic definition of ``func`` (a ``vf.Tool``: ``name``, ``description``, ``parameters``).

    >>> def add(a: int, b: int = 1) -> int:
    ...     \"\"\"Add two numbers.\"\"\"
    ...     return a + b
    >>> t = convert_func_to_tool_def(add)
    >>> (t.name, t.description, t.parameters["required"], t.strict)
    ('add', 'Add two numbers.', ['a', 'b'], True)
    """
    from verifiers.types import Tool

    return Tool(tool_schema(func, skip))


# Content-part types a tool may return instead of a string (a list of OpenAI content parts).
VALID_TOOL_CONTENT_PART_TYPES = frozenset({"text", "image_url"})


def is_valid_tool_content_parts(value: Any) -> bool:
    """True for a list of content-part dicts whose ``type`` is ``text`` or ``image_url``.

    >>> is_valid_tool_content_parts([{"type": "text", "text": "hi"}])
    True
    >>> is_valid_tool_content_parts("hi"), is_valid_tool_content_parts([{"type": "audio"}])
    (False, False)
    """
    return isinstance(value, list) and all(
        isinstance(part, dict) and part.get("type") in VALID_TOOL_CONTENT_PART_TYPES for part in value
    )

