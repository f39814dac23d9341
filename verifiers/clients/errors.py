"""Errors raised by the model client.

A single exception type with a ``transient`` flag lets callers (the rollout engine, the CLI) decide
what to do without knowing about HTTP libraries: transient errors were already retried by the client
and still failed; non-transient ones (a 400 for a bad request, a 401) will never succeed on retry.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model request failed.

    ``status`` is the HTTP status code, or ``None`` when no response arrived (connection error,
    timeout). ``transient`` is true for failures that may succeed on retry (connection errors,
    timeouts, 429 and 5xx).
    """

    def __init__(self, status: int | None, message: str, transient: bool, *, attempts: int = 1) -> None:
        self.status = status
        self.message = message
        self.transient = transient
        self.attempts = attempts
        super().__init__(message)

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no response"
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"{where}: {self.message}{tries}"

    def __repr__(self) -> str:
        return f"ModelError(status={self.status!r}, message={self.message!r}, transient={self.transient!r})"

    def __reduce__(self):  # keep pickling (multiprocessing, results) working with keyword-only args
        return (_rebuild, (self.status, self.message, self.transient, self.attempts))


class ModelTimeoutError(ModelError):
    """No complete response within the per-request timeout (a transient error)."""

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(None, message, True, attempts=attempts)

    def __reduce__(self):
        return (ModelTimeoutError, (self.message,), {"attempts": self.attempts})


def _rebuild(status: int | None, message: str, transient: bool, attempts: int) -> ModelError:
    return ModelError(status, message, transient, attempts=attempts)
