"""The original's module path ``verifiers.v1.configs.runtime``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.runtimes``."""

from __future__ import annotations

from verifiers.v1.runtimes import RuntimeConfig, resolve_runtime_config

__all__ = ["RuntimeConfig", "resolve_runtime_config"]
