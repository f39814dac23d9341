"""The original's module path ``verifiers.v1.clients``, for harness packages written for it: they
import ``ModelContext``, the type of the ``ctx`` their ``launch`` receives. Here that is the
agent's call context (``verifiers.v1.interception.CallContext``: ``model``, ``sampling``, the
run's client). The original's client classes (``Client``, ``ClientConfig``, ...) are not here: a
v1 agent's model client is our ``ModelClient`` (``verifiers.clients``), configured per role by
``AgentConfig.client``."""

from __future__ import annotations

from verifiers.v1.interception import CallContext as ModelContext

__all__ = ["ModelContext"]
