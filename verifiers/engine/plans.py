"""What an API tells the engine: typed, keyword-only records, built once per call.

* :class:`TurnLoop`: how one rollout's turns go (the environment's hooks and limits).
* :class:`RolloutPlan`: how to run one rollout of a row (a turn loop or a whole custom rollout).
* :class:`GroupPlan`: which plan each row of a group gets, and what scores the group.
* :class:`RunConfig`: the run's schedule, limits, output folder and callbacks.

The engine calls only the callables these records hold; it never looks at the environment class
that built them (the classic adapter, :mod:`verifiers.classic.drive`, builds them from an
``Environment``; a v1 ``Env`` or an env server builds its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from verifiers.types import State

if TYPE_CHECKING:
    from verifiers.clients.response import ModelResponse
    from verifiers.engine.client import ModelClientProtocol

__all__ = ["GroupPlan", "RolloutPlan", "RunConfig", "Scorer", "TurnLoop"]

#: ``request(client, model, context, tools, sampling_args, chat) -> ModelResponse``
Request = Callable[..., Awaitable["ModelResponse"]]


class Scorer(Protocol):
    """What scores a group of finished rollouts in place (a :class:`~verifiers.Rubric`)."""

    async def score_group(self, states: Sequence[State]) -> None: ...

    def get_reward_func_names(self) -> list[str]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnLoop:
    """One rollout's turns: the model's turn, then the environment's reply, until a stop fires.

    ``setup(state)`` (may return a mapping merged into the state), ``respond(messages, state)`` (the
    environment's reply: messages, a message, text or None), ``should_stop(state)`` (records the
    firing condition in ``state["stop_condition"]``), ``cleanup(state)`` (always runs, errors
    recorded), ``request``: None for a plain ``client.chat`` / ``client.completion`` call.
    ``stop_after_reply``: the stops are checked again after the environment's reply, before the
    next model call (the 0.1.x loop); False checks them only after a model turn, and after a reply
    that set ``state["final_env_response"]`` or failed (the 0.3.x loop).
    """

    setup: Callable[[State], Any]
    respond: Callable[[Any, State], Any]
    should_stop: Callable[[State], Awaitable[bool]]
    cleanup: Callable[[State], Awaitable[None]]
    request: Request | None = None
    tools: list[dict[str, Any]] | None = None
    max_seq_len: int | None = None
    stop_after_reply: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutPlan:
    """How one rollout of a row runs.

    ``init_state(row, client, model, sampling_args)`` builds the state; then ``turns`` runs, or
    ``play(state, client, model, sampling_args)`` (a custom rollout) fills it. ``replace_rollout``
    (a classic override of the whole rollout stage, timeout and all) wins over both.
    ``timeout``: the rollout's own limit, used when the run sets none; ``sampling_args``: defaults
    merged under the caller's (an EnvGroup member's own).
    """

    init_state: Callable[..., State]
    turns: TurnLoop | None = None
    play: Callable[[State, ModelClientProtocol, str, Mapping[str, Any]], Awaitable[None]] | None = None
    replace_rollout: Callable[..., Awaitable[State]] | None = None
    timeout: float | None = None
    sampling_args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupPlan:
    """The plan of each row of a group (``plan_for``) and the scorer of the group."""

    plan_for: Callable[[Mapping[str, Any]], RolloutPlan]
    scorer: Scorer


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """One run. ``max_concurrent`` bounds groups in flight (None or < 1: all),
    ``max_concurrent_requests`` requests in flight, ``request_gate`` is a caller's own semaphore
    around requests (the classic 0.1.x ``semaphore``), ``score_gate`` / ``independent_scoring``
    the classic scoring options. ``folder``: the run folder (None: nothing written);
    ``metadata``: fields for ``metadata.json`` (environment id, arguments, version ...).
    ``record`` / ``results_file`` / ``keep_on_resume``: an API's own line per rollout (a v1
    episode), the file in the run folder they go to (default ``results.jsonl``), and which saved
    lines ``resume`` keeps (default: all; a v1 env's ``complete``)."""

    model: str
    sampling_args: Mapping[str, Any] = field(default_factory=dict)
    rollouts_per_example: int = 1
    score: bool = True
    max_concurrent: int | None = None
    max_concurrent_requests: int | None = None
    request_gate: asyncio.Semaphore | None = None
    timeout_per_rollout: float | None = None
    folder: Path | None = None
    resume: bool = False
    state_columns: tuple[str, ...] = ()
    on_progress: Callable[[dict[str, Any]], Any] | None = None
    on_start: Callable[[int], Any] | None = None
    score_gate: asyncio.Semaphore | None = None
    independent_scoring: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    record: Callable[[State], dict[str, Any]] | None = None
    results_file: str | None = None
    keep_on_resume: Callable[[dict[str, Any]], bool] | None = None
