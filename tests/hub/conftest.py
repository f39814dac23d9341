"""Fixtures for the hub tests: an in-process hub on SQLite and on a real PostgreSQL, and packages.

Every test that takes ``hub`` runs twice: once on SQLite, once on a PostgreSQL server started by
``tests/support/services.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.hub.helpers import HubClient, PackageFactory
from tests.support.services import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_database_factory,
    postgres_server,
    s3_bucket,
    s3_server,
)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """None (SQLite under the data folder) or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    factory: Callable[..., str] = request.getfixturevalue("postgres_database_factory")
    return factory()


@pytest.fixture
def hub(tmp_path: Path, database_url: str | None) -> Iterator[HubClient]:
    """An in-process hub (FastAPI TestClient) with an admin token, on SQLite and on PostgreSQL."""
    h = HubClient.create(
        tmp_path / "hub", database_url=database_url, admin_token="vfh_" + secrets.token_urlsafe(32)
    )
    try:
        yield h
    finally:
        h.close()


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory) -> PackageFactory:
    """Builds real wheels and sdists (hatchling, in-process) and caches them for the session."""
    return PackageFactory(tmp_path_factory.mktemp("pkgs"))
