"""The original's module path ``verifiers.v1.tasksets.harbor.taskset``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.tasksets.harbor``."""

from __future__ import annotations

from verifiers.v1.tasksets.harbor import (
    CACHE,
    MAX_REWARD_BYTES,
    HarborConfig,
    HarborData,
    HarborTask,
    HarborTaskConfig,
    HarborTaskset,
)

__all__ = ["CACHE", "MAX_REWARD_BYTES", "HarborConfig", "HarborData", "HarborTask", "HarborTaskConfig", "HarborTaskset"]
