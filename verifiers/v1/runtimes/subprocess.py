"""The original's module path ``verifiers.v1.runtimes.subprocess``, kept so code written for it imports unchanged; the names live in ``verifiers.v1.runtimes``."""

from __future__ import annotations

from verifiers.v1.runtimes import LocalProcess, SubprocessConfig, SubprocessRuntime

SubprocessProcess = LocalProcess
"""The original's name of the subprocess runtime's live process."""

__all__ = ["SubprocessConfig", "SubprocessProcess", "SubprocessRuntime"]
