"""The adversarial review's findings, each written as the attack against a real hub process over real
HTTP (PostgreSQL where the problem is PostgreSQL's). See hub/README.md for the policies they pin."""

from __future__ import annotations

import html
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess, run_hub
from tests.hub.helpers import PackageFactory, make_sdist, make_wheel


def _user(h: HubProcess, name: str) -> str:
    with h.client(h.admin_token) as c:
        r = c.post("/api/v1/users", json={"name": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def _publish(h: HubProcess, token: str, owner: str, name: str, files: list[tuple[str, bytes]], **data: str):
    with h.client(token) as c:
        return c.post(
            f"/api/v1/environments/{owner}/{name}/versions",
            files=[("files", (fn, content, "application/octet-stream")) for fn, content in files],
            data=data,
        )


def _publish_pkg(h: HubProcess, token: str, owner: str, pkg) -> None:  # type: ignore[no-untyped-def]
    r = _publish(h, token, owner, pkg.normalized, [(p.name, p.read_bytes()) for p in (pkg.wheel, pkg.sdist)])
    assert r.status_code in (200, 201), r.text


@pytest.fixture(scope="module")
def shared_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """One SQLite hub process for the tests that need nothing special (they use distinct names)."""
    with run_hub(tmp_path_factory.mktemp("shared-hub")) as h:
        yield h


# ------------------------------------------------------------------------------------------ item 1
def _run_pip(cmd: str, target: Path) -> None:
    """Run one ``pip install ...`` command as a user would, into the virtualenv ``target`` (made on
    first use, without pip: this pip installs into it with ``--python``; no cache, no config), so what
    an earlier command installed counts as installed for the next."""
    if not (target / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    argv = shlex.split(cmd)
    assert argv[:2] == ["pip", "install"], cmd
    full = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), *argv[1:], "--no-cache-dir",
            "--disable-pip-version-check", "--no-input", "-q", "--isolated"]  # fmt: skip
    res = subprocess.run(full, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def _installed(target: Path) -> dict[str, str]:
    out = {}
    for d in target.glob("lib/python3*/site-packages/*.dist-info"):
        name, _, version = d.name[: -len(".dist-info")].partition("-")
        out[name] = version
    return out


def test_install_instructions_never_mix_indexes(tmp_path: Path, packages: PackageFactory) -> None:
    """A second hub plays the public index, where an attacker took the environment's name and its hub
    dependency's name with higher versions. The recommended pip commands install exactly the hub's
    releases; the old ``--extra-index-url`` command installs the attacker's."""
    with run_hub(tmp_path / "public") as public:
        with run_hub(tmp_path / "hub", extra_env={"VF_HUB_PUBLIC_INDEX_URL": public.url + "/simple/"}) as h:
            alice = _user(h, "alice")
            _publish_pkg(h, alice, "alice", packages.get("conf-dep", "1.0.0"))
            env = packages.get("conf-env", "1.0.0", dependencies=["conf-dep>=1", "tiny-public>=1"])
            _publish_pkg(h, alice, "alice", env)
            mallory = _user(public, "mallory")
            for pkg in (packages.get("conf-env", "99.0"), packages.get("conf-dep", "99.0"),
                        packages.get("tiny-public", "1.0.0")):  # fmt: skip
                _publish_pkg(public, mallory, "mallory", pkg)

            with h.client() as c:
                detail = c.get("/api/v1/environments/alice/conf-env").json()
                page = c.get("/alice/conf-env").text
            pip = detail["install"]
            assert "--extra-index-url" not in pip and "--extra-index-url" not in page
            commands = detail["install_commands"]["pip"]
            assert pip == " && ".join(commands)
            assert all(cmd.count("--index-url") == 1 and "--isolated" in cmd for cmd in commands), pip
            # Public dependencies (the hub dependency's too) from the public index, then the hub alone.
            assert commands == [f"pip install --isolated --index-url {public.url}/simple/ 'tiny-public>=1'",
                                f"pip install --isolated --index-url {h.url}/alice/simple/ conf-env==1.0.0"]
            assert detail["install_commands"]["vf"] == "vf install alice/conf-env@1.0.0"
            assert detail["install_commands"]["uv"] == (
                f"uv pip install --no-config --index-url {public.url}/simple/ 'tiny-public>=1' && "
                f"uv pip install --no-config --index-url {h.url}/alice/simple/ conf-env==1.0.0"
            )
            assert detail["install_commands"]["note"] is None
            shown = re.search(r'<pre id="install"><code>(.*?)</code></pre>', page, re.S)
            assert shown is not None and html.unescape(shown.group(1)) == "\n".join(commands)

            target = tmp_path / "site"
            for cmd in commands:
                _run_pip(cmd, target)
            assert _installed(target) == {"conf_env": "1.0.0", "conf_dep": "1.0.0", "tiny_public": "1.0.0"}

            # The attack the old instruction allowed: pip takes the highest version across both indexes.
            old = tmp_path / "old"
            _run_pip(
                f"pip install --index-url {h.url}/simple/ --extra-index-url {public.url}/simple/ conf-env",
                old,
            )
            assert _installed(old)["conf_env"] == "99.0"


def test_names_of_public_packages_cannot_be_taken(tmp_path: Path) -> None:
    """Publishing ``requests`` (or any name on the protected list) is refused on both upload paths and
    when claiming the name; a hub admin may claim one for a user, and an operator may allow one, or
    protect more (VF_HUB_PUBLIC_NAMES_FILE)."""
    more = tmp_path / "more-names.txt"
    more.write_text("# the operator's own list\nLeft_Pad\n")
    env = {"VF_HUB_ALLOWED_PUBLIC_NAMES": '["numpy"]', "VF_HUB_PUBLIC_NAMES_FILE": str(more)}
    with run_hub(tmp_path / "hub", extra_env=env) as h:
        alice = _user(h, "alice")
        r = _publish(h, alice, "alice", "left-pad", [make_wheel("left-pad", "1.0")])
        assert r.status_code == 403 and "public index" in r.json()["detail"]
        wheel = make_wheel("requests", "999.0")
        r = _publish(h, alice, "alice", "requests", [wheel])
        assert r.status_code == 403 and "public index" in r.json()["detail"]
        with httpx.Client(base_url=h.url, auth=("__token__", alice), timeout=60) as c:
            r = c.post("/legacy/", files={"content": (wheel[0], wheel[1])}, data={":action": "file_upload"})
            assert r.status_code == 403, r.text
            r = c.post("/api/v1/environments", json={"owner": "alice", "name": "Requests"})
            assert r.status_code == 403
            # Another spelling of a protected name is the same name.
            r = c.post("/api/v1/environments", json={"owner": "alice", "name": "python_dateutil"})
            assert r.status_code == 403
            assert c.get("/simple/requests/").status_code == 404
        # The operator's exception.
        assert _publish(h, alice, "alice", "numpy", [make_wheel("numpy", "0.0.1")]).status_code == 201
        # The admin's claim, after which the owner publishes normally.
        with h.client(h.admin_token) as c:
            assert c.post("/api/v1/environments", json={"owner": "alice", "name": "requests"}).status_code == 201
        assert _publish(h, alice, "alice", "requests", [wheel]).status_code == 201


def test_public_names_list_is_data_with_a_source() -> None:
    from hub.names import PUBLIC_NAMES_FILE, public_names

    head = PUBLIC_NAMES_FILE.read_text().splitlines()[:10]
    assert any("python -m hub.names --write" in line for line in head)
    names = public_names()
    assert {"requests", "numpy", "torch", "openai", "pydantic"} <= names
    assert "conf-env" not in names


def test_the_protected_list_holds_this_projects_dependency_closure() -> None:
    """Every public distribution this repository and its environments depend on (transitively, as
    installed here) is protected: a new dependency fails this test until `python -m hub.names
    --write` lists it. The repository's own distributions are never listed."""
    from hub.names import dependency_closure, own_distributions, public_names, root_requirements

    own = own_distributions()
    closure, declared_not_installed = dependency_closure(root_requirements(), own)
    assert {"fastapi", "sqlalchemy", "datasets"} <= closure  # (the closure is followed at all)
    assert sorted((closure | declared_not_installed) - public_names()) == []
    assert not own & public_names()


# ------------------------------------------------------------------------------------------ item 2
@pytest.fixture
def pg_url(postgres_database_factory: Callable[..., str]) -> str:
    return postgres_database_factory()


def test_search_tag_flood_is_refused_and_tags_are_one_query(
    tmp_path: Path, pg_url: str, packages: PackageFactory
) -> None:
    with run_hub(tmp_path / "hub", database_url=pg_url) as h:
        alice = _user(h, "alice")
        _publish_pkg(h, alice, "alice", packages.get("tagged-ab", "1.0.0", tags=["alpha", "beta"]))
        _publish_pkg(h, alice, "alice", packages.get("tagged-a", "1.0.0", tags=["alpha"]))
        with h.client() as c:
            flood = "&".join(f"tag=t{i}" for i in range(1000))
            r = c.get(f"/api/v1/environments?{flood}")
            assert r.status_code == 422 and "at most 10" in r.text
            r = c.get("/?" + flood, headers={"Accept": "text/html"})
            assert r.status_code == 422
            long_tag = "x" * 65
            assert c.get(f"/api/v1/environments?tag={long_tag}").status_code == 422

            def names(query: str) -> set[str]:
                r = c.get(f"/api/v1/environments?{query}")
                assert r.status_code == 200, r.text
                return {i["name"] for i in r.json()["items"]}

            assert names("tag=alpha") == {"tagged-ab", "tagged-a"}
            assert names("tag=alpha&tag=beta") == {"tagged-ab"}
            assert names("tag=alpha&tag=beta&tag=beta") == {"tagged-ab"}
            assert names("tag=alpha&tag=gamma") == set()
            many = "&".join(f"tag={t}" for t in ["alpha", "beta", *[f"z{i}" for i in range(8)]])
            assert names(many) == set()
        assert "env_tags" not in h.logs()  # no SQL (let alone with parameters) in the logs


def test_search_builds_one_tag_subquery(pg_url: str, tmp_path: Path) -> None:
    from sqlalchemy import event

    from hub import search
    from hub.core import Hub
    from hub.testing import make_settings

    hub = Hub(make_settings(tmp_path / "h", database_url=pg_url))
    seen: list[str] = []
    event.listen(hub.db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    try:
        counts = []
        for n in (1, 10):
            seen.clear()
            with hub.db.session() as s:
                search.search_envs(s, None, tags=[f"t{i}" for i in range(n)])
            counts.append((len(seen), sum(sql.count("env_tags") for sql in seen)))
        assert counts[0] == counts[1]
    finally:
        hub.close()


def test_postgres_statement_timeout_cancels_long_queries(pg_url: str, tmp_path: Path) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from hub.core import Hub
    from hub.testing import make_settings

    hub = Hub(make_settings(tmp_path / "h", database_url=pg_url))
    try:
        with hub.db.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "5s"
    finally:
        hub.close()
    hub = Hub(make_settings(tmp_path / "h2", database_url=pg_url, db_statement_timeout_ms=50))
    try:
        with hub.db.engine.connect() as conn, pytest.raises(OperationalError) as info:
            conn.execute(text("SELECT pg_sleep(30)"))
        assert getattr(info.value.orig, "sqlstate", None) == "57014"
        from hub.app import _statement_timeout

        assert _statement_timeout(info.value)
    finally:
        hub.close()


# ------------------------------------------------------------------------------------------ item 4
def test_published_versions_are_immutable(tmp_path: Path, packages: PackageFactory) -> None:
    """Another spelling of a version, a local version, another spelling of the file name, a build-tag
    wheel or a second sdist never join a published release; pip gets exactly the original."""
    real = packages.get("imm-env", "1.0")
    wheel = (real.wheel.name, real.wheel.read_bytes())
    sdist = (real.sdist.name, real.sdist.read_bytes())
    with run_hub(tmp_path / "hub") as h:
        alice = _user(h, "alice")
        assert _publish(h, alice, "alice", "imm-env", [wheel]).status_code == 201
        # The missing counterpart (same metadata) may join; nothing else may.
        assert _publish(h, alice, "alice", "imm-env", [sdist]).status_code == 201
        attacks = {
            "same release, other spelling": [make_wheel("imm-env", "1.0.0")],
            "local version": [make_wheel("imm-env", "1.0+evil")],
            "other file-name spelling": [("Imm_Env-1.0-py3-none-any.whl", wheel[1])],
            "build tag": [("imm_env-1.0-1-py3-none-any.whl", wheel[1])],
            "second sdist": [("Imm_Env-1.0.tar.gz", sdist[1])],
        }
        for what, files in attacks.items():
            r = _publish(h, alice, "alice", "imm-env", files)
            assert r.status_code in (400, 409), (what, r.status_code, r.text)
        assert "PEP 440" in _publish(h, alice, "alice", "imm-env", attacks["same release, other spelling"]).text
        with httpx.Client(base_url=h.url, auth=("__token__", alice), timeout=60) as c:
            fn, data = make_wheel("imm-env", "1.0.0")
            r = c.post("/legacy/", files={"content": (fn, data)}, data={":action": "file_upload"})
            assert r.status_code == 409, r.text
        # A counterpart whose metadata differs from the release is not "the same content".
        later = packages.get("imm-env", "2.0")
        assert _publish(h, alice, "alice", "imm-env", [(later.wheel.name, later.wheel.read_bytes())]).status_code == 201
        r = _publish(h, alice, "alice", "imm-env", [make_sdist("imm-env", "2.0")])
        assert r.status_code == 409 and "summary" in r.text
        with h.client() as c:
            files = {f["filename"] for f in c.get("/api/v1/environments/alice/imm-env/versions/1.0.0").json()["files"]}
            assert files == {wheel[0], sdist[0]}
            # A 5,000-digit version is a clear 400, never a 500.
            assert c.get("/api/v1/environments/alice/imm-env/versions/" + "9" * 5000).status_code == 400
            assert c.get("/api/v1/environments/alice/imm-env/versions/" + "9" * 60).status_code == 404
        for spec in ("imm-env==1.0", "imm-env==1.0.0"):
            dest = tmp_path / f"dl-{spec}"
            res = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest),
                 "--index-url", f"{h.url}/simple/", "--no-cache-dir", "--disable-pip-version-check", "-q", spec],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            assert [p.name for p in dest.iterdir()] == [wheel[0]]


# ------------------------------------------------------------------------------------------ item 5
def _eval(model: str, **extra: object) -> dict[str, object]:
    return {"metadata": {"model": model, "avg_reward": 0.5, "num_examples": 2, **extra}, "summary": {}}


def test_eval_results_are_bounded_paginated_and_owner_deletable(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub", extra_env={"VF_HUB_MAX_EVALS_PER_USER": "3"}) as h:
        alice, bob, carol = _user(h, "alice"), _user(h, "bob"), _user(h, "carol")
        assert _publish(h, alice, "alice", "eval-env", [make_wheel("eval-env", "1.0")]).status_code == 201
        url = "/api/v1/environments/alice/eval-env"
        with h.client(bob) as c:
            deep: object = 1
            for _ in range(200):
                deep = {"a": deep}
            r = c.post(f"{url}/versions/1.0/evals", json=_eval("deep", notes=deep))
            assert r.status_code == 422 and "nest" in r.text
            # Raw JSON too deep for the parser or too large for the bound: never stored, never a 500.
            raw = b'{"metadata": {"model": "x", "avg_reward": 1, "n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
            r = c.post(f"{url}/versions/1.0/evals", content=raw, headers={"Content-Type": "application/json"})
            assert r.status_code in (400, 422), r.status_code
            huge = b"{\"metadata\": {\"model\": \"" + b"x" * (2 * 1024 * 1024) + b"\"}}"
            r = c.post(f"{url}/versions/1.0/evals", content=huge, headers={"Content-Type": "application/json"})
            assert r.status_code == 413
            big = {"blob": "x" * 300_000}
            assert c.post(f"{url}/versions/1.0/evals", json=_eval("big", **big)).status_code == 413
            ids = [c.post(f"{url}/versions/1.0/evals", json=_eval(f"m{i}")).json()["id"] for i in range(3)]
            r = c.post(f"{url}/versions/1.0/evals", json=_eval("m3"))
            assert r.status_code == 403 and "delete" in r.text
        with h.client() as c:
            assert c.get(f"{url}/leaderboard").status_code == 200
            assert c.get("/alice/eval-env").status_code == 200
            r = c.get(f"{url}/evals", params={"per_page": 2})
            assert r.status_code == 200 and len(r.json()) == 2 and r.headers["x-total-count"] == "3"
            assert 'rel="next"' in r.headers["link"]
            r2 = c.get(f"{url}/evals", params={"per_page": 2, "page": 2})
            assert [e["id"] for e in r.json() + r2.json()] == sorted(ids, reverse=True)
            assert "link" not in r2.headers
            assert c.get(f"{url}/evals", params={"per_page": 1000}).status_code == 422
        with h.client(carol) as c:
            assert c.delete(f"{url}/evals/{ids[0]}").status_code == 403
            assert c.delete(f"{url}/evals/{2**63}").status_code == 422  # a huge id is a 422, not a 500
        with h.client(alice) as c:  # the environment's owner removes anyone's result
            assert c.delete(f"{url}/evals/{ids[0]}").status_code == 204
        with h.client(bob) as c:  # which frees the submitter's quota
            assert c.post(f"{url}/versions/1.0/evals", json=_eval("m4")).status_code == 201


# ------------------------------------------------------------------------------------------ item 7
LIMITS = {"VF_HUB_RATE_LIMIT_ENABLED": "1", "VF_HUB_AUTH_FAIL_BURST": "3", "VF_HUB_AUTH_FAIL_PER_MINUTE": "1"}


def _bad() -> str:
    import secrets

    return "vfh_" + secrets.token_urlsafe(32)


def test_failed_login_limiter_never_blocks_valid_tokens(tmp_path: Path) -> None:
    """Behind a trusted proxy: failures are limited per client address and per token prefix; a valid
    token is never refused; a stale session cookie is no failure and is cleared."""
    env = {**LIMITS, "VF_HUB_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with run_hub(tmp_path / "hub", extra_env=env) as h:
        alice = _user(h, "alice")
        with h.client() as c:
            for _ in range(10):  # a stale cookie on every page view
                r = c.get("/", headers={"Cookie": f"vfhub_session={_bad()}", "Accept": "text/html"})
                assert r.status_code == 200
                assert 'vfhub_session=""' in r.headers.get("set-cookie", "")
            # Many clients behind the proxy, one of them guessing: only that address is slowed down.
            one = {"X-Forwarded-For": "203.0.113.7"}
            codes = [c.get("/api/v1/whoami", headers={**one, "Authorization": f"Bearer {_bad()}"}).status_code
                     for _ in range(5)]  # fmt: skip
            assert codes == [401, 401, 401, 429, 429]
            for who in (one, {"X-Forwarded-For": "203.0.113.8"}, {}):
                r = c.get("/api/v1/whoami", headers={**who, "Authorization": f"Bearer {alice}"})
                assert r.status_code == 200, r.text
            assert c.get("/api/v1/whoami", headers={"X-Forwarded-For": "203.0.113.9",
                                                     "Authorization": f"Bearer {_bad()}"}).status_code == 401  # fmt: skip
            # One token tried from many addresses: limited by its prefix.
            stale = _bad()
            codes = [c.get("/api/v1/whoami", headers={"X-Forwarded-For": f"198.51.100.{i}",
                                                      "Authorization": f"Bearer {stale}"}).status_code
                     for i in range(5)]  # fmt: skip
            assert codes == [401, 401, 401, 429, 429]


def test_forwarded_addresses_are_ignored_unless_the_proxy_is_configured(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub", extra_env=LIMITS) as h, h.client() as c:
        codes = [c.get("/api/v1/whoami", headers={"X-Forwarded-For": f"192.0.2.{i}",
                                                  "Authorization": f"Bearer {_bad()}"}).status_code
                 for i in range(5)]  # fmt: skip
        assert codes == [401, 401, 401, 429, 429]


def test_web_sessions_are_server_side_with_csrf(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub", extra_env={"VF_HUB_FORWARDED_ALLOW_IPS": "127.0.0.1"}) as h:
        alice = _user(h, "alice")
        r = _publish(h, alice, "alice", "secret-env", [make_wheel("secret-env", "1.0")], private="true")
        assert r.status_code == 201
        with h.client(headers={"Accept": "text/html"}) as c:
            # A cross-site form post carries no CSRF token: refused.
            assert c.post("/signin", data={"token": alice}).status_code == 403
            c.get("/signin")
            csrf = c.cookies["vfhub_csrf"]
            assert c.post("/signin", data={"token": alice, "csrf": "forged"}).status_code == 403
            r = c.post("/signin", data={"token": alice, "csrf": csrf}, follow_redirects=False)
            assert r.status_code == 303
            session = c.cookies["vfhub_session"]
            assert session != alice and "httponly" in r.headers["set-cookie"].lower()
            assert "secure" not in r.headers["set-cookie"].lower()
            assert c.get("/alice/secret-env").status_code == 200
            # The session serves pages only: the API does not take it as a token at all.
            with h.client(session) as api:
                assert api.post("/api/v1/orgs", json={"name": "via-cookie"}).status_code == 401
                assert api.get("/api/v1/whoami").status_code == 401
            assert c.post("/signout", data={"csrf": "forged"}).status_code == 403
            assert c.post("/signout", data={"csrf": csrf}).status_code in (200, 303)
        # Sign-out revoked the session on the server: a copy of the cookie is worthless.
        with h.client(headers={"Accept": "text/html", "Cookie": f"vfhub_session={session}"}) as c:
            assert c.get("/alice/secret-env").status_code == 404
        with h.client(session) as api:
            assert api.get("/api/v1/whoami").status_code == 401
        # Over HTTPS (a trusted proxy says so), the cookie is Secure.
        with h.client(headers={"X-Forwarded-Proto": "https"}) as c:
            r = c.get("/signin")
            assert "secure" in r.headers["set-cookie"].lower()
            token = re.search(r"vfhub_csrf=([^;]+)", r.headers["set-cookie"]).group(1)  # type: ignore[union-attr]
            c.cookies.clear()  # httpx keeps Secure cookies for https URLs only; send it by hand
            r = c.post("/signin", data={"token": alice, "csrf": token}, follow_redirects=False,
                       headers={"Cookie": f"vfhub_csrf={token}"})  # fmt: skip
            assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()


# ------------------------------------------------------------------------------------------ item 8
def _raw_upload_start(h: HubProcess, path: str, token: str | None, declared: int, sent: int):  # type: ignore[no-untyped-def]
    import socket

    boundary = "vfb0undary"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    head += f"Content-Length: {declared}\r\n\r\n"
    part = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="x-1.0.tar.gz"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()  # fmt: skip
    sock = socket.create_connection(("127.0.0.1", h.port), timeout=60)
    sock.sendall(head.encode() + part + b"\0" * (sent - len(part)))
    return sock


def _status_of(sock) -> int:  # type: ignore[no-untyped-def]
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1])


def test_credentials_are_checked_before_the_upload_body(tmp_path: Path) -> None:
    """An anonymous or wrong-token upload declaring 300 MB gets its 401 after 64 KiB were sent: the
    server never waits for (or spools) the rest."""
    with run_hub(tmp_path / "hub") as h:
        for path in ("/api/v1/environments/alice/big-env/versions", "/legacy/"):
            for token in (None, _bad()):
                sock = _raw_upload_start(h, path, token, 300 * 1024 * 1024, 64 * 1024)
                with sock:
                    assert _status_of(sock) == 401
        assert not list((h.data_dir / "tmp").glob("upload-*"))


def test_concurrent_uploads_are_bounded(tmp_path: Path) -> None:
    import time

    with run_hub(tmp_path / "hub", extra_env={"VF_HUB_MAX_CONCURRENT_UPLOADS": "1"}) as h:
        alice = _user(h, "alice")
        path = "/api/v1/environments/alice/slot-env/versions"
        stalled = _raw_upload_start(h, path, alice, 50 * 1024 * 1024, 64 * 1024)
        wheel = make_wheel("slot-env", "1.0")
        try:
            codes = []
            for _ in range(200):  # until the server has taken the stalled upload's slot
                codes.append(_publish(h, alice, "alice", "slot-env", [wheel]).status_code)
                if codes[-1] == 429:
                    break
                time.sleep(0.05)
            assert codes[-1] == 429 and set(codes) <= {429}, codes
        finally:
            stalled.close()
        for _ in range(200):  # the slot comes back once the server sees the client gone
            r = _publish(h, alice, "alice", "slot-env", [wheel])
            if r.status_code != 429:
                break
            time.sleep(0.05)
        assert r.status_code == 201, r.text


# ------------------------------------------------------------------------------------------ item 10
def test_admin_bootstrap_is_safe(tmp_path: Path) -> None:
    import os
    import secrets

    from hub.testing import hub_env

    data = tmp_path / "hub"
    # A token without the vfh_ shape is refused at start with one clear line (not accepted, then
    # rejected on every call).
    env = hub_env(data, admin_token="admin-password-123")
    res = subprocess.run([sys.executable, "-m", "hub", "serve", "--port", "0"], env=env, capture_output=True,
                         text=True, timeout=120, cwd=str(Path(__file__).resolve().parents[2]))  # fmt: skip
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "VF_HUB_ADMIN_TOKEN must be 'vfh_'" in lines[0], res.stderr
    first = "vfh_" + secrets.token_urlsafe(32)
    with run_hub(data, admin_token=first) as h:
        alice = _user(h, "alice")
        with h.client(alice) as c:
            for name in ("admin", "Admin", "ADMIN", "api", "simple", "files", "legacy", "signin", "healthz",
                         "robots.txt", "favicon.ico", "Robots_Txt", "openapi-json"):
                r = c.post("/api/v1/orgs", json={"name": name})
                assert r.status_code == 400 and "reserved" in r.text, (name, r.text)
    second = "vfh_" + secrets.token_urlsafe(32)
    with run_hub(data, admin_token=second) as h:
        with h.client(first) as c:
            assert c.get("/api/v1/whoami").status_code == 401  # the previous bootstrap token is revoked
        with h.client(second) as c:
            assert c.get("/api/v1/whoami").json()["name"] == "admin"
            assert c.get("/api/v1/tokens").status_code == 200
    assert os.stat(data / "hub.db").st_mode & 0o077 == 0  # hub.db is the owner's alone


def test_every_top_level_route_name_is_reserved(tmp_path: Path) -> None:
    from hub.app import create_app
    from hub.core import RESERVED_OWNERS
    from hub.testing import make_settings

    app = create_app(make_settings(tmp_path / "h"))
    try:
        firsts = set()
        for route in app.routes:
            seg = getattr(route, "path", "").lstrip("/").split("/", 1)[0]
            if seg and not seg.startswith("{"):
                firsts.add(seg)
        assert firsts and {s for s in firsts if not s.startswith("_")} <= RESERVED_OWNERS, firsts - RESERVED_OWNERS
    finally:
        app.state.hub.close()


# ------------------------------------------------------------------------------------------ item 9
def _gc(data: Path, *args: str, db: Path | None = None, storage: Path | None = None):  # type: ignore[no-untyped-def]
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB_")}
    if db is not None:
        env["VF_HUB_DATABASE_URL"] = f"sqlite:///{db}"
    if storage is not None:
        env["VF_HUB_STORAGE_PATH"] = str(storage)
    return subprocess.run([sys.executable, "-m", "hub", "gc", "--data", str(data), *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_gc_refuses_a_storage_its_database_does_not_know(tmp_path: Path) -> None:
    import os

    data, other = tmp_path / "hub", tmp_path / "other"
    with run_hub(data) as h:
        alice = _user(h, "alice")
        assert _publish(h, alice, "alice", "gc-safe-env", [make_wheel("gc-safe-env", "1.0")]).status_code == 201
    with run_hub(other):
        pass  # another hub: its own database, claimed with its own storage
    orphan = data / "files" / "files" / "ab" / ("ab" + "0" * 62) / "n0nce" / "lost-1.0.tar.gz"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left by a crash")
    os.utime(orphan, (1_000_000_000, 1_000_000_000))
    stored = sorted(p for p in (data / "files").rglob("*") if p.is_file())

    wrong_db = _gc(data, "--delete", db=tmp_path / "fresh.db")  # a database that never saw this storage
    assert wrong_db.returncode == 1 and "no record" in wrong_db.stderr
    foreign = _gc(data, "--delete", db=other / "hub.db", storage=data / "files")
    assert foreign.returncode == 1 and "another database" in foreign.stderr
    assert sorted(p for p in (data / "files").rglob("*") if p.is_file()) == stored

    dry = _gc(data)  # the default lists, deletes nothing
    assert dry.returncode == 0 and orphan.relative_to(data / "files").as_posix() in dry.stdout
    assert "would remove 1" in dry.stderr and orphan.exists()
    real = _gc(data, "--delete")
    assert real.returncode == 0 and "removed 1" in real.stderr and not orphan.exists()
    with run_hub(data) as h, h.client() as c:
        f = c.get("/api/v1/environments/alice/gc-safe-env/versions/1.0").json()["files"][0]
        assert c.get(f["url"]).status_code == 200


# ------------------------------------------------------------------------------------------ item 11
def test_visibility_is_the_owners_and_private_files_are_privately_cached(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub") as h:
        alice, bob = _user(h, "alice"), _user(h, "bob")
        with h.client(alice) as c:
            assert c.post("/api/v1/orgs", json={"name": "acme"}).status_code == 201
            assert c.put("/api/v1/orgs/acme/members/bob", json={"role": "write"}).status_code == 200
        r = _publish(h, alice, "acme", "vis-env", [make_wheel("vis-env", "1.0")], private="true")
        assert r.status_code == 201
        url = "/api/v1/environments/acme/vis-env"
        with h.client(alice) as c:
            f = c.get(f"{url}/versions/1.0").json()["files"][0]
            r = c.get(f["url"])
            assert r.status_code == 200 and r.headers["cache-control"] == "private, no-cache"
        with h.client(bob) as c:  # a member with write access publishes, but cannot publish it to the world
            r = c.patch(url, json={"private": False})
            assert r.status_code == 403 and "owner" in r.text
            assert c.get(url).json()["private"] is True
            # A push whose visibility disagrees with the environment's is an error that says what to do.
            r = _publish(h, bob, "acme", "vis-env", [make_wheel("vis-env", "1.1")], private="false")
            assert r.status_code == 409 and "vf visibility acme/vis-env public" in r.text and "private" in r.text
            assert _publish(h, bob, "acme", "vis-env", [make_wheel("vis-env", "1.1")], private="true").status_code == 201
        with h.client(alice) as c:  # an org admin may
            assert c.patch(url, json={"private": False}).json()["private"] is False
        with h.client() as c:
            r = c.get(f["url"])
            assert r.status_code == 200 and "immutable" not in r.headers["cache-control"]
            assert r.headers["cache-control"].startswith("public")
        assert _publish(h, bob, "acme", "vis-env", [make_wheel("vis-env", "1.2")], private="true").status_code == 409
        assert _publish(h, bob, "acme", "vis-env", [make_wheel("vis-env", "1.2")]).status_code == 201


# ------------------------------------------------------------------------------------------ item 6
def test_source_browsing_reads_the_sdist_once_and_never_renders_uploads(tmp_path: Path) -> None:
    from tests.hub.helpers import Member

    top = "src_env-1.0"
    members = [
        Member(f"{top}/a.py", b"print(1)\n"),
        Member(f"{top}/evil.html", b"<html><script>alert(document.cookie)</script></html>"),
        Member(f"{top}/logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
        Member(f'{top}/we"ird;name.html', b"\xff\xfe<html><script>alert(1)</script></html>"),
    ]
    with run_hub(tmp_path / "hub", extra_env={"VF_HUB_SOURCE_MAX_ARCHIVE_BYTES": "100000"}) as h:
        alice = _user(h, "alice")
        assert _publish(h, alice, "alice", "src-env", [make_sdist("src-env", "1.0", members)]).status_code == 201
        big = [Member("big_env-1.0/blob.txt", b"x" * 200_000)]
        assert _publish(h, alice, "alice", "big-env", [make_sdist("big-env", "1.0", big)]).status_code == 201
        api = "/api/v1/environments/alice/src-env/versions/1.0/source"
        with h.client() as c:
            listing = c.get(api).json()["files"]
            assert {f["path"] for f in listing} >= {"a.py", "evil.html", "logo.svg", 'we"ird;name.html'}
            # Take the stored archive away: everything is still served, from the index built once.
            (blob,) = (h.data_dir / "files" / "files").rglob("src_env-1.0.tar.gz")
            blob.unlink()
            assert c.get(f"{api}/a.py").text == "print(1)\n"
            for path in ("evil.html", "logo.svg"):
                r = c.get(f"{api}/{path}")
                assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
                assert r.headers["content-security-policy"] == "sandbox"
            r = c.get(f"{api}/we%22ird;name.html")
            assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
            disp = r.headers["content-disposition"]
            assert disp.startswith('attachment; filename="we_ird_name.html"; filename*=UTF-8\'\'we%22ird%3Bname.html')
            assert c.get("/alice/src-env/source/1.0/a.py").status_code == 200
            assert c.get(f"{api}/nope.py").status_code == 404
            r = c.get("/api/v1/environments/alice/big-env/versions/1.0/source")
            assert r.status_code == 413 and "too large to browse" in r.text


# ------------------------------------------------------------------------------------------ low
def test_restricted_tokens_stay_in_their_lane(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub") as h:
        alice = _user(h, "alice")
        for env in ("lane-a", "lane-b"):
            assert _publish(h, alice, "alice", env, [make_wheel(env, "1.0")]).status_code == 201
        assert _publish(h, alice, "alice", "lane-p", [make_wheel("lane-p", "1.0")], private="true").status_code == 201
        with h.client(alice) as c:
            only_a = c.post("/api/v1/tokens", json={"environment": "alice/lane-a"}).json()
            read = c.post("/api/v1/tokens", json={"scope": "read"}).json()
            owner_only = c.post("/api/v1/tokens", json={"owner": "alice", "scope": "read"}).json()
            other = c.post("/api/v1/tokens", json={"name": "other"}).json()
        b = "/api/v1/environments/alice/lane-b"
        with h.client(only_a["token"]) as c:
            assert c.put("/api/v1/environments/alice/lane-a/star").status_code == 200
            assert c.put(f"{b}/star").status_code == 403
            assert c.post(f"{b}/versions/1.0/evals", json=_eval("m")).status_code == 403
            assert c.post(f"{b}/versions/1.0/yank", json={}).status_code == 403
            assert c.get("/api/v1/tokens").status_code == 403
            assert c.delete(f"/api/v1/tokens/{other['id']}").status_code == 403
            # Listings show what the token may see: public environments, and of the private ones only
            # its own environment (lane-p is outside it).
            names = {i["name"] for i in c.get("/api/v1/environments").json()["items"]}
            assert names == {"lane-a", "lane-b"}
            assert "lane-p" not in c.get("/simple/").text
            assert {e["name"] for e in c.get("/api/v1/owners/alice").json()["environments"]} == names
            assert c.delete(f"/api/v1/tokens/{only_a['id']}").status_code == 200  # it may revoke itself
        with h.client(read["token"]) as c:
            assert c.get("/api/v1/tokens").status_code == 403
        with h.client(owner_only["token"]) as c:
            assert "lane-p" in c.get("/simple/").text
            assert {i["name"] for i in c.get("/api/v1/environments").json()["items"]} == {"lane-a", "lane-b", "lane-p"}
            assert c.get("/alice/simple/lane-p/").status_code == 200
        with h.client(other["token"]) as c:
            assert c.get("/api/v1/whoami").status_code == 200  # untouched by the restricted token's attempt


def test_head_answers_on_pages_api_and_index_without_counting(tmp_path: Path) -> None:
    with run_hub(tmp_path / "hub") as h:
        alice = _user(h, "alice")
        assert _publish(h, alice, "alice", "head-env", [make_wheel("head-env", "1.0")]).status_code == 201
        with h.client() as c:
            f = c.get("/api/v1/environments/alice/head-env/versions/1.0").json()["files"][0]
            for path in ("/", "/alice", "/alice/head-env", "/api/v1/environments", "/api/v1/environments/alice/head-env",
                         "/simple/", "/simple/head-env/", "/healthz", f["url"]):  # fmt: skip
                r = c.head(path)
                g = c.get(path)
                assert r.status_code == 200 and r.content == b"", path
                assert r.headers["content-type"] == g.headers["content-type"], path
            assert c.get("/api/v1/environments/alice/head-env/downloads").json()["total"] == 1  # the GET only


def test_a_writer_holding_sqlite_does_not_stall_the_server(tmp_path: Path) -> None:
    """An authenticated index request that must write (``last_used_at``) waits for SQLite's lock in a
    worker thread, never on the event loop: health checks and anonymous pages keep answering."""
    import sqlite3
    import threading

    with run_hub(tmp_path / "hub") as h:
        alice = _user(h, "alice")
        with h.client(alice) as c:
            fresh = c.post("/api/v1/tokens", json={"scope": "read"}).json()["token"]  # never used yet
        db = sqlite3.connect(h.data_dir / "hub.db", timeout=1, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")  # hold the write lock
        result: dict[str, int] = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "code", httpx.get(h.url + "/simple/", auth=("__token__", fresh), timeout=120).status_code))
        t.start()
        try:
            with h.client(timeout=20) as c:
                for _ in range(3):
                    assert c.get("/healthz").status_code == 200
                    assert c.get("/simple/").status_code == 200
            assert t.is_alive()  # the authenticated request is still waiting for the lock
        finally:
            db.execute("ROLLBACK")
            db.close()
            t.join(timeout=120)
        assert result["code"] == 200


def test_an_upload_waiting_on_postgresql_does_not_stall_the_server(
    pg_url: str, tmp_path: Path, packages: PackageFactory
) -> None:
    """An upload whose database work waits on a PostgreSQL lock waits in a worker thread, never on the
    event loop: health checks and anonymous API calls keep answering, and the upload then completes."""
    import threading

    from sqlalchemy import text

    from hub.db import make_engine

    pkg = packages.get("pg-wait-env", "1.0.0")
    extra = {"VF_HUB_DB_STATEMENT_TIMEOUT_MS": "0"}  # the held lock must not time the upload out
    with run_hub(tmp_path / "hub", database_url=pg_url, extra_env=extra) as h:
        alice = _user(h, "alice")
        engine = make_engine(pg_url, 0)
        try:
            with engine.connect() as lock:
                # Held until the rollback below (the connection's transaction begins with this statement).
                lock.execute(text("LOCK TABLE files IN ACCESS EXCLUSIVE MODE"))  # publishing writes here
                result: dict[str, int] = {}
                t = threading.Thread(target=lambda: result.setdefault(
                    "code", _publish(h, alice, "alice", pkg.normalized,
                                     [(p.name, p.read_bytes()) for p in (pkg.wheel, pkg.sdist)]).status_code))
                t.start()
                try:
                    waiting = 0
                    with engine.connect() as probe:
                        for _ in range(600):  # until the upload waits for the lock (polled, not timed)
                            waiting = probe.execute(text(
                                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                "WHERE NOT l.granted AND c.relname = 'files'")).scalar() or 0
                            if waiting or not t.is_alive():
                                break
                            threading.Event().wait(0.1)
                    assert waiting, "the upload never waited for the lock on files"
                    with h.client(timeout=20) as c:
                        for _ in range(3):
                            assert c.get("/healthz").status_code == 200
                            assert c.get("/api/v1/owners/alice").status_code == 200
                    assert t.is_alive()  # the upload is still waiting for the lock
                finally:
                    lock.rollback()
                    t.join(timeout=120)
        finally:
            engine.dispose()
        assert result["code"] == 201
        with h.client() as c:
            assert c.get("/api/v1/environments/alice/pg-wait-env").json()["latest_version"] == "1.0.0"


def test_errors_never_carry_sql_parameters(pg_url: str, tmp_path: Path) -> None:
    """A 500 from PostgreSQL (whose message quotes the offending value) is logged by type, SQLSTATE and
    stack only; SQLAlchemy's errors never render the statement's parameters."""
    import io
    import logging

    from fastapi.testclient import TestClient
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from hub.app import create_app
    from hub.logs import JsonFormatter
    from hub.testing import make_settings

    app = create_app(make_settings(tmp_path / "h", database_url=pg_url))
    secret = "vfh_request-data-that-must-not-be-logged"

    def boom() -> None:
        with app.state.hub.db.engine.connect() as conn:
            conn.execute(text("SELECT CAST(:p AS integer)"), {"p": secret})

    app.add_api_route("/api/v1/boom", boom)
    app.router.routes.insert(0, app.router.routes.pop())  # before the pages' catch-all routes

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("hub")
    logger.addHandler(handler)
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            r = c.get("/api/v1/boom")
        assert r.status_code == 500 and secret not in r.text
        out = stream.getvalue()
        assert r.json()["error_id"] in out and "DataError" in out and '"sqlstate": "22P02"' in out
        assert secret not in out and "[parameters" not in out
        with app.state.hub.db.engine.connect() as conn, pytest.raises(DBAPIError) as info:
            conn.execute(text("SELECT CAST(:p AS integer)"), {"p": secret})
        assert "[parameters" not in str(info.value) and "hidden due to hide_parameters" in str(info.value)
    finally:
        logger.removeHandler(handler)
        app.state.hub.close()


def test_over_long_fields_are_4xx_on_postgres(tmp_path: Path, pg_url: str) -> None:
    long_name = "a" * 130
    with run_hub(tmp_path / "hub", database_url=pg_url) as h:
        alice = _user(h, "alice")
        codes = {
            "130-char name": _publish(h, alice, "alice", long_name, [make_wheel(long_name, "1.0")]).status_code,
            "70-char version": _publish(h, alice, "alice", "long-env", [make_wheel("long-env", "1" + ".0" * 40)]).status_code,
        }
        with h.client(alice) as c:
            codes["1000-char owner"] = c.get(f"/api/v1/environments/{'o' * 1000}/x").status_code
            codes["5000-digit version"] = c.get(f"/api/v1/environments/alice/x/versions/{'9' * 5000}").status_code
            codes["long token name"] = c.post("/api/v1/tokens", json={"name": "n" * 500}).status_code
            codes["long org name"] = c.post("/api/v1/orgs", json={"name": "o" * 500}).status_code
            codes["long environment"] = c.post("/api/v1/environments", json={"owner": "alice", "name": "e" * 500}).status_code
            codes["huge token id"] = c.delete(f"/api/v1/tokens/{10**30}").status_code
            codes["long search"] = c.get("/api/v1/environments", params={"q": "w " * 500}).status_code
        assert all(400 <= code < 500 for code in codes.values()), codes
        assert "Traceback" not in h.logs()


def test_owner_names_are_normalised_the_same_everywhere(tmp_path: Path) -> None:
    """A user created as ``My_User`` is stored as ``my-user``; the search's owner filter and the admin
    CLI find it by any spelling."""
    import os

    with run_hub(tmp_path / "hub") as h:
        tok = _user(h, "My_User")
        assert _publish(h, tok, "my-user", "norm-env", [make_wheel("norm-env", "1.0")]).status_code == 201
        with h.client() as c:
            for spelling in ("my-user", "My_User", "MY.USER"):
                items = c.get("/api/v1/environments", params={"owner": spelling}).json()["items"]
                assert [i["id"] for i in items] == ["my-user/norm-env"], spelling
    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB_")}
    res = subprocess.run([sys.executable, "-m", "hub", "token", "create", "My_User", "--data", str(tmp_path / "hub")],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert res.returncode == 0 and res.stdout.startswith("vfh_"), res.stderr


def test_cached_principals_never_outlive_a_revocation(tmp_path: Path) -> None:
    """Two workers cache principals per generation: a revoked token, a removed member and a new org's
    creator are seen as they are now by the very next request, whichever worker answers."""
    with run_hub(tmp_path / "hub", workers=2) as h:
        alice, bob = _user(h, "alice"), _user(h, "bob")
        with h.client(alice) as c:
            assert c.post("/api/v1/orgs", json={"name": "lab"}).status_code == 201
            # The creator writes to the new org at once (its cached principal had no role there).
            r = _publish(h, alice, "lab", "lab-env", [make_wheel("lab-env", "1.0")], private="true")
            assert r.status_code == 201, r.text
            assert c.put("/api/v1/orgs/lab/members/bob", json={"role": "read"}).status_code == 200
            spare = c.post("/api/v1/tokens", json={"scope": "read"}).json()
        with httpx.Client(base_url=h.url, auth=("__token__", bob), timeout=60) as c:
            assert all(c.get("/simple/lab-env/").status_code == 200 for _ in range(10))
        with httpx.Client(base_url=h.url, auth=("__token__", spare["token"]), timeout=60) as c:
            assert all(c.get("/simple/lab-env/").status_code == 200 for _ in range(10))
        with h.client(alice) as c:
            assert c.delete("/api/v1/orgs/lab/members/bob").status_code == 200
            assert c.delete(f"/api/v1/tokens/{spare['id']}").status_code == 200
        with httpx.Client(base_url=h.url, auth=("__token__", bob), timeout=60) as c:
            assert all(c.get("/simple/lab-env/").status_code == 404 for _ in range(10))
        with httpx.Client(base_url=h.url, auth=("__token__", spare["token"]), timeout=60) as c:
            assert all(c.get("/simple/lab-env/").status_code == 401 for _ in range(10))


def test_principal_cache_refuses_expired_tokens_and_other_generations() -> None:
    import datetime as dt

    from hub.auth import Principal, PrincipalCache

    cache = PrincipalCache()
    soon = Principal(1, "u", False, 1, "read", expires_at=dt.datetime(2000, 1, 1))
    cache.put("h1", 7, soon)
    assert cache.get("h1", 7) is None  # expired since
    live = Principal(1, "u", False, 2, "read")
    cache.put("h2", 7, live)
    assert cache.get("h2", 7) is live and cache.get("h2", 8) is None


# --------------------------------------------------------------------------- names with a line end
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r", "\x00", " ", "\t"])
def test_a_name_with_a_line_end_or_a_control_character_is_refused(shared_hub: HubProcess, end: str) -> None:
    """Python's ``$`` also matches before a final newline: ``alice\\n`` passed every name check and
    let anyone make a look-alike owner of another user, or take a reserved (``check-worker``,
    ``simple``) or protected (``numpy``, ``pip``) name. Every such name is refused now, nothing is
    made, and no index or install command ever carries one."""
    h = shared_hub
    me = f"nl-mallory-{end.encode().hex()}"
    token = _user(h, me)
    with h.client(token) as c:
        for owner in ("nl-alice", "check-worker", "simple"):
            r = c.post("/api/v1/orgs", json={"name": owner + end})
            assert r.status_code == 400 and "invalid name" in r.json()["detail"], (owner, r.status_code, r.text)
        for name in ("numpy", "pip", "verifiers", "nl-tools"):
            r = c.post("/api/v1/environments", json={"owner": me, "name": name + end})
            assert r.status_code in (400, 422), (name, r.status_code, r.text)
        names = [p["name"] for p in c.get("/simple/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}).json()["projects"]]
        assert not [n for n in names if n != n.strip() or "\x00" in n], names
        r = c.get(f"/api/v1/owners/{me}")
        assert r.status_code == 200 and "\\n" not in r.text and not r.json().get("environments")


def test_ids_and_names_are_checked_to_their_last_character() -> None:
    from hub.archives import is_valid_dist_name
    from hub.errors import HubError
    from hub.owners import ADMIN_TOKEN_RE, normalise_owner
    from verifiers.hub_client.check_worker import _SHA256, _WHEEL_NAME
    from verifiers.ids import parse_env_id

    assert is_valid_dist_name("pub-env") and not is_valid_dist_name("pub-env\n")
    assert normalise_owner("Alice") == "alice"
    with pytest.raises(HubError):
        normalise_owner("alice\n")
    assert ADMIN_TOKEN_RE.match("vfh_" + "a" * 40) and not ADMIN_TOKEN_RE.match("vfh_" + "a" * 40 + "\n")
    assert _WHEEL_NAME.match("a-1.0-py3-none-any.whl") and not _WHEEL_NAME.match("a-1.0-py3-none-any.whl\n")
    assert not _SHA256.match("0" * 64 + "\n")
    assert parse_env_id("alice/tools@1.0").owner == "alice"
    assert str(parse_env_id(" alice/tools@1.0\n")) == "alice/tools@1.0"  # a typed id's surrounding space is dropped
    for bad in ("alice\n/tools", "alice/to\nols", "alice/tools@1.0\n@2"):
        with pytest.raises(ValueError):
            parse_env_id(bad)


def test_no_validation_pattern_ends_at_a_dollar() -> None:
    """A pattern that checks a whole name must end at ``\\Z``: Python's ``$`` lets a final newline
    through. Every compiled pattern of the hub, its client and the id parser is read with ``ast``."""
    import ast

    root = Path(__file__).resolve().parents[2]
    files = [*(root / "hub").rglob("*.py"), *(root / "verifiers" / "hub_client").rglob("*.py"),
             root / "verifiers" / "ids.py", root / "verifiers" / "sandbox" / "toolenv.py"]  # fmt: skip
    def ends_at_dollar(arg: ast.expr) -> bool:
        if isinstance(arg, ast.JoinedStr) and arg.values:  # an f-string: its last literal part
            arg = arg.values[-1]
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.endswith("$")

    def found_in(source: str) -> list[int]:
        return [node.lineno for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("compile", "match", "fullmatch", "search")
                and node.args and ends_at_dollar(node.args[0])]  # fmt: skip

    assert found_in('import re\nA = re.compile(r"^[a-z]+$")\nB = re.compile(rf"^{A}x$")\n') == [2, 3]  # the check bites
    found = [f"{path.relative_to(root)}:{line}" for path in files for line in found_in(path.read_text(encoding="utf-8"))]
    assert len(files) > 20 and not found, found
