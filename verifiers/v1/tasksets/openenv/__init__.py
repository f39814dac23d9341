"""``openenv``: the original's taskset of this id is not provided here (docs/v1.md, "Not yet supported").

Importing it (by id, or ``from verifiers.v1.tasksets.openenv import ...``) fails with one line that says
so, instead of a bare ``ModuleNotFoundError``."""

raise ImportError(
    "the 'openenv' taskset of the original verifiers is not provided by this library yet "
    "(docs/v1.md, 'Not yet supported'): its environments need OpenEnv environment servers, which it does not run"
)
