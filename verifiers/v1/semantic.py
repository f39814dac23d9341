"""The original's module path ``verifiers.v1.semantic``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.graph``."""

from __future__ import annotations

from verifiers.v1.graph import ACP_SEMANTIC_EDGES_METADATA_KEY, ParentLink, SemanticEdge, SemanticEdgeSet
from verifiers.v1.trace import ACPInfo

__all__ = ["ACP_SEMANTIC_EDGES_METADATA_KEY", "ACPInfo", "ParentLink", "SemanticEdge", "SemanticEdgeSet"]
