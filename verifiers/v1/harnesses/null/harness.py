"""The original's module path ``verifiers.v1.harnesses.null.harness``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.harnesses.null``."""

from __future__ import annotations

from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig

__all__ = ["NullHarness", "NullHarnessConfig"]
