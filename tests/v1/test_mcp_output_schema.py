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
