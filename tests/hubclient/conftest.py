"""Fixtures for end-to-end tests of the hub commands: a real hub process and `vf` runners."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import pytest

from hub.testing import HubProcess, run_hub
from tests.hubclient.helpers import VF, fresh_venv


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> HubProcess:
    handle = run_hub(tmp_path_factory.mktemp("hub"))
    yield handle
    handle.stop()


@pytest.fixture
def make_vf(tmp_path: Path, hub: HubProcess):
    def factory(token: str | None = None, venv: bool = False, register_project: bool = False) -> VF:
        root = tmp_path / f"vf-{secrets.token_hex(3)}"
        root.mkdir()
        python = fresh_venv(root / "venv", register_project=register_project) if venv else sys.executable
        work = root / "work"
        work.mkdir()
        return VF(python, root / "config", hub.url, work, token)

    return factory
