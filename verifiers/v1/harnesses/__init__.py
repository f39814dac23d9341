"""The built-in harnesses, by id (``null``, ``bash``, ``mini_swe_agent``); see ``verifiers.v1.harness``.

``from verifiers.v1.harnesses import NullHarness, BashHarness`` works as in the original (the
classes are imported on first use, so loading one harness does not load the others)."""

from typing import Any

_EXPORTS = {
    "NullHarness": "null", "NullHarnessConfig": "null", "BashHarness": "bash", "BashHarnessConfig": "bash",
    "MiniSWEAgentHarness": "mini_swe_agent", "MiniSWEAgentHarnessConfig": "mini_swe_agent",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_EXPORTS)
