"""The original's module path ``verifiers.v1.harnesses.mini_swe_agent.harness``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.harnesses.mini_swe_agent``."""

from __future__ import annotations

from verifiers.v1.harnesses.mini_swe_agent import MiniSWEAgentHarness, MiniSWEAgentHarnessConfig

__all__ = ["MiniSWEAgentHarness", "MiniSWEAgentHarnessConfig"]
