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


@contextlib.contextmanager
def running(run_ctx: Any) -> Iterator[Any]:
    """Make ``run_ctx`` the current run for the code inside (and the tasks it starts)."""
    token = _CURRENT_RUN.set(run_ctx)
    try:
        yield run_ctx
    finally:
        _CURRENT_RUN.reset(token)


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
