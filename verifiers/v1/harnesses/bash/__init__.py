"""``bash``: the ``null`` loop plus ``bash`` and ``edit`` tools, run in the role's runtime (``type =
"sandbox"``: every command in the rollout's bubblewrap sandbox)."""

from typing import Any

from pydantic import Field, FiniteFloat

from verifiers.v1.compaction import CompactionConfig
from verifiers.v1.harness import Harness, HarnessConfig
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program
from verifiers.v1.harnesses.utils.tools import bash_tools

SYSTEM_PROMPT = "You are a coding agent. Run shell commands with the bash tool."
EDIT_PROMPT = "Change a file with the edit tool, which replaces one exact occurrence of a string."


class BashHarnessConfig(HarnessConfig):
    id: str = "bash"
    command_timeout: FiniteFloat = Field(120.0, gt=0)
    """Seconds one ``bash`` command may run (then it is killed)."""
    edit: bool = True
    """Offer the ``edit`` tool beside ``bash``."""
    search: bool = False
    """The original's web ``search`` tool (serper.dev): not offered here; ``true`` is refused at start."""
    compaction: CompactionConfig | None = CompactionConfig()
    """Context compaction (``verifiers.v1.compaction``): on by default, ``"None"`` turns it off."""


class BashHarness(Harness[BashHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    SUPPORTS_TOOL_INTERCEPTION = True  # the loop asks the task's request hooks before each tool call
    EXECUTES_CODE = True
    NEEDS_CONTAINER = False
    IN_PROCESS = True

    def refusal(self, runtime_type: str) -> str | None:
        if self.config.search:
            return "harness 'bash': search = true asks for the serper.dev web search tool, which this version does not offer; remove it"
        return super().refusal(runtime_type)

    def system_prompt(self, task_prompt: str | None) -> str | None:
        """The harness's own frame (the tools it offers), then the task's system prompt."""
        frame = f"{SYSTEM_PROMPT} {EDIT_PROMPT}" if self.config.edit else SYSTEM_PROMPT
        return f"{frame}\n\n{task_prompt}" if task_prompt else frame

    def extra_tools(self, runtime: Any) -> dict:
        return bash_tools(runtime, self.config.command_timeout, edit=self.config.edit, env=self.config.resolved_env)

    async def setup(self, runtime: Any) -> None:
        await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, self.config.resolved_env)

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str, mcp_urls: dict[str, str],
                     data: Any, tool_interception_url: str | None = None) -> Any:  # fmt: skip
        """The chat program with the ``bash`` (and ``edit``) tools and compaction as configured,
        under the harness's frame: what a subclass's ``launch`` reaches with ``super().launch``."""
        system_prompt, prompt = self.resolve_prompt(data)
        args = ["--bash", *(["--edit"] if self.config.edit else [])]
        if self.config.compaction is not None:
            args.append("--compaction")
            if self.config.compaction.summarize_at_tokens is not None:
                args.append(f"--summarize-at-tokens={self.config.compaction.summarize_at_tokens}")
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, runtime, endpoint, secret,
                                         mcp_urls, self.system_prompt(system_prompt), prompt, extra_args=args)  # fmt: skip

    launch.in_process_launch = True  # type: ignore[attr-defined]


__all__ = ["BashHarness", "BashHarnessConfig", "CompactionConfig", "bash_tools"]
