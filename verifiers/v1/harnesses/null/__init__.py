"""``null``: a chat loop in this process; it still offers the task's ``@vf.tool`` tools."""

from verifiers.v1.harness import Harness, HarnessConfig


class NullHarnessConfig(HarnessConfig):
    id: str = "null"


class NullHarness(Harness[NullHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    SUPPORTS_TOOL_INTERCEPTION = True  # the loop asks the task's request hooks before each tool call
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    IN_PROCESS = True

    def extra_tools(self, runtime: object) -> dict:
        return {}


__all__ = ["NullHarness", "NullHarnessConfig"]
