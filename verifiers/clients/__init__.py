"""Model clients: an OpenAI-compatible HTTP client built for high-concurrency rollouts.

Names are resolved lazily so that importing this package costs almost nothing; httpx and aiohttp
load on the first request.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers.clients.client import ModelClient
    from verifiers.clients.config import ClientConfig
    from verifiers.clients.errors import ModelError, ModelTimeoutError
    from verifiers.clients.response import ModelResponse

_NAMES = {
    "ModelClient": "verifiers.clients.client",
    "ClientConfig": "verifiers.clients.config",
    "ModelError": "verifiers.clients.errors",
    "ModelTimeoutError": "verifiers.clients.errors",
    "ModelResponse": "verifiers.clients.response",
}

__all__ = ["ClientConfig", "ModelClient", "ModelError", "ModelResponse", "ModelTimeoutError"]


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'verifiers.clients' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
