"""The run executing here (its model client and model), for code that runs inside an episode or
its scoring without being handed the run: a judge with no endpoint of its own calls the run's
client. Set by the env layer (``Env.run_episode``) and the scoring stage (``V1Scorer``); tasks
started inside inherit it (``contextvars``)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_CURRENT_RUN: contextvars.ContextVar[Any] = contextvars.ContextVar("vf_v1_run", default=None)
_JUDGE_MODEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("vf_v1_judge_model", default=None)


def current_run() -> Any:
    """The current ``verifiers.v1.agents.RunContext`` (``client``, ``model``), or None."""
    return _CURRENT_RUN.get()


class running:  # lower-case: used as a function, ``with running(run_ctx):``
    """Make ``run_ctx`` the current run for the code inside (and the tasks it starts). A plain
    context manager, not a generator: every episode and its scoring enter one."""

    __slots__ = ("_run_ctx", "_token")

    def __init__(self, run_ctx: Any) -> None:
        self._run_ctx = run_ctx
        self._token: contextvars.Token[Any] | None = None

    def __enter__(self) -> Any:
        self._token = _CURRENT_RUN.set(self._run_ctx)
        return self._run_ctx

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT_RUN.reset(self._token)
            self._token = None


def judges_answered_by_run() -> str | None:
    """Inside ``answering_all``: the model name under which every judge, its own ``base_url`` or
    not, asks the run's client (``vf validate``: the checker's scripted model answers, never a
    networked or paid one). None elsewhere."""
    return _JUDGE_MODEL.get()


@contextlib.contextmanager
def answering_all(judge_model: str) -> Iterator[None]:
    """Inside, judges call the run's client as ``judge_model`` (see ``judges_answered_by_run``)."""
    token = _JUDGE_MODEL.set(judge_model)
    try:
        yield
    finally:
        _JUDGE_MODEL.reset(token)
