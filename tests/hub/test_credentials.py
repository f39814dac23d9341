"""Derived and rotated credentials against a real two-worker hub, on SQLite and on PostgreSQL: a web
session keeps the limits of the token that signed it in and dies with it, the cookie is no API token,
worker tokens never sign in, restricted admin tokens stay restricted, and the embedded check worker's
token rotation neither breaks another hub instance's worker nor leaves a revoked token in any
worker's caller cache (issue 22, item 4). See "Web pages" and "Credentials" in hub/README.md."""

from __future__ import annotations

import datetime as dt
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from hub.auth import add_token, hash_token
from hub.db import Database
from hub.settings import Settings
from hub.testing import HubProcess, run_hub
from tests.hub.helpers import make_wheel

H = {"Accept": "text/html"}
# Requests per probe: each opens a new connection, so with two uvicorn workers both answer some of
# them (a right that one worker's caller cache still grants shows up as a mix of answers).
PROBES = 12


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    url = pg = None
    db_name = f"vf_creds_{secrets.token_hex(4)}"
    if request.param == "postgres":
        pg = request.getfixturevalue("postgres_server")
        url = pg.create_database(db_name)
    with run_hub(tmp_path_factory.mktemp("hub"), database_url=url, workers=2) as h:
        h.extra["database_url"] = url
        yield h
    if pg is not None:
        pg.drop_database(db_name)


def _settings(h: HubProcess) -> Settings:
    return Settings(data_dir=h.data_dir, database_url=h.extra["database_url"], migrate_on_start=False)


def _sql(h: HubProcess, sql: str, **params: Any) -> list[Any]:
    db = Database(_settings(h).resolved_database_url)
    try:
        with db.engine.begin() as conn:
            res = conn.execute(text(sql), params)
            return list(res) if res.returns_rows else []
    finally:
        db.dispose()


def _user(h: HubProcess, prefix: str, admin: bool = False) -> tuple[str, str]:
    name = f"{prefix}-{secrets.token_hex(3)}"
    with h.client(h.admin_token) as c:
        r = c.post("/api/v1/users", json={"name": name, "admin": admin})
        assert r.status_code == 201, r.text
        return name, r.json()["token"]


def _token(h: HubProcess, owner_token: str, **body: Any) -> tuple[int, str]:
    with h.client(owner_token) as c:
        r = c.post("/api/v1/tokens", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["token"]


def _private_env(h: HubProcess, owner: str, token: str) -> str:
    name = f"creds-env-{secrets.token_hex(3)}"
    fn, content = make_wheel(name, "1.0")
    with h.client(token) as c:
        r = c.post(f"/api/v1/environments/{owner}/{name}/versions",
                   files=[("files", (fn, content, "application/octet-stream"))], data={"private": "true"})
        assert r.status_code == 201, r.text
    return name


def _sign_in(h: HubProcess, token: str) -> httpx.Response:
    with h.client(headers=H) as c:
        c.get("/signin")
        return c.post("/signin", data={"token": token, "csrf": c.cookies["vfhub_csrf"]}, follow_redirects=False)


def _session(h: HubProcess, token: str) -> str:
    r = _sign_in(h, token)
    assert r.status_code == 303, r.text
    return r.cookies["vfhub_session"]


def _page_codes(h: HubProcess, session: str, path: str) -> set[int]:
    codes = set()
    for _ in range(PROBES):
        with h.client(headers={**H, "Cookie": f"vfhub_session={session}"}) as c:
            codes.add(c.get(path).status_code)
    return codes


def _api_codes(h: HubProcess, token: str, method: str, path: str, **kw: Any) -> set[int]:
    codes = set()
    for _ in range(PROBES):
        with h.client(token) as c:
            codes.add(c.request(method, path, **kw).status_code)
    return codes


def _bump(h: HubProcess) -> None:
    """An unrelated write: every worker's caches move to a new generation."""
    with h.client(h.admin_token) as c:
        assert c.post("/api/v1/orgs", json={"name": f"bump-{secrets.token_hex(3)}"}).status_code == 201


def test_a_session_dies_when_its_token_is_revoked(server: HubProcess) -> None:
    alice, first = _user(server, "alice")
    env = _private_env(server, alice, first)
    tid, signer = _token(server, first, scope="read")
    session = _session(server, signer)
    assert _page_codes(server, session, f"/{alice}/{env}") == {200}  # both workers cache the session
    with server.client(first) as c:
        assert c.delete(f"/api/v1/tokens/{tid}").status_code == 200
    assert _page_codes(server, session, f"/{alice}/{env}") == {404}
    _bump(server)
    assert _page_codes(server, session, f"/{alice}/{env}") == {404}


def test_a_session_expires_with_its_token(server: HubProcess) -> None:
    alice, first = _user(server, "alice")
    env = _private_env(server, alice, first)
    tid, signer = _token(server, first, scope="read", expires_in_days=1)
    r = _sign_in(server, signer)
    assert r.status_code == 303
    assert int(r.headers["set-cookie"].split("Max-Age=")[1].split(";")[0]) <= 86400
    session = r.cookies["vfhub_session"]
    with server.client(first) as c:
        toks = {t["id"]: t for t in c.get("/api/v1/tokens").json()}
    mine = [t for t in toks.values() if t["id"] != tid and t["name"] == "web session"]
    assert len(mine) == 1 and mine[0]["expires_at"] <= toks[tid]["expires_at"]
    # The signing token runs out (moved into the past here) before the session was ever used.
    past = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=1)
    _sql(server, "UPDATE tokens SET expires_at = :p WHERE id = :i", p=past, i=tid)
    assert _page_codes(server, session, f"/{alice}/{env}") == {404}


