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

from abc import ABC, abstractmethod
from collections.abc import Mapping
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


SESSION_ID_HEADER = "X-Session-ID"
"""The header a rollout's requests carry its trace id in (the same on every turn), so a router
with session affinity keeps a rollout's turns on one engine."""


class Client(ABC):
    """A model endpoint asked for one reply at a time, in a provider's wire format (the original's
    ``verifiers.v1.Client``; ``resolve_client`` makes one from a client config)."""

    @abstractmethod
    async def get_response(
        self, dialect: Any, body: dict[str, Any], sampling: Any = None, session_id: str | None = None,
        turn: Any = None, headers: Mapping[str, str] | None = None,
    ) -> Any:  # fmt: skip
        """One completion of ``body`` (the final request, sent as it is) as a v1 ``Response``."""

    async def relay(self, dialect: Any, body: dict[str, Any], session_id: str | None = None,
                    headers: Mapping[str, str] | None = None) -> Any:  # fmt: skip
        """Stream the provider's reply to ``body`` as it comes (the interception proxy does this here)."""
        raise NotImplementedError(f"{type(self).__name__} does not relay streams: the interception proxy streams replies")

    async def relay_aux(self, dialect: Any, route: str, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A side request of a provider (not a model turn)."""
        raise NotImplementedError(f"{type(self).__name__} does not relay side routes")

    async def close(self) -> None:  # noqa: B027  (a client holding nothing has nothing to close)
        """Release the connections (idempotent)."""


class EvalClient(Client):
    """An OpenAI-compatible chat-completions endpoint through our ``ModelClient``; a train client
    config also asks every request for the token ids and logprobs its traces keep."""

    def __init__(self, config: BaseClientConfig) -> None:
        from verifiers.clients import ModelClient

        self.config = config
        self.model_client = ModelClient.from_any(config.client_fields())

    async def get_response(
        self, dialect: Any, body: dict[str, Any], sampling: Any = None, session_id: str | None = None,
        turn: Any = None, headers: Mapping[str, str] | None = None,
    ) -> Any:  # fmt: skip
        from verifiers.clients.response import MalformedResponse, parse_chat_response
        from verifiers.errors import ModelError
        from verifiers.v1.dialects import ChatDialect
        from verifiers.v1.errors import ProviderError
        from verifiers.v1.interception import response_from_model

        if not isinstance(dialect, ChatDialect):
            raise NotImplementedError(f"{type(self).__name__} speaks OpenAI chat completions (ChatDialect), not "
                                      f"{type(dialect).__name__}")  # fmt: skip
        if not isinstance(body, Mapping):
            raise TypeError(f"get_response: body must be a chat-completions request object, not {type(body).__name__}")
        request = dict(body)
        if isinstance(self.config, TrainClientConfig):
            from verifiers.v1.configs.client import with_token_data

            request = with_token_data(request)
        sent = dict(headers or {})
        if session_id is not None:
            sent[SESSION_ID_HEADER] = session_id
        try:
            raw = await self.model_client.request_json("/chat/completions", request, headers=sent or None)
            parsed = parse_chat_response(raw)
        except ModelError as exc:
            raise ProviderError(str(exc), status_code=getattr(exc, "status", None) or 502) from exc
        except MalformedResponse as exc:
            raise ProviderError(f"malformed reply: {exc}") from exc
        return response_from_model(parsed, str(request.get("model") or ""))

    async def close(self) -> None:
        await self.model_client.aclose()


def resolve_client(config: BaseClientConfig | Mapping[str, Any]) -> Client:
    """The ``Client`` a client config describes (a table is validated by its ``type``)."""
    if isinstance(config, Mapping):
        config = _CLIENT_CONFIG.validate_python({"type": "eval", **config})
    if not isinstance(config, BaseClientConfig):
        raise TypeError(f"resolve_client: a client config, not {type(config).__name__}")
    return EvalClient(config)


__all__ = [
    "SESSION_ID_HEADER",
    "BaseClientConfig",
    "Client",
    "ClientConfig",
    "ClientTimeoutConfig",
    "EvalClient",
    "EvalClientConfig",
    "ModelContext",
    "TrainClientConfig",
    "resolve_client",
]
