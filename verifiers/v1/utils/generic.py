"""Config-merging helpers (``verifiers.v1.utils.generic`` in the original)."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["deep_merge", "prefix_validation_error"]

_IDENTITY = ("id", "type")


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base``, nested tables merged key by key (a partial override keeps
    the defaults it does not name). A nested table whose ``id`` or ``type`` changes is taken from
    ``override`` whole: one plugin's fields never leak into another plugin's config. Neither input
    is changed."""
    merged = dict(base)
    for key, value in override.items():
        old = merged.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            switched = any(k in value and k in old and value[k] != old[k] for k in _IDENTITY)
            merged[key] = dict(value) if switched else deep_merge(old, value)
        else:
            merged[key] = value
    return merged


def prefix_validation_error(error: ValidationError, prefix: tuple) -> ValidationError:
    """``error`` with ``prefix`` put in front of every location, so an error found while
    validating a nested block names the whole path the user wrote."""
    return ValidationError.from_exception_data(
        error.title,
        [{**item, "loc": tuple(prefix) + tuple(item["loc"])} for item in error.errors(include_url=False)],
    )
