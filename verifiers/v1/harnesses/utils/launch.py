"""The shared chat program of the ``null`` and ``bash`` harnesses, for harness plugins built on it
(the original's ``verifiers.v1.harnesses.utils.launch``).

A plugin does as the original's built-ins do::

    async def setup(self, runtime):
        await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, self.config.resolved_env)

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, runtime, endpoint,
                                         secret, mcp_urls, f"Be polite. {system_prompt or ''}", prompt)

Here the chat program is the in-process loop (:func:`verifiers.v1.harness.chat_loop`): the same
model calls through the same interception function, tools and policy as a program reaching the
proxy would make, without a process or an HTTP hop per turn. ``CHAT_PROGRAM_SOURCE`` is its marker:
preparing it installs nothing, and launching it runs that loop with the plugin's system prompt and
prompt, the task's tools, and the program's flags the original's built-ins pass (``--bash``,
``--edit``, ``--compaction``, ``--summarize-at-tokens=N``). Any other source is a real PEP 723
program: prepared in the runtime and run there with the original's arguments, its model traffic
through the proxy at ``endpoint``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from verifiers.v1.runtimes import IN_PROCESS_MARK, ProgramResult, is_in_process_program

CHAT_PROGRAM_SOURCE = (
    '# /// script\n# requires-python = ">=3.10"\n# dependencies = []\n# ///\n'
    f"{IN_PROCESS_MARK}\n"
    "raise SystemExit('this chat program runs inside a verifiers harness (verifiers.v1.harness.chat_loop), not on its own')\n"
)
"""The shared chat program: its text carries :data:`~verifiers.v1.runtimes.IN_PROCESS_MARK`, so
it (or a text built on it) is recognised wherever it goes, and it refuses to run on its own."""
CHAT_PROGRAM = CHAT_PROGRAM_SOURCE


def _flags(extra_args: Sequence[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    for arg in extra_args:
        name, eq, value = str(arg).partition("=")
        out[name.lstrip("-").replace("-", "_")] = value if eq else True
    return out


async def launch_chat_program(
    source: str, config: Any, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
    mcp_urls: dict[str, str], system_prompt: str | None, prompt: Any, *, extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None, activate: bool = True,
) -> ProgramResult:  # fmt: skip
    """Run the chat program (see the module docstring) to its end; the program's exit."""
    if not is_in_process_program(source):
        from verifiers.v1.agents import MCP_NEEDS_OUR_LOOP
        from verifiers.v1.errors import HarnessError
        from verifiers.v1.harness import current_interaction

        it = current_interaction()
        if it is not None and getattr(it, "mcp_tools", False):  # refused before the program runs
            raise HarnessError(MCP_NEEDS_OUR_LOOP.format(harness=getattr(config, "id", "?")))
        return await _run_program(source, config, ctx, trace, runtime, endpoint, secret, system_prompt, prompt,
                                  extra_args, env, activate)  # fmt: skip
    from verifiers.v1.compaction import CompactionConfig
    from verifiers.v1.harness import chat_loop, current_interaction
    from verifiers.v1.harnesses.utils.tools import bash_tools
    from verifiers.v1.messages import Message, SystemMessage, UserMessage

    it = current_interaction()
    flags = _flags(extra_args)
    messages: list[Any] = [SystemMessage(content=system_prompt)] if system_prompt else []
    if isinstance(prompt, str):
        messages.append(UserMessage(content=prompt))
    elif prompt:
        adapter: TypeAdapter[Any] = TypeAdapter(Message)
        messages.extend(m if not isinstance(m, dict) else adapter.validate_python(m) for m in prompt)
    tools = dict(it.tools) if it is not None else {}
    if flags.get("bash"):
        tools.update(bash_tools(runtime, getattr(config, "command_timeout", 120.0), edit=bool(flags.get("edit")),
                                env=env if env is not None else dict(config.resolved_env)))  # fmt: skip
    compaction = None
    if flags.get("compaction"):
        at = flags.get("summarize_at_tokens")
        compaction = CompactionConfig(summarize_at_tokens=int(at) if isinstance(at, str) else None)
    available = {"trace": trace, "runtime": runtime, "state": trace.state, "task": it.task.data if it is not None else None}
    gates, ctx.gates_tools = ctx.gates_tools, True  # this loop reads a denied call's verdict
    try:
        convo = await chat_loop(ctx, messages, tools, tool_timeout=config.tool_timeout, available=available, compaction=compaction)
    finally:
        ctx.gates_tools = gates
    if it is not None:
        # the interaction's conversation goes on with what this turn added (a conversation the
        # loop compacted is replaced: the next turn goes on from it)
        added = convo[len(messages):] if convo[: len(messages)] == messages else None
        it.messages, it.launched = ([*it.messages, *added] if added is not None else convo), True
    return ProgramResult(returncode=0, stdout="", stderr="")


async def _run_program(
    source: str, config: Any, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
    system_prompt: str | None, prompt: Any, extra_args: Sequence[str], env: dict[str, str] | None, activate: bool,
) -> ProgramResult:  # fmt: skip
    """A program of the plugin's own, with the original's wire arguments."""
    from verifiers.v1.messages import messages_to_openai

    args = [f"--base-url={endpoint}", f"--api-key={secret}", f"--model={ctx.model}", *extra_args]
    if system_prompt:
        args.append(f"--system-prompt={system_prompt}")
    if isinstance(prompt, str):
        args.append(f"--prompt={prompt}")
    elif prompt is not None:
        path = f".vf-initial-messages-{trace.id}.json"
        await runtime.write(path, json.dumps(messages_to_openai(list(prompt))).encode())
        args.append(f"--initial-messages-file={path}")
    resolved = dict(config.resolved_env)
    program = await runtime.prepare_uv_script(source, resolved, activate=activate)
    return await runtime.run_program([*program, *args], env if env is not None else resolved)


__all__ = ["CHAT_PROGRAM", "CHAT_PROGRAM_SOURCE", "launch_chat_program"]
