"""``verifiers.v1.utils.loaders``: loading by id, where the original keeps it (tasksets' tests and
launch scripts import these names from here). Each is ours, from its own home."""

from __future__ import annotations

from verifiers.v1.configs import judge_config_type
from verifiers.v1.env import (
    env_config_type,
    environment_class,
    import_environment,
    load_environment,
    resolve_env_config,
)
from verifiers.v1.harness import (
    default_harness_id,
    harness_class,
    harness_config_type,
    import_harness,
    load_harness,
)
from verifiers.v1.judge import import_judge, judge_class, load_judge
from verifiers.v1.loading import (
    import_taskset,
    load_taskset,
    task_type,
    taskset_class,
    taskset_config_type,
)

__all__ = [
    "default_harness_id",
    "env_config_type",
    "environment_class",
    "harness_class",
    "harness_config_type",
    "import_environment",
    "import_harness",
    "import_judge",
    "import_taskset",
    "judge_class",
    "judge_config_type",
    "load_environment",
    "load_harness",
    "load_judge",
    "load_taskset",
    "resolve_env_config",
    "task_type",
    "taskset_class",
    "taskset_config_type",
]
