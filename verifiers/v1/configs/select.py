"""Task selection: the original's module path ``verifiers.v1.configs.select``. ``SelectConfig`` and
``TaskMatchConfig`` live in ``verifiers.v1.configs``; the command line's ``SelectCLIConfig`` here
(it is not part of defining a taskset)."""

from __future__ import annotations

from pydantic import AliasChoices, ConfigDict, Field

from verifiers.v1.configs import SelectConfig, TaskMatchConfig

__all__ = ["SelectCLIConfig", "SelectConfig", "TaskMatchConfig"]


class SelectCLIConfig(SelectConfig):
    """``SelectConfig`` with the command line's short keys ``n`` (limit) and ``s`` (shuffle)."""

    model_config = ConfigDict(defer_build=True)  # the command line's: built on first use

    shuffle: bool = Field(False, validation_alias=AliasChoices("shuffle", "s"))
    limit: int | None = Field(None, ge=1, validation_alias=AliasChoices("limit", "n"))
