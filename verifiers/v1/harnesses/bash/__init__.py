"""``bash``: the ``null`` loop plus ``bash`` and ``edit`` tools, run in the role's runtime (``type =
"sandbox"``: every command in the rollout's bubblewrap sandbox)."""

from typing import Any

from pydantic import Field, FiniteFloat

from verifiers.v1.harness import Harness, HarnessConfig


class BashHarnessConfig(HarnessConfig):
    id: str = "bash"
    command_timeout: FiniteFloat = Field(120.0, gt=0)
    """Seconds one ``bash`` command may run (then it is killed)."""


class BashHarness(Harness[BashHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    SUPPORTS_TOOL_INTERCEPTION = True  # the loop asks the task's request hooks before each tool call
    EXECUTES_CODE = True
    NEEDS_CONTAINER = False
    IN_PROCESS = True

    def extra_tools(self, runtime: Any) -> dict:
        timeout = self.config.command_timeout

        # the tools as the original's bash harness offers them (names and parameters): a model that
        # learned them there calls them the same way here
        async def bash(command: str) -> str:
            """Run a bash command in the working directory; returns its output (stdout, then stderr)."""
            r = await runtime.run(command, timeout=timeout)
            out = r.stdout + r.stderr
            return f"error: the command did not finish within {timeout:g} s\n{out}" if r.timed_out else out

        async def edit(path: str, old_str: str, new_str: str) -> str:
            """Replace the one occurrence of `old_str` in the file at `path` with `new_str`."""
            if not old_str:
                return "error: `old_str` must not be empty (it would match everywhere)"
            # a path the runtime refuses (outside a sandbox's work folder, a planted link) is the
            # model's error to read, like a missing file
            try:
                text = (await runtime.read(path)).decode(errors="replace")
                n = text.count(old_str)
                if n != 1:
                    return f"error: `old_str` occurs {n} times in {path}; it must occur exactly once"
                await runtime.write(path, text.replace(old_str, new_str, 1))
            except (OSError, ValueError) as exc:
                return f"error: {exc}"
            return f"edited {path}"

        return {"bash": bash, "edit": edit}


__all__ = ["BashHarness", "BashHarnessConfig"]
