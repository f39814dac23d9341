"""``null``: a chat loop in this process; it still offers the task's ``@vf.tool`` tools."""

from typing import Any

from verifiers.v1.harness import Harness, HarnessConfig
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program


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

    async def setup(self, runtime: Any) -> None:
        await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, self.config.resolved_env)

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str, mcp_urls: dict[str, str],
                     data: Any, tool_interception_url: str | None = None) -> Any:  # fmt: skip
        """The chat program (``harnesses.utils.launch``): what a subclass's ``launch`` reaches
        with ``super().launch(...)`` after changing ``data``."""
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, runtime, endpoint, secret,
                                         mcp_urls, system_prompt, prompt)  # fmt: skip

    launch.in_process_launch = True  # type: ignore[attr-defined]


__all__ = ["NullHarness", "NullHarnessConfig"]
