"""The original's module path ``verifiers.v1.runtimes.prime``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.runtimes``.

Only the config is here: a run on this runtime is refused at start with one line that says what is missing."""

from __future__ import annotations

from verifiers.v1.runtimes import PrimeConfig

__all__ = ["PrimeConfig"]
