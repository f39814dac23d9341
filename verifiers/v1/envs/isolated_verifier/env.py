"""The original's module path ``verifiers.v1.envs.isolated_verifier.env``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.envs.isolated_verifier``."""

from __future__ import annotations

from verifiers.v1.envs.isolated_verifier import IsolatedVerifierEnv, IsolatedVerifierEnvConfig, VerifierConfig

__all__ = ["IsolatedVerifierEnv", "IsolatedVerifierEnvConfig", "VerifierConfig"]
