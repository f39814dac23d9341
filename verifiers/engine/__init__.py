"""The rollout engine: one home per stage, driven by every API.

Three stages, each readable alone, each handing the next a typed record and carrying its own
timeout:

* :mod:`verifiers.engine.run` -- **the run**: :func:`run_groups` schedules groups (at most
  ``max_concurrent`` in flight), bounds requests (``max_concurrent_requests``), resumes from a run
  folder, writes every rollout as it finishes and builds the summary (``metadata.json``).
* :mod:`verifiers.engine.group` -- **the group**: :func:`run_group` runs one example's rollouts
  concurrently and scores them together, under what their timeouts left (a
  :class:`~verifiers.engine.rollout.RolloutOutcome` carries it; no side channel).
* :mod:`verifiers.engine.rollout` -- **one rollout**: :func:`run_rollout` builds the state, runs
  its turns under the rollout's timeout (a clock that stops while a request waits for a slot) and
  records any error; :mod:`verifiers.engine.turns` is the turn loop itself
  (:func:`play_turns`), :mod:`verifiers.engine.stops` the built-in stop conditions.
* :mod:`verifiers.engine.threads` -- **where sync code runs**: the daemon thread pools of sync
  tools and sync reward functions (abandoned calls leave the pool's count), and the watchdog that
  names environment code blocking the event loop.

What an API gives the engine (:mod:`verifiers.engine.plans`): a :class:`GroupPlan` (a
:class:`RolloutPlan` per row, a :class:`Scorer`), a :class:`RunConfig`, and a model client
(:class:`~verifiers.engine.client.ModelClientProtocol`: async ``chat`` and ``completion``).
The engine calls only the callables those records hold.

Who builds them:

* the classic ``Environment`` (0.1.x and 0.3.x APIs): :mod:`verifiers.classic.drive` turns an
  environment's hooks (``setup_state``, ``env_response``, ``@vf.stop``, ``@vf.cleanup``, an
  overridden ``rollout``) into plans; ``evaluate`` / ``generate`` / ``run_group`` /
  ``run_rollout`` call the stages.
* a v1 ``Env`` / harness (next): a :class:`RolloutPlan` whose ``play`` runs the harness against
  the interception server (or whose ``turns`` are the null harness's chat loop), a scorer over
  the task's ``@vf.reward`` functions, and the same :func:`run_groups` for ``vf eval``, resume and
  summaries.
* an env server: one :func:`run_group` (or :func:`run_rollout`) per ``run`` request, with the
  request's client and sampling; streaming a trace back is the server's, not the engine's.
"""

from typing import TYPE_CHECKING, Any

# Names resolve on first use, so ``verifiers.engine.threads`` (the hook pools a v1 taskset's sync
# rewards run in) loads without the run, group and rollout stages.
_NAMES = {
    "BoundedClient": "client", "ModelClientProtocol": "client", "is_model_client": "client",
    "run_group": "group", "score_group": "group",
    "GroupPlan": "plans", "RolloutPlan": "plans", "RunConfig": "plans", "Scorer": "plans", "TurnLoop": "plans",
    "RolloutOutcome": "rollout", "run_rollout": "rollout",
    "run_groups": "run",
    "play_turns": "turns",
}  # fmt: skip

if TYPE_CHECKING:
    from verifiers.engine.client import BoundedClient, ModelClientProtocol, is_model_client
    from verifiers.engine.group import run_group, score_group
    from verifiers.engine.plans import GroupPlan, RolloutPlan, RunConfig, Scorer, TurnLoop
    from verifiers.engine.rollout import RolloutOutcome, run_rollout
    from verifiers.engine.run import run_groups
    from verifiers.engine.turns import play_turns


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'verifiers.engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"verifiers.engine.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BoundedClient",
    "GroupPlan",
    "ModelClientProtocol",
    "RolloutOutcome",
    "RolloutPlan",
    "RunConfig",
    "Scorer",
    "TurnLoop",
    "is_model_client",
    "play_turns",
    "run_group",
    "run_groups",
    "run_rollout",
    "score_group",
]