def test_a_session_cannot_sign_in_again(server: HubProcess) -> None:
    _alice, first = _user(server, "alice")
    session = _session(server, first)
    r = _sign_in(server, session)
    assert r.status_code == 401 and "vfhub_session" not in r.cookies


def test_the_cookie_is_no_api_token_and_an_api_token_is_no_cookie(server: HubProcess) -> None:
    alice, first = _user(server, "alice")
    env = _private_env(server, alice, first)
    session = _session(server, first)
    assert _api_codes(server, session, "GET", "/api/v1/whoami") == {401}
    assert _api_codes(server, session, "GET", f"/api/v1/environments/{alice}/{env}") == {401}
    with server.client() as c:  # nor as the index's Basic password
        assert c.get(f"/{alice}/simple/{env}/", auth=("__token__", session)).status_code == 401
    # An API token put in the cookie is not a session: the page is served anonymously.
    assert _page_codes(server, first, f"/{alice}/{env}") == {404}
    assert _page_codes(server, session, f"/{alice}/{env}") == {200}


def test_a_session_is_no_index_password_even_on_the_cached_fast_path(server: HubProcess) -> None:
    """The index answers cached pages in front of the framework (``hub.index.CachedIndexPages``) from
    the principal cache: a session that every worker has cached (from its pages) and a page in the
    page cache must still be refused there, as on the routes."""
    alice, first = _user(server, "alice")
    env = _private_env(server, alice, first)
    session = _session(server, first)
    path = f"/{alice}/simple/{env}/"
    for _ in range(PROBES):  # the private page in every worker's page cache
        with server.client() as c:
            assert c.get(path, auth=("__token__", first)).status_code == 200
    assert _page_codes(server, session, f"/{alice}/{env}") == {200}  # the session in every principal cache
    codes = set()
    for _ in range(PROBES):
        with server.client() as c:
            codes.add(c.get(path, auth=("__token__", session)).status_code)
            codes.add(c.get(path, headers={"Authorization": f"Bearer {session}"}).status_code)
    assert codes == {401}


def test_a_worker_token_cannot_sign_in(server: HubProcess) -> None:
    from hub.core import Hub

    name, _first = _user(server, "worker")
    hub = Hub(_settings(server))
    try:
        with hub.db.session() as s:
            from hub.queries import owner_by_name

            secret, _tok = add_token(s, owner_by_name(s, name, "user"), scope="worker")
    finally:
        hub.close()
    r = _sign_in(server, secret)
    assert r.status_code == 403 and "vfhub_session" not in r.cookies


def test_a_restricted_admin_token_and_its_session_stay_restricted(server: HubProcess) -> None:
    alice, first = _user(server, "alice")
    env_a = _private_env(server, alice, first)
    env_b = _private_env(server, alice, first)
    _boss, boss_first = _user(server, "boss", admin=True)
    _tid, limited = _token(server, boss_first, scope="write", environment=f"{alice}/{env_a}")
    session = _session(server, limited)
    assert _page_codes(server, session, f"/{alice}/{env_a}") == {200}
    assert _page_codes(server, session, f"/{alice}/{env_b}") == {404}
    with server.client(limited) as c:
        assert c.get(f"/api/v1/environments/{alice}/{env_b}").status_code == 404
        # Hub-wide admin acts (users, re-checks elsewhere) need an unrestricted admin token.
        assert c.post("/api/v1/users", json={"name": f"x-{secrets.token_hex(3)}"}).status_code == 403
        pub = f"creds-pub-{secrets.token_hex(3)}"
        with server.client(first) as owner:
            fn, content = make_wheel(pub, "1.0")
            assert owner.post(f"/api/v1/environments/{alice}/{pub}/versions",
                              files=[("files", (fn, content, "application/octet-stream"))]).status_code == 201
        assert c.post(f"/api/v1/environments/{alice}/{pub}/versions/1.0/checks").status_code == 403
        # ... nor read what only admins and members see, such as an organisation's members.
        org = f"org-{secrets.token_hex(3)}"
        with server.client(first) as owner:
            assert owner.post("/api/v1/orgs", json={"name": org}).status_code == 201
        assert "members" not in c.get(f"/api/v1/orgs/{org}").json()
    with server.client(boss_first) as c:
        assert "members" in c.get(f"/api/v1/orgs/{org}").json()


