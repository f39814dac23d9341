"""Model endpoint configs, in the original's shape: ``EvalClientConfig`` (an OpenAI-compatible
endpoint, what every run here speaks), ``TrainClientConfig`` (the original's token endpoint with
client-side rendering: loads, and is refused where a client is made), and ``ClientConfig``, the
union of the two on ``type``.

The embedded default is a local endpoint (``http://127.0.0.1:8000/v1``, no key variable); a hosted
service is used only when a config names it. A key travels by the name of its environment
variable, never as a value.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from verifiers.v1.configs import BaseConfig

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
TRAIN_CLIENT_REFUSED = (
    "client type 'train' (vLLM's token endpoint with client-side rendering) is not available here: use an "
    "OpenAI-compatible endpoint (type 'eval'); token ids and logprobs come back from vLLM's chat endpoint"
)


class ClientTimeoutConfig(BaseConfig):
    """Seconds per phase of one request (None: unbounded there). Our client bounds a whole
    request with one figure: ``connect + read`` when ``read`` is set, else its own default."""

    connect: float | None = Field(30.0, gt=0)
    read: float | None = Field(None, gt=0)
    write: float | None = Field(None, gt=0)
    pool: float | None = Field(None, gt=0)


class BaseClientConfig(BaseConfig):
    """An OpenAI-compatible endpoint: ``base_url``, the variable holding its key, extra headers."""

    base_url: str = DEFAULT_BASE_URL
    api_key_var: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Header name -> environment variable; a variable that is set overrides the static header."""
    timeout: float | ClientTimeoutConfig | None = None

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if isinstance(value, float) and value <= 0:
            raise ValueError("timeout must be above 0 seconds")
        return value

    def client_fields(self) -> dict[str, Any]:
        """Our model client's fields (``verifiers.clients.ModelClient.from_any``) for this
        endpoint, headers from the environment resolved now."""
        headers = {**self.headers, **{name: os.environ[var] for name, var in self.headers_from_env.items() if var in os.environ}}
        out: dict[str, Any] = {"base_url": self.base_url, "headers": headers}
        if self.api_key_var is not None:
            out["api_key_var"] = self.api_key_var
        timeout = self.timeout
        if isinstance(timeout, ClientTimeoutConfig):
            timeout = (timeout.connect or 0.0) + timeout.read if timeout.read is not None else None
        if timeout is not None:
            out["timeout"] = timeout
        return out


class EvalClientConfig(BaseClientConfig):
    """An OpenAI-compatible chat-completions endpoint (the default)."""

    type: Literal["eval"] = "eval"


class TrainClientConfig(BaseClientConfig):
    """The original's training client (vLLM's token endpoint, rendered client-side): its config
    loads, so a config written for it gets one clear refusal where a client is made."""

    type: Literal["train"] = "train"
    renderer: Any = None
    renderer_model_name: str | None = None
    multiplex: int = Field(256, ge=1)


ClientConfig = Annotated[EvalClientConfig | TrainClientConfig, Field(discriminator="type")]
"""A client config chosen by ``type`` (``eval`` | ``train``)."""

__all__ = [
    "BaseClientConfig",
    "ClientConfig",
    "ClientTimeoutConfig",
    "EvalClientConfig",
    "TrainClientConfig",
]
