"""The v1 rollout errors: each names the boundary that failed, and its stop condition says so."""

from __future__ import annotations


class RolloutError(Exception):
    """A failure inside one rollout (recorded on its trace; the run goes on)."""


class ProviderError(RolloutError):
    """The model endpoint failed."""

    def __init__(self, message: str = "", *, status_code: int = 502) -> None:
        super().__init__(message)
        self.status_code = status_code


class HarnessError(RolloutError):
    """The agent program failed."""


class ToolsetError(RolloutError):
    """A tool server failed."""


class EnvError(RolloutError):
    """The env's own logic failed."""


class SandboxError(RolloutError):
    """The runtime the agent runs in failed."""


class TaskError(RolloutError):
    """A task hook failed (setup, finalize, a metric or a reward)."""


class InterceptionError(RolloutError):
    """The interception proxy between the agent and the model failed."""


class TunnelError(InterceptionError):
    """The tunnel to the interception proxy failed."""


def stop_condition(error: BaseException) -> str:
    """``<boundary>_error`` for a rollout error (``TaskError`` -> ``task_error``), else ``error``."""
    if isinstance(error, RolloutError):
        return type(error).__name__.removesuffix("Error").lower() + "_error"
    return "error"


def crossed(what: str, error: BaseException, boundary: type[RolloutError] = EnvError) -> RolloutError:
    """``error``, escaped from user code at ``what`` (``"MyEnv.finalize()"``), as the error the
    boundary records, as the original words it: a rollout error passes unchanged (it crossed a
    more specific boundary first); a ``TimeoutError`` the code raised itself is ``<what> timed
    out``; anything else is ``<what>: <Type>: <message>``."""
    if isinstance(error, RolloutError):
        return error
    if isinstance(error, TimeoutError):
        return boundary(f"{what} timed out")
    return boundary(f"{what}: {type(error).__name__}: {error}")
