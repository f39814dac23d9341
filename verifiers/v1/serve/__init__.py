"""Environment servers: a v1 env's episodes played in worker processes, driven over ZMQ.

``serve_env`` / ``EnvServerPool`` (``pool``: a broker over N worker processes), ``EnvServer``
(``server``: one process), ``EnvClient`` (``client``) and the wire's request and response models
(``verifiers.v1.wire``). The frames are the original 0.4.0's (``protocol``): its client drives
our servers and ours drives its servers. Nothing here imports pyzmq until a socket is made.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "EnvClient": "verifiers.v1.serve.client",
    "EnvServerError": "verifiers.v1.serve.client",
    "client_config_data": "verifiers.v1.serve.client",
    "EnvServer": "verifiers.v1.serve.server",
    "EnvServerPool": "verifiers.v1.serve.pool",
    "serve_env": "verifiers.v1.serve.pool",
    "run_server": "verifiers.v1.serve.pool",
    "BaseRequest": "verifiers.v1.wire",
    "BaseResponse": "verifiers.v1.wire",
    "HealthRequest": "verifiers.v1.wire",
    "HealthResponse": "verifiers.v1.wire",
    "CancelRequest": "verifiers.v1.wire",
    "CancelResponse": "verifiers.v1.wire",
    "RunRequest": "verifiers.v1.wire",
    "RunResponse": "verifiers.v1.wire",
    "EpisodeAssembly": "verifiers.v1.wire",
    "TraceSummary": "verifiers.v1.wire",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'verifiers.v1.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
