"""User-facing errors for the ``vf`` command: one line on stderr and a non-zero exit, no traceback.

A traceback tells a user of a command line that the tool broke, when usually they mistyped an
environment id or a JSON argument. Commands raise :class:`UserError` for those cases; anything else
that escapes is shown as one line too, with the traceback available through ``VF_DEBUG=1``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes: 1 for a failed run or user error, 130 after Ctrl-C (the shell convention).
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix (bad argument, unknown environment, unreachable server).

    ``hint`` is printed on a second line when present (e.g. the command that starts a server).
    """

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code


def print_error(message: str, hint: str | None = None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def debug_enabled() -> bool:
    return os.environ.get("VF_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def guarded(func: F) -> F:
    """Turn exceptions escaping a command into a one-line message and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            if debug_enabled():
                raise
            print_error(exc.message, exc.hint)
            raise SystemExit(exc.exit_code)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(EXIT_INTERRUPTED)
        except (SystemExit, GeneratorExit):
            raise
        except Exception as exc:
            # click's own exceptions (usage errors, Exit) must reach click untouched.
            if type(exc).__module__.startswith(("click", "typer")):
                raise
            if debug_enabled():
                raise
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print_error(
                f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
                "set VF_DEBUG=1 to see the traceback",
            )
            raise SystemExit(EXIT_ERROR)

    return wrapper  # type: ignore[return-value]


def parse_json_arg(value: str | None, flag: str, *, expect: type = dict) -> Any:
    """Parse a JSON command-line argument, naming the flag and the position of a syntax error."""
    import json

    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise UserError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno}): {value!r}")
    if not isinstance(parsed, expect):
        raise UserError(
            f"{flag} must be a JSON {'object' if expect is dict else expect.__name__}, got: {value!r}"
        )
    return parsed
