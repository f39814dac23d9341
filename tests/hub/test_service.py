"""Service concerns: rate limits, request-size limits, logs without secrets, health, OpenAPI,
migrations, the CLI."""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from hub.db import Database, run_migrations
from hub.logs import JsonFormatter
from tests.hub.helpers import HubClient, PackageFactory

ROOT = Path(__file__).resolve().parents[2]


def test_auth_failure_rate_limit(tmp_path: Path) -> None:
    hub = HubClient.create(
        tmp_path / "h",
        database_url=None,
        admin_token="vfh_" + secrets.token_urlsafe(32),
        rate_limit_enabled=True,
        auth_fail_burst=3,
        auth_fail_per_minute=1,
    )
    try:
        codes = [hub.get("/api/v1/whoami", "vfh_wrong-token").status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        r = hub.get("/api/v1/whoami", "vfh_wrong-token")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        # Anonymous reads are not affected.
        assert hub.get("/simple/").status_code == 200
        # Sign-in attempts through the web form count too.
        hub.client.get("/signin")
        csrf = hub.client.cookies["vfhub_csrf"]
        assert hub.client.post("/signin", data={"token": "vfh_x", "csrf": csrf}).status_code == 429
    finally:
        hub.close()


def test_write_rate_limit(tmp_path: Path) -> None:
    hub = HubClient.create(
        tmp_path / "h",
        database_url=None,
        admin_token="vfh_" + secrets.token_urlsafe(32),
        rate_limit_enabled=True,
        write_burst=3,
        write_per_minute=1,
    )
    try:
        codes = [
            hub.post("/api/v1/orgs", hub.admin_token, json={"name": f"org{i}"}).status_code for i in range(5)
        ]
        assert codes == [201, 201, 201, 429, 429]
        # Reads are not limited.
        assert all(hub.get("/api/v1/whoami", hub.admin_token).status_code == 200 for _ in range(10))
    finally:
        hub.close()


def test_request_size_limit(tmp_path: Path) -> None:
    hub = HubClient.create(
        tmp_path / "h",
        database_url=None,
        admin_token="vfh_" + secrets.token_urlsafe(32),
        max_request_bytes=10_000,
    )
    try:
        r = hub.post(
            "/api/v1/orgs",
            hub.admin_token,
            content=b"{" + b" " * 20_000 + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 413

        def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: counted while streaming
            for _ in range(30):
                yield b" " * 1000

        r = hub.post(
            "/api/v1/orgs", hub.admin_token, content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413
    finally:
        hub.close()


def test_logs_are_json_and_never_contain_tokens(hub: HubClient, packages: PackageFactory) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("hub")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        alice = hub.user("alice")
        hub.publish("alice", packages.get("log-env", "1.0.0"), alice)
        hub.get("/api/v1/whoami", alice)
        hub.client.get("/simple/log-env/", auth=("__token__", alice))
        hub.get(f"/api/v1/environments?q={alice}")
        hub.get("/api/v1/whoami", "vfh_bad-secret-value")
        hub.client.get("/signin")
        hub.client.post("/signin", data={"token": alice, "csrf": hub.client.cookies["vfhub_csrf"]})
        hub.get("/api/v1/nonexistent-route-to-500?token=" + alice)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    out = stream.getvalue()
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert any(
        x.get("msg") == "request" and x.get("path") == "/api/v1/whoami" and x.get("status") == 200
        for x in lines
    )
    assert any(x.get("msg") == "published" for x in lines)
    assert alice not in out and "vfh_bad-secret-value" not in out and hub.admin_token not in out
    assert "authorization" not in out.lower()


def test_health_openapi_and_docs(hub: HubClient) -> None:
    h = hub.get("/healthz").json()
    assert h["status"] == "ok" and h["database"] in ("sqlite", "postgresql")
    spec = hub.get("/openapi.json").json()
    paths = spec["paths"]
    for p in (
        "/api/v1/environments",
        "/api/v1/environments/{owner}/{name}/versions",
        "/legacy/",
        "/simple/{project}/",
        "/api/v1/environments/{owner}/{name}/leaderboard",
        "/api/v1/tokens",
    ):
        assert p in paths, p
    upload = paths["/api/v1/environments/{owner}/{name}/versions"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert hub.get("/docs").status_code == 200


def test_migrations_up_down_up(tmp_path: Path, database_url: str | None) -> None:
    url = database_url or f"sqlite:///{tmp_path / 'm.db'}"
    db = Database(url)
    try:
        run_migrations(db.engine)
        tables = set(inspect(db.engine).get_table_names())
        assert {
            "owners",
            "memberships",
            "tokens",
            "environments",
            "env_tags",
            "versions",
            "files",
            "stars",
            "daily_downloads",
            "eval_results",
            "hub_state",
            "alembic_version",
        } <= tables
        from alembic import command
        from alembic.config import Config

        from hub.db import MIGRATIONS_DIR

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        with db.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "base")
        assert "environments" not in set(inspect(db.engine).get_table_names())
        run_migrations(db.engine)
        run_migrations(db.engine)  # idempotent
        assert "environments" in set(inspect(db.engine).get_table_names())
        assert db.generation() == 1
    finally:
        db.dispose()


def _cli(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hub", *args, "--data", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_cli_accounts(tmp_path: Path) -> None:
    data = tmp_path / "hubdata"
    out = _cli("user", "create", "carol", data=data)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("vfh_") and len(token) > 40
    assert _cli("user", "create", "carol", data=data).returncode == 1
    tok2 = _cli("token", "create", "carol", "--scope", "read", data=data).stdout.strip()
    assert tok2.startswith("vfh_") and tok2 != token
    assert _cli("org", "create", "labs", "--admin", "carol", data=data).returncode == 0
    # No server ever claimed this storage for this database: gc refuses rather than guess.
    refused = _cli("gc", data=data)
    assert refused.returncode == 1 and "no record" in refused.stderr
    hub = HubClient.create(data, database_url=None, admin_token="vfh_" + secrets.token_urlsafe(32))
    try:
        me = hub.get("/api/v1/whoami", token).json()
        assert me["name"] == "carol" and me["orgs"] == [{"name": "labs", "role": "admin"}]
        assert hub.get("/api/v1/whoami", tok2).json()["scope"] == "read"
    finally:
        hub.close()
    helptext = subprocess.run(
        [sys.executable, "-m", "hub", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
    ).stdout
    assert "serve" in helptext and "user" in helptext


def test_compose_and_dockerfile_match_the_service() -> None:
    """docker-compose.yml and hub/Dockerfile configure only settings that exist and run the same
    ``python -m hub serve`` command the tests start (no Docker engine here, so checked by construction)."""
    import yaml

    from hub.settings import Settings

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    hub_svc = compose["services"]["hub"]
    fields = {f"VF_HUB_{name.upper()}" for name in Settings.model_fields}
    env_keys = set(hub_svc["environment"])
    assert env_keys <= fields, env_keys - fields
    assert {
        "VF_HUB_DATABASE_URL",
        "VF_HUB_STORAGE",
        "VF_HUB_S3_ENDPOINT_URL",
        "VF_HUB_ADMIN_TOKEN",
    } <= env_keys
    assert hub_svc["environment"]["VF_HUB_STORAGE"] == "s3"
    assert hub_svc["environment"]["VF_HUB_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert set(compose["services"]) == {"postgres", "seaweedfs", "hub", "worker", "env-server"}  # env-server: tests/v1/test_serve_cli.py
    cmd = hub_svc["command"]
    assert cmd[:4] == ["python", "-m", "hub", "serve"]
    dockerfile = (ROOT / "hub" / "Dockerfile").read_text()
    cmd_line = next(line for line in dockerfile.splitlines() if line.startswith("CMD "))
    assert json.loads(cmd_line[4:]) == cmd
    # The options exist: `serve --help` accepts every flag used.
    helptext = subprocess.run(
        [sys.executable, "-m", "hub", "serve", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
    ).stdout
    for flag in (a for a in cmd if a.startswith("--")):
        assert flag in helptext, flag
    assert "pip install '.[hub]'" in dockerfile
    import inspect

    import hub.testing

    source = "".join(inspect.getsource(hub.testing.run_hub).split())
    assert '"-m","hub","serve"' in source  # the command the tests start
    # The check worker service runs its image's command, with flags and variables `hub worker` reads.
    worker = compose["services"]["worker"]
    wdockerfile = (ROOT / "hub" / "Dockerfile.worker").read_text()
    wcmd = json.loads(next(line for line in wdockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert wcmd[:4] == ["python", "-m", "hub", "worker"] and "bubblewrap" in wdockerfile
    whelp = subprocess.run(
        [sys.executable, "-m", "hub", "worker", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    for flag in (a for a in wcmd if a.startswith("--")):
        assert flag in whelp, flag
    assert set(worker["environment"]) == {"VF_HUB_URL", "VF_HUB_WORKER_TOKEN"}
    assert "VF_HUB_WORKER_TOKEN" in whelp and "VF_HUB_URL" in whelp


def test_settings_from_env_and_config_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from hub.settings import Settings

    cfg = tmp_path / "hub.toml"
    cfg.write_text(
        '[hub]\ndata_dir = "/srv/hub"\nmax_file_bytes = 1234\nstorage = "local"\ndefault_private = true\n'
    )
    monkeypatch.setenv("VF_HUB_CONFIG", str(cfg))
    monkeypatch.setenv("VF_HUB_MAX_FILE_BYTES", "999")
    s = Settings()
    assert s.data_dir == Path("/srv/hub") and s.default_private is True
    assert s.max_file_bytes == 999  # the environment wins over the file
    assert s.resolved_database_url == "sqlite:////srv/hub/hub.db"
    assert s.resolved_storage_path == Path("/srv/hub/files")
    monkeypatch.setenv("VF_HUB_ADMIN_TOKEN", "vfh_secret")
    assert "vfh_secret" not in repr(Settings())  # secrets are masked in reprs
