"""A local sandbox for untrusted (model-written) code.

>>> from verifiers.sandbox import Sandbox
>>> sb = Sandbox()                                   # bubblewrap; VF_SANDBOX_BACKEND=nsjail for nsjail
>>> sb.run_sync("echo hi").stdout                    # doctest: +SKIP
'hi\\n'
>>> sb.run_sync(python="print(6 * 7)").stdout        # doctest: +SKIP
'42\\n'

Backends: ``bwrap`` (default), ``nsjail``, and ``subprocess`` (no isolation; development only).
"""

from verifiers.sandbox.backends import BACKENDS, WORKDIR, Backend, get_backend
from verifiers.sandbox.sandbox import Sandbox, SandboxSession, run_sync
from verifiers.sandbox.types import (
    KillReason,
    Limits,
    RunResult,
    SandboxError,
    SandboxUnavailableError,
    UserNamespacesUnavailableError,
)
from verifiers.sandbox.unit_tests import TestReport, run_python_tests
from verifiers.sandbox.warm import WarmPool

__all__ = [
    "BACKENDS",
    "WORKDIR",
    "Backend",
    "KillReason",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxSession",
    "SandboxUnavailableError",
    "TestReport",
    "UserNamespacesUnavailableError",
    "WarmPool",
    "get_backend",
    "run_python_tests",
    "run_sync",
]
