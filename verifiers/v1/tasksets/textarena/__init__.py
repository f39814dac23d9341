"""``textarena``: seeded games of the ``textarena`` package as a v1 taskset, the game engine playing
the user (``verifiers.v1.tasksets.textarena.taskset``). Needs ``pip install 'verifiers[ta]'``."""

from verifiers.v1.tasksets.textarena.taskset import (
    TextArenaConfig,
    TextArenaData,
    TextArenaEnv,
    TextArenaEnvConfig,
    TextArenaTask,
    TextArenaTaskset,
)

__all__ = [
    "TextArenaConfig",
    "TextArenaData",
    "TextArenaEnv",
    "TextArenaEnvConfig",
    "TextArenaTask",
    "TextArenaTaskset",
]
