"""Model endpoint configs, in the original's shape: ``EvalClientConfig`` (an OpenAI-compatible
endpoint, what every run here speaks), ``TrainClientConfig`` (what a trainer such as prime-rl sends:
the traces must carry token ids and logprobs), and ``ClientConfig``, the union of the two on
``type``.

A train client here speaks to the same OpenAI-compatible endpoint and asks it for the token data
(:func:`with_token_data`: ``logprobs`` and vLLM's ``return_token_ids``), so the prompt is rendered
by the server's chat template; the original renders it on the client and calls vLLM's token
endpoint. The renderer settings (``renderer``, ``renderer_model_name``) therefore do not apply, and
the first train client of a process says so in the log.

The embedded default is a local endpoint (``http://127.0.0.1:8000/v1``, or ``$VF_BASE_URL``, or the
original's ``$PRIME_INFERENCE_URL``); a hosted service is used only when a config or the
environment names it. A config names its key by its environment variable, never as a value; with
none named, the key is ``$PRIME_API_KEY`` or ``EMPTY``, as the original sends it (only this
process's own client gets it: a client config sent over the wire carries no literal key).
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from verifiers.v1.configs import BaseConfig

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
CLIENT_TYPES = ("eval", "train")

_told_about_rendering = False


def with_token_data(sampling: dict[str, Any]) -> dict[str, Any]:
    """``sampling`` plus what asks an OpenAI-compatible server for the token data a train client's
    traces carry: ``logprobs`` and vLLM's ``return_token_ids`` (both left as the caller set them)."""
    global _told_about_rendering
    if not _told_about_rendering:
        _told_about_rendering = True
        import logging

        logging.getLogger("verifiers.v1").info(
            "client type 'train': the endpoint's chat route renders the prompt and returns token ids and logprobs "
            "(vLLM return_token_ids); renderer settings do not apply"
        )
    out = dict(sampling)
    out.setdefault("logprobs", True)
    extra = dict(out.get("extra_body") or {})
    extra.setdefault("return_token_ids", True)
    out["extra_body"] = extra
    return out


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
        base_url = self.base_url
        if "base_url" not in self.model_fields_set:
            # the endpoint the environment names when the config does not: ours (a local vf serve),
            # then the original's variable; the embedded default is local, never a hosted service
            base_url = os.environ.get("VF_BASE_URL") or os.environ.get("PRIME_INFERENCE_URL") or base_url
        out: dict[str, Any] = {"base_url": base_url, "headers": headers}
        if self.api_key_var is not None:
            out["api_key_var"] = self.api_key_var
        else:
            # as the original: the key in PRIME_API_KEY, else "EMPTY" (an OpenAI-compatible server
            # run without keys takes any)
            out["api_key"] = os.environ.get("PRIME_API_KEY") or "EMPTY"
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
    """A trainer's client: the same endpoint, with token ids and logprobs asked for on every call
    (:func:`with_token_data`; the original renders client-side for vLLM's token endpoint)."""

    type: Literal["train"] = "train"
    renderer: Any = None
    renderer_model_name: str | None = None
    multiplex: int = Field(256, ge=1)


ClientConfig = Annotated[EvalClientConfig | TrainClientConfig, Field(discriminator="type")]
"""A client config chosen by ``type`` (``eval`` | ``train``)."""

__all__ = [
    "CLIENT_TYPES",
    "BaseClientConfig",
    "ClientConfig",
    "ClientTimeoutConfig",
    "EvalClientConfig",
    "TrainClientConfig",
    "with_token_data",
]
