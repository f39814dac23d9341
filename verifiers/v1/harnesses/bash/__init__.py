"""``bash``: the ``null`` loop plus ``bash`` and ``edit`` tools, run in the role's runtime (``type =
"sandbox"``: every command in the rollout's bubblewrap sandbox)."""

from typing import Any

from pydantic import Field, FiniteFloat

from verifiers.v1.harness import Harness, HarnessConfig

MAX_OUTPUT = 16_000


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

        async def bash(command: str) -> str:
            """Run a bash command in the working directory; returns its exit code and output."""
            r = await runtime.run(command, timeout=timeout)
            out = (r.stdout + (("\n[stderr]\n" + r.stderr) if r.stderr else ""))[-MAX_OUTPUT:]
            status = "timed out" if r.timed_out else f"exit code {r.returncode}"
            return f"{status}\n{out}"

        async def edit(path: str, old: str, new: str) -> str:
            """Replace the one occurrence of `old` in the file at `path` with `new` (`old` empty: write the file)."""
            # a path the runtime refuses (outside a sandbox's work folder, a planted link) is the
            # model's error to read, like a missing file
            try:
                if not old:
                    await runtime.write(path, new)
                    return f"wrote {path}"
                text = (await runtime.read(path)).decode(errors="replace")
                n = text.count(old)
                if n != 1:
                    return f"error: `old` occurs {n} times in {path}; it must occur exactly once"
                await runtime.write(path, text.replace(old, new))
            except (OSError, ValueError) as exc:
                return f"error: {exc}"
            return f"edited {path}"

        return {"bash": bash, "edit": edit}


__all__ = ["BashHarness", "BashHarnessConfig"]
