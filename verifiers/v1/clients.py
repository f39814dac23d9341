"""The original's module path ``verifiers.v1.clients``: the endpoint configs (``EvalClientConfig``,
``TrainClientConfig``, ``ClientConfig``; defined in ``verifiers.v1.configs.client``) and
``ModelContext``, the model, endpoint and sampling a trainer hands ``Env.run_slot`` /
``Env.run_episode`` for its episodes.

A harness's ``launch`` is annotated with ``ModelContext`` in the original; here it receives the
agent's call context (``verifiers.v1.interception.CallContext``), which has the same ``model`` and
``sampling`` and the run's live client. The original's client classes (``Client``, ``EvalClient``,
``resolve_client``) are not here: a v1 agent's model client is our ``ModelClient``
(``verifiers.clients``), made from the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from verifiers.v1.configs import SamplingConfig
from verifiers.v1.configs.client import (
    BaseClientConfig,
    ClientConfig,
    ClientTimeoutConfig,
    EvalClientConfig,
    TrainClientConfig,
)

_CLIENT_CONFIG: TypeAdapter[Any] = TypeAdapter(ClientConfig)


@dataclass(frozen=True)
class ModelContext:
    """The model, its endpoint and the sampling for a trainer's episodes (``Env.run_slot``,
    ``Env.run_episode``). ``client``: a client config (a table is validated by ``type``, ``eval``
    by default), or a live ``verifiers.clients.ModelClient`` to share (its owner closes it).
    ``sampling``: a ``SamplingConfig`` or a table of its keys."""

    model: str
    client: Any = field(default_factory=EvalClientConfig)
    sampling: Any = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        client = self.client
        if isinstance(client, dict):
            client = _CLIENT_CONFIG.validate_python({"type": "eval", **client})
        elif isinstance(client, str):
            client = EvalClientConfig(base_url=client)
        elif not isinstance(client, BaseClientConfig) and not callable(getattr(client, "chat", None)):
            raise TypeError(f"ModelContext.client: a client config (EvalClientConfig or a table of its keys) or a live model client, not {type(client).__name__}")
        object.__setattr__(self, "client", client)
        sampling = self.sampling
        if sampling is None:
            sampling = SamplingConfig()
        elif isinstance(sampling, dict):
            sampling = SamplingConfig.model_validate(sampling)
        elif not isinstance(sampling, SamplingConfig):
            raise TypeError(f"ModelContext.sampling: a SamplingConfig or a table of its keys, not {type(sampling).__name__}")
        object.__setattr__(self, "sampling", sampling)

    def sampling_args(self) -> dict[str, Any]:
        """The request's sampling arguments (unset knobs left out)."""
        return self.sampling.model_dump(exclude_none=True)


__all__ = [
    "BaseClientConfig",
    "ClientConfig",
    "ClientTimeoutConfig",
    "EvalClientConfig",
    "ModelContext",
    "TrainClientConfig",
]
