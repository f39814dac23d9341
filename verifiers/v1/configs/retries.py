"""``retries``: whole-run retry rules, for one agent's run (``[env.<role>.retries]``) and for a
whole episode (``[env.retries]``); off unless configured. The rules and their matching live in
:mod:`verifiers.v1.utils.retries`."""

import re
from typing import Annotated, Literal

from pydantic import Field, StrictInt, field_validator

from verifiers.v1.configs import BaseConfig

StatusCode = Annotated[StrictInt, Field(ge=100, le=599)] | Literal["1xx", "2xx", "3xx", "4xx", "5xx"]
"""An HTTP status, or a class of them (``"5xx"``)."""


class RetryRule(BaseConfig):
    """Which recorded errors this rule covers (every field set must match) and its budget."""

    type: str | None = None
    """The recorded error's class name (``ProviderError``, ``SandboxError``, ...)."""
    status_code: list[StatusCode] | None = None
    """Any of these statuses or classes; an error with no status never matches."""
    message: str | None = None
    """A regular expression searched in the error's message."""
    max_retries: int = Field(ge=0)
    """Retries this rule allows over the whole run; 0 makes its errors final."""

    @field_validator("message")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"message is not a valid regular expression: {exc}") from None
        return value


class RetryConfig(BaseConfig):
    """The rules in order (the first that matches an error decides for it), and the budget of the
    errors no rule matches."""

    max_retries: int = Field(0, ge=0)
    rules: list[RetryRule] = Field(default_factory=list)


__all__ = ["RetryConfig", "RetryRule", "StatusCode"]
