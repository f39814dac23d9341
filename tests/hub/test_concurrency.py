"""Concurrency against a real hub process (uvicorn, several workers): two clients publishing the same
version at once (exactly one wins), many parallel uploads and downloads (no lost or corrupted file,
exact counts). Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess, run_hub
from tests.hub.helpers import PackageFactory

JSON = "application/vnd.pypi.simple.v1+json"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """One two-worker hub per database for the whole module (tests use distinct names)."""
    url = pg = None
    db_name = f"vf_conc_{secrets.token_hex(4)}"
    if request.param == "postgres":
        pg = request.getfixturevalue("postgres_server")
        url = pg.create_database(db_name)
    # One user races eight uploads on purpose here (correctness under concurrency, not fairness: the
    # per-user share of upload slots is tests/hub/test_limits.py's), so that user may take all eight.
    share = {"VF_HUB_MAX_UPLOADS_PER_USER": "8"}
    with run_hub(tmp_path_factory.mktemp("hub"), database_url=url, workers=2, extra_env=share) as h:
        yield h
    if pg is not None:
        pg.drop_database(db_name)


def _user(h: HubProcess, name: str) -> tuple[str, str]:
    with h.client(h.admin_token) as c:
        r = c.post("/api/v1/users", json={"name": f"{name}-{secrets.token_hex(3)}"})
        assert r.status_code == 201, r.text
        return r.json()["token"], r.json()["name"]


def _upload(h: HubProcess, token: str, owner: str, name: str, files: list[Path]) -> httpx.Response:
    with h.client(token) as c:
        return c.post(
            f"/api/v1/environments/{owner}/{name}/versions",
            files=[("files", (p.name, p.read_bytes())) for p in files],
        )


def test_same_version_race_exactly_one_wins(server: HubProcess, packages: PackageFactory) -> None:
    alice, owner = _user(server, "alice")
    a = packages.get("race-env", "1.0.0", description="from client A")
    b = packages.get("race-env", "1.0.0", description="from client B")
    for _round in range(3):
        barrier = threading.Barrier(2)

        def go(pkg, barrier=barrier):  # type: ignore[no-untyped-def]
            barrier.wait()
            return _upload(server, alice, owner, "race-env", [pkg.wheel, pkg.sdist])

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(go, [a, b]))
        codes = sorted(r.status_code for r in results)
        assert codes in ([200, 409], [201, 409]), [r.text for r in results]
        if _round == 0:
            assert codes == [201, 409]
    with server.client() as c:
        v = c.get(f"/api/v1/environments/{owner}/race-env/versions/1.0.0").json()
        winner = (
            a
            if {f["sha256"] for f in v["files"]}
            == {hashlib.sha256(p.read_bytes()).hexdigest() for p in (a.wheel, a.sdist)}
            else b
        )
        for f in v["files"]:
            body = c.get(f["url"]).content
            assert hashlib.sha256(body).hexdigest() == f["sha256"]
        assert winner in (a, b)
        assert len(v["files"]) == 2


def test_parallel_uploads_and_downloads_exact(server: HubProcess, packages: PackageFactory) -> None:
    alice, owner = _user(server, "alice")
    versions = [f"1.0.{i}" for i in range(8)]
    pkgs = [packages.get("busy-env", v) for v in versions]
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda p: _upload(server, alice, owner, "busy-env", [p.wheel, p.sdist]), pkgs)
        )
    assert [r.status_code for r in results] == [201] * 8, [r.text for r in results]
    with server.client() as c:
        listed = c.get(f"/api/v1/environments/{owner}/busy-env/versions").json()
        assert sorted(v["version"] for v in listed) == sorted(versions)
        doc = c.get("/simple/busy-env/", headers={"Accept": JSON}).json()
    assert len(doc["files"]) == 16
    expected = {p.wheel.name: hashlib.sha256(p.wheel.read_bytes()).hexdigest() for p in pkgs}
    expected |= {p.sdist.name: hashlib.sha256(p.sdist.read_bytes()).hexdigest() for p in pkgs}
    urls = [(f["url"], f["filename"]) for f in doc["files"]] * 5  # 80 downloads

    def fetch(item: tuple[str, str]) -> bool:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            body = c.get(item[0]).content
        return hashlib.sha256(body).hexdigest() == expected[item[1]]

    with ThreadPoolExecutor(16) as pool:
        ok = list(pool.map(fetch, urls))
    assert all(ok) and len(ok) == 80
    with server.client() as c:
        d = c.get(f"/api/v1/environments/{owner}/busy-env/downloads").json()
    assert d["total"] == 80 and d["last_30_days"] == 80


def test_new_version_visible_to_every_worker(server: HubProcess, packages: PackageFactory) -> None:
    """Each worker caches index pages; a write in one worker is seen by the others at once."""
    alice, owner = _user(server, "alice")
    assert (
        _upload(server, alice, owner, "gen-env", [packages.get("gen-env", "1.0.0").wheel]).status_code == 201
    )
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for _ in range(20):  # warm the caches of both workers (new connections spread over workers)
            assert c.get("/simple/gen-env/", headers={"Connection": "close"}).status_code == 200
        assert (
            _upload(server, alice, owner, "gen-env", [packages.get("gen-env", "1.1.0").wheel]).status_code
            == 201
        )
        for _ in range(20):
            r = c.get("/simple/gen-env/", headers={"Connection": "close"})
            assert "gen_env-1.1.0-py3-none-any.whl" in r.text