def _claims(h: HubProcess, token: str) -> set[int]:
    return _api_codes(h, token, "POST", "/api/v1/check-jobs/claim", json={"worker": "probe"})


def test_embedded_worker_tokens_of_several_instances(server: HubProcess) -> None:
    """Each `vf hub serve --with-worker` on one database gets its own worker token: starting another
    instance leaves the running ones' workers working; only a token no instance has used for a while
    is rotated away, and then no worker of the hub accepts it any more, cached or not."""
    from hub.cli import embedded_worker_token

    settings = _settings(server)
    first = embedded_worker_token(settings)
    assert _claims(server, first) == {200}  # cached by both workers
    second = embedded_worker_token(settings)
    _bump(server)
    assert _claims(server, first) == {200} and _claims(server, second) == {200}
    # The first instance is gone: its token has not been used for an hour.
    old = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
    _sql(server, "UPDATE tokens SET last_used_at = :o, created_at = :o WHERE token_hash = :d", o=old,
         d=hash_token(first))
    third = embedded_worker_token(settings)
    assert _claims(server, first) == {401}
    assert _claims(server, second) == {200} and _claims(server, third) == {200}


def test_a_revoked_token_is_refused_by_every_worker(server: HubProcess) -> None:
    _alice, first = _user(server, "alice")
    tid, other = _token(server, first, scope="read")
    assert _api_codes(server, other, "GET", "/api/v1/whoami") == {200}
    with server.client(first) as c:
        assert c.delete(f"/api/v1/tokens/{tid}").status_code == 200
    assert _api_codes(server, other, "GET", "/api/v1/whoami") == {401}


def test_sign_out_ends_the_session_on_every_worker(server: HubProcess, tmp_path: Path) -> None:
    alice, first = _user(server, "alice")
    env = _private_env(server, alice, first)
    with server.client(headers=H) as c:
        c.get("/signin")
        csrf = c.cookies["vfhub_csrf"]
        assert c.post("/signin", data={"token": first, "csrf": csrf}).status_code in (200, 303)
        session = c.cookies["vfhub_session"]
        assert _page_codes(server, session, f"/{alice}/{env}") == {200}
        assert c.post("/signout", data={"csrf": csrf}).status_code in (200, 303)
    assert _page_codes(server, session, f"/{alice}/{env}") == {404}


def _serve_with_worker(data: Path, admin: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    from hub.testing import free_port, hub_env

    port = free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hub", "serve", "--with-worker", "--port", str(port),
                                 "--log-level", "warning"], env=hub_env(data, admin_token=admin), stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(Path(__file__).resolve().parents[2]))
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(log.read_text())


def _embedded(data: Path) -> list[tuple[int, bool]]:
    db = Database(Settings(data_dir=data, migrate_on_start=False).resolved_database_url)
    try:
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, revoked_at FROM tokens WHERE name = 'serve --with-worker'"
                                     " ORDER BY id")).all()
        return [(i, r is not None) for i, r in rows]
    finally:
        db.dispose()


def test_serve_with_worker_instances_on_one_database(tmp_path: Path) -> None:
    """Two `vf hub serve --with-worker` on one database: the second start leaves the first's worker
    token alone, and each instance revokes its own token when it stops."""
    data, admin = tmp_path / "data", "vfh_" + secrets.token_urlsafe(32)
    first, _url = _serve_with_worker(data, admin, tmp_path / "first.log")
    try:
        assert [revoked for _i, revoked in _embedded(data)] == [False]
        second, _url2 = _serve_with_worker(data, admin, tmp_path / "second.log")
        try:
            assert [revoked for _i, revoked in _embedded(data)] == [False, False]
        finally:
            second.terminate()
            second.wait(timeout=60)
        assert [revoked for _i, revoked in _embedded(data)] == [False, True]
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert [revoked for _i, revoked in _embedded(data)] == [True, True]
