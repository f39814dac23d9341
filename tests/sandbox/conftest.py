"""Fixtures of the sandbox tests: the isolating backends (bubblewrap, nsjail), installed when missing."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from verifiers.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
ISOLATING_BACKENDS = ["bwrap", "nsjail"]


def ensure_bwrap() -> None:
    """Install bubblewrap with the project's own set-up script when this machine lacks it."""
    if shutil.which("bwrap") is None:
        subprocess.run(["bash", str(REPO / "scripts" / "setup-system.sh")], check=True)
    assert shutil.which("bwrap"), "scripts/setup-system.sh did not install bubblewrap"


@contextlib.contextmanager
def private_sandbox_root(prefix: str) -> Iterator[Path]:
    """A sandbox root of the caller's own (``VF_SANDBOX_DIR`` while it is open), so leak checks see
    only the caller's runs; under /tmp because the sandbox's uid must be able to traverse to it
    (pytest's own tmp folders are private). Removed, and the previous root restored, at the end."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    previous = os.environ.get("VF_SANDBOX_DIR")
    os.environ["VF_SANDBOX_DIR"] = str(root)
    ensure_bwrap()
    try:
        yield root
    finally:
        if previous is None:
            os.environ.pop("VF_SANDBOX_DIR", None)
        else:
            os.environ["VF_SANDBOX_DIR"] = previous
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _sandbox_dir() -> Iterator[None]:
    with private_sandbox_root("vf-sandbox-test-"):
        yield


@pytest.fixture(params=ISOLATING_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def sandbox(backend: str) -> Iterator[Sandbox]:
    sb = Sandbox(backend, timeout=10)
    yield sb
    sb.close()  # run_python_tests started warm sandboxes for it


def sandbox_root() -> Path:
    return Path(os.environ["VF_SANDBOX_DIR"])


def run_dirs() -> list[Path]:
    """Per-run and per-session work dirs currently on the host."""
    return sorted(sandbox_root().glob("run-*"))
