"""The ``bash`` and ``edit`` tools of the ``bash`` harness and of the shared chat program's
``--bash`` / ``--edit`` flags (``harnesses.utils.launch``)."""

from __future__ import annotations

from typing import Annotated, Any


def bash_tools(runtime: Any, timeout: float, *, edit: bool = True, env: dict[str, str] | None = None) -> dict:
    """The ``bash`` and ``edit`` tools on ``runtime``, as the original's bash harness offers them
    (names and parameters): a model that learned them there calls them the same way here.
    ``env``: the harness's own variables (``[harness] env`` / ``forward_env``), for every command."""

    async def bash(command: Annotated[str, "The command line bash runs, in the working directory."]) -> str:
        """Run a bash command in the working directory; returns its output (stdout, then stderr)."""
        r = await runtime.run(command, env or None, timeout=timeout)
        out = r.stdout + r.stderr
        return f"error: the command did not finish within {timeout:g} s\n{out}" if r.timed_out else out

    async def edit_file(
        path: Annotated[str, "The file to edit: relative to the working directory, or absolute."],
        old_str: Annotated[str, "The text to replace; it must occur exactly once in the file."],
        new_str: Annotated[str, "The text that takes its place."],
    ) -> str:
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

    return {"bash": bash, "edit": edit_file} if edit else {"bash": bash}


__all__ = ["bash_tools"]
