"""The classic API (0.1.x and 0.3.x) as an adapter on the engine (:mod:`verifiers.engine`).

* :mod:`~verifiers.classic.drive`: how the engine drives a classic ``Environment`` (its hooks
  and overrides become :class:`~verifiers.engine.plans.RolloutPlan` / ``GroupPlan``), and the OLD
  call and result shapes (``rollout(client, model, prompt, ...)``, ``(completion, state)``,
  ``env_response`` returning ``(messages, state)``, ``is_completed(messages, state)``).
* :mod:`~verifiers.classic.options`: the classic ``evaluate`` / ``generate`` keywords (0.1.x
  semaphores, ``max_concurrent_generation`` / ``_scoring``, ``shuffle``, ``max_retries`` ...).
* :mod:`~verifiers.classic.bridge`: sync/async bridging (``SyncOrAsync``, ``run_sync``).
* :mod:`~verifiers.classic.keywords`: the constructor keywords classic releases accepted.
* :mod:`~verifiers.classic.datasets`: ``make_dataset`` (results as a ``datasets.Dataset``).

The classic import paths (``verifiers.envs.environment``, ``verifiers.utils.async_utils`` ...)
keep working; they import from here. This package imports nothing at import time.
"""
