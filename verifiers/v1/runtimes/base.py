"""The original's module path ``verifiers.v1.runtimes.base``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.runtimes``."""

from __future__ import annotations

from verifiers.v1.runtimes import ProgramResult, Runtime, RuntimeConfig, RuntimeProcess

__all__ = ["ProgramResult", "Runtime", "RuntimeConfig", "RuntimeProcess"]
