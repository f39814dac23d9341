"""Structured tool results are validated against the tool's output schema with a validator built
once per listed schema (``verifiers.v1.mcp.client._session_type``), and a hostile server is still
refused: a result that does not match, a missing structured content and an invalid schema are
each a ``ToolsetError``, on every call, not only the first. A real low-level MCP server over stdio
(it returns ``CallToolResult`` as given, so it can break its own schema)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from verifiers.v1.errors import ToolsetError
from verifiers.v1.mcp.client import Connection

pytest.importorskip("mcp", reason="the toolset tests need the mcp package (verifiers[compat])")

SERVER = textwrap.dedent(
    '''
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    SUM = {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
    server = Server("schema-probe")

    @server.list_tools()
    async def list_tools():
        return [
            types.Tool(name="good", inputSchema={"type": "object"}, outputSchema=SUM),
            types.Tool(name="liar", inputSchema={"type": "object"}, outputSchema=SUM),
            types.Tool(name="silent", inputSchema={"type": "object"}, outputSchema=SUM),
            types.Tool(name="broken", inputSchema={"type": "object"}, outputSchema={"type": 12}),
        ]

    @server.call_tool()
    async def call_tool(name, arguments):
        text = [types.TextContent(type="text", text="4")]
        if name == "good":
            return types.CallToolResult(content=text, structuredContent={"result": 4})
        if name == "liar":
            return types.CallToolResult(content=text, structuredContent={"result": "four"})
        if name == "silent":
            return types.CallToolResult(content=text)
        return types.CallToolResult(content=text, structuredContent={"result": 4})

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    '''
)


async def test_results_are_checked_against_the_schema_on_every_call(tmp_path) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    script = tmp_path / "schema_server.py"
    script.write_text(SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(tmp_path))
    conn = await Connection("probe", lambda: stdio_client(params)).start(timeout=60)
    try:
        assert sorted(t.name for t in conn.tools) == ["broken", "good", "liar", "silent"]
        for _ in range(3):  # the cached validator accepts a matching result each time
            content, failed = await conn.call("good", {}, state=None, timeout=30)
            assert (content, failed) == ("4", False)
        for _ in range(2):  # ... and refuses a mismatching one each time, not only while uncached
            with pytest.raises(ToolsetError, match="Invalid structured content returned by tool liar"):
                await conn.call("liar", {}, state=None, timeout=30)
        with pytest.raises(ToolsetError, match="did not return structured content"):
            await conn.call("silent", {}, state=None, timeout=30)
        for _ in range(2):  # an invalid schema is never cached as checked
            with pytest.raises(ToolsetError, match="Invalid schema for tool broken"):
                await conn.call("broken", {}, state=None, timeout=30)
        # the server survived every refusal: a good call still answers
        assert await conn.call("good", {}, state=None, timeout=30) == ("4", False)
        validators = conn._session.__dict__["_vf_validators"]
        assert sorted(validators) == ["good", "liar"]  # one checked schema per tool, reused
    finally:
        await conn.close()


def test_our_server_checks_structured_output_as_the_sdk_does_with_one_schema_check(monkeypatch) -> None:
    """Our toolset server (``toolset._server_for``) makes the SDK's low-level server's result of a
    FastMCP tool's output itself: the same normalization and the same error results, with the
    schema checked against the metaschema once per tool instead of on every call."""
    import jsonschema
    from jsonschema import validators
    from mcp.types import CallToolResult, TextContent

    import verifiers.v1 as vf
    from verifiers.v1.mcp.toolset import _server_for

    class Calc(vf.Toolset[vf.SharedToolsetConfig, vf.State]):
        @vf.tool
        def add(self, a: int, b: int) -> int:
            """Add."""
            return a + b

    server = _server_for(Calc(vf.SharedToolsetConfig()))
    Calc(vf.SharedToolsetConfig()).register(server)
    schema = server._tool_manager.get_tool("add").output_schema
    assert schema is not None
    with pytest.raises(jsonschema.ValidationError) as sdk:  # what the SDK's check says of it
        jsonschema.validate(instance={"result": "four"}, schema=schema)
    made = []
    real = validators.validator_for
    monkeypatch.setattr(validators, "validator_for", lambda s, *a, **k: made.append(s) or real(s, *a, **k))
    text = [TextContent(type="text", text="4")]
    for _ in range(3):
        ok = server._checked("add", (text, {"result": 4}))
        assert isinstance(ok, CallToolResult) and not ok.isError and ok.structuredContent == {"result": 4}
    for _ in range(2):  # a structured result that breaks the schema: the SDK's error result, each time
        bad = server._checked("add", (text, {"result": "four"}))
        assert bad.isError and bad.content[0].text == f"Output validation error: {sdk.value.message}"
    missing = server._checked("add", text)  # content only, though the tool has an output schema
    assert missing.isError
    assert missing.content[0].text == "Output validation error: outputSchema defined but no structured output returned"
    assert [s for s in made if s is schema] == [schema]  # five checks, one validator built
    as_dict = server._checked("add", {"result": 5})  # a dict: structured, its JSON as the text
    assert as_dict.structuredContent == {"result": 5} and as_dict.content[0].text == '{\n  "result": 5\n}'
    built = CallToolResult(content=text, structuredContent={"result": "anything"})
    assert server._checked("add", built) is built  # a built result passes through, as in the SDK
