"""What the engine needs of a model client, and the run-wide request bound around one.

The engine calls exactly two methods; anything that has them drives rollouts (our
:class:`~verifiers.clients.ModelClient`, a test double, a v1 interception client later).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from verifiers.clients.slots import acquire_slot

if TYPE_CHECKING:
    from verifiers.clients.response import ModelResponse

__all__ = ["BoundedClient", "ModelClientProtocol", "client_base_url", "is_model_client"]


@runtime_checkable
class ModelClientProtocol(Protocol):
    """A model client: ``chat`` (message lists) and ``completion`` (text), both async, keyword-only."""

    async def chat(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
    ) -> ModelResponse: ...

    async def completion(
        self, *, model: str, prompt: str, sampling_args: Mapping[str, Any] | None = None
    ) -> ModelResponse: ...


def is_model_client(obj: object) -> bool:
    """True for an object the engine can call directly (an async ``chat``), as opposed to a URL,
    a config or an openai client that still has to become one."""
    chat = getattr(obj, "chat", None)
    return callable(chat) and asyncio.iscoroutinefunction(chat)


def client_base_url(client: object) -> str | None:
    inner = getattr(client, "inner", client)
    url = getattr(inner, "base_url", None)
    return str(url) if url is not None else None


class BoundedClient:
    """A model client whose requests share one semaphore (``max_concurrent_requests``, or a classic
    caller's own ``semaphore``). Waiting for a slot does not count against the calling rollout's
    timeout (see :mod:`verifiers.clients.slots`)."""

    __slots__ = ("inner", "semaphore")

    def __init__(self, inner: ModelClientProtocol, semaphore: asyncio.Semaphore) -> None:
        self.inner = inner
        self.semaphore = semaphore

    async def chat(self, **kwargs: Any) -> ModelResponse:
        await acquire_slot(self.semaphore)
        try:
            return await self.inner.chat(**kwargs)
        finally:
            self.semaphore.release()

    async def completion(self, **kwargs: Any) -> ModelResponse:
        await acquire_slot(self.semaphore)
        try:
            return await self.inner.completion(**kwargs)
        finally:
            self.semaphore.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
