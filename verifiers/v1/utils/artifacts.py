"""The original's module path ``verifiers.v1.utils.artifacts``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.artifacts``."""

from __future__ import annotations

from verifiers.v1.artifacts import collect, restore
from verifiers.v1.runtimes import ARTIFACTS_DIR
from verifiers.v1.task import MAX_ARTIFACT_BYTES, Artifact

__all__ = ["ARTIFACTS_DIR", "MAX_ARTIFACT_BYTES", "Artifact", "collect", "restore"]
