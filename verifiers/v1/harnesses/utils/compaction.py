"""The original's module path ``verifiers.v1.harnesses.utils.compaction``; the names live in ``verifiers.v1.compaction``."""

from verifiers.v1.compaction import (
    ATTEMPTS,
    RESERVE_TOKENS,
    CompactionConfig,
    Compactor,
    compactable,
    context_tokens,
    estimated_tokens,
    is_context_overflow,
    threshold_for,
)
from verifiers.v1.messages import MAX_TOOL_OUTPUT, capped_tool_output

COMPACTION_ATTEMPTS = ATTEMPTS
TOOL_OUTPUT_MAX_BYTES = MAX_TOOL_OUTPUT
truncate_tool_output = capped_tool_output
default_threshold = threshold_for

__all__ = [
    "COMPACTION_ATTEMPTS",
    "RESERVE_TOKENS",
    "TOOL_OUTPUT_MAX_BYTES",
    "CompactionConfig",
    "Compactor",
    "compactable",
    "context_tokens",
    "default_threshold",
    "estimated_tokens",
    "is_context_overflow",
    "truncate_tool_output",
]
