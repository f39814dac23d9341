"""The real services the hub's tests run against must really work: a query on PostgreSQL, a
byte-exact object round trip through SeaweedFS's S3 API, and a DOM read in headless Chromium."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser

from tests.support.services import REPO_ROOT, PostgresServer, S3Bucket, S3Server

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_postgres_accepts_queries_through_sqlalchemy(postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+psycopg://")
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE envs (id serial PRIMARY KEY, name text UNIQUE NOT NULL)"))
            conn.execute(sa.text("INSERT INTO envs (name) VALUES ('a'), ('b')"))
        with engine.connect() as conn:
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
            names = conn.execute(sa.text("SELECT name FROM envs ORDER BY id")).scalars().all()
            addr = conn.execute(sa.text("SELECT inet_server_addr()::text")).scalar_one()
        assert int(version.split(".")[0]) >= 13
        assert names == ["a", "b"]
        assert addr.split("/")[0] == "127.0.0.1"  # a real TCP server on loopback, not a socket file
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO envs (name) VALUES ('a')"))
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_template_copy_gives_an_independent_database(
    postgres_server: PostgresServer, postgres_database_factory: Callable[..., str]
) -> None:
    template_url = postgres_database_factory()
    template = template_url.rsplit("/", 1)[1]
    engine = sa.create_engine(template_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (x int)"))
        conn.execute(sa.text("INSERT INTO t VALUES (1), (2), (3)"))
    engine.dispose()  # a template must have no open connections while it is copied

    copy_url = postgres_database_factory(template=template)
    assert copy_url != template_url
    copy = sa.create_engine(copy_url)
    with copy.begin() as conn:
        assert conn.execute(sa.text("SELECT sum(x) FROM t")).scalar_one() == 6
        conn.execute(sa.text("DELETE FROM t"))
    copy.dispose()
    # The copy's writes do not reach the template.
    assert postgres_server.execute("SELECT count(*) FROM t", database=template) == [(3,)]


@pytest.mark.postgres
def test_postgres_module_database_is_separate_from_session_database(
    postgres_url: str, postgres_module_url: str, postgres_server: PostgresServer
) -> None:
    assert postgres_module_url != postgres_url
    names = {row[0] for row in postgres_server.execute("SELECT datname FROM pg_database")}
    assert postgres_url.rsplit("/", 1)[1] in names
    assert postgres_module_url.rsplit("/", 1)[1] in names


def test_postgres_server_stops_and_removes_its_directory() -> None:
    from tests.support.services import start_postgres

    server = start_postgres()
    root, port = server.root, server.port
    assert server.execute("SELECT 40 + 2") == [(42,)]
    server.stop()
    assert server.process.poll() is not None
    assert not root.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    server.stop()  # idempotent


def test_database_names_are_checked() -> None:
    from tests.support.services import _check_identifier

    for bad in ('x"; DROP DATABASE postgres; --', "", "a b", "x" * 64):
        with pytest.raises(ValueError):
            _check_identifier(bad)
    _check_identifier("vf_ok_123")


# ---------------------------------------------------------------- S3 (SeaweedFS)


@pytest.mark.s3
def test_s3_put_get_5mb_object_byte_exact(s3_bucket: S3Bucket, s3_server: S3Server) -> None:
    client = s3_server.client()
    payload = os.urandom(5 * 1024 * 1024)
    client.put_object(Bucket=s3_bucket.bucket, Key="envs/a/b-1.0-py3-none-any.whl", Body=payload)
    got = client.get_object(Bucket=s3_bucket.bucket, Key="envs/a/b-1.0-py3-none-any.whl")["Body"].read()
    assert len(got) == len(payload)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest()
    listed = client.list_objects_v2(Bucket=s3_bucket.bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("envs/a/b-1.0-py3-none-any.whl", len(payload))]
    ranged = client.get_object(Bucket=s3_bucket.bucket, Key="envs/a/b-1.0-py3-none-any.whl", Range="bytes=100-199")
    assert ranged["Body"].read() == payload[100:200]


@pytest.mark.s3
def test_s3_rejects_wrong_secret_and_buckets_are_fresh(s3_bucket: S3Bucket, s3_server: S3Server) -> None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    assert s3_server.client().list_objects_v2(Bucket=s3_bucket.bucket).get("KeyCount") == 0
    bad = boto3.client(
        "s3",
        endpoint_url=s3_bucket.endpoint_url,
        aws_access_key_id=s3_bucket.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=s3_bucket.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    with pytest.raises(ClientError) as info:
        bad.put_object(Bucket=s3_bucket.bucket, Key="x", Body=b"x")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


# ---------------------------------------------------------------- Chromium


class _Page(http.server.BaseHTTPRequestHandler):
    body = (
        b"<!doctype html><html><head><title>loopback</title></head><body>"
        b"<h1 id='t'>static</h1><ul id='l'></ul>"
        b"<script>document.getElementById('t').textContent = 'rendered by js';"
        b"for (const n of ['a','b','c']) { const li = document.createElement('li'); li.textContent = n;"
        b" document.getElementById('l').appendChild(li); }</script></body></html>"
    )

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def loopback_page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_chromium_loads_loopback_page_and_reads_dom(chromium_browser: Browser, loopback_page: str) -> None:
    context = chromium_browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(loopback_page, timeout=30_000)
        assert response is not None and response.status == 200
        assert page.title() == "loopback"
        # The script ran: the DOM holds what JavaScript wrote, not the static HTML.
        assert page.locator("#t").inner_text() == "rendered by js"
        assert page.locator("#l li").all_inner_texts() == ["a", "b", "c"]
        assert "HeadlessChrome" in page.evaluate("navigator.userAgent")
    finally:
        context.close()


@pytest.mark.browser
def test_two_chromium_sessions_can_be_open_at_once(chromium_browser: Browser, loopback_page: str) -> None:
    from tests.support.services import start_chromium

    second = start_chromium()  # e.g. a module's own browser while the session-wide one is open
    try:
        page = second.browser.new_page()
        page.goto(loopback_page)
        assert page.locator("#t").inner_text() == "rendered by js"
        assert chromium_browser.is_connected()
    finally:
        second.stop()
    assert chromium_browser.is_connected()  # stopping one does not stop the shared driver
    ctx = chromium_browser.new_context()
    ctx.close()



def test_browser_fixture_does_not_break_async_tests_in_later_modules(tmp_path: Path) -> None:
    """Playwright's sync driver marks an event loop as running in its thread while it lives; the
    fixtures are module-scoped so that asyncio tests in the modules after a browser module still run.
    Checked in a child pytest run: a browser module, then a module of async tests."""
    (tmp_path / "test_a_browser.py").write_text(
        "from tests.support.services import chromium_browser, chromium_session  # noqa: F401\n"
        "def test_page(chromium_browser):\n"
        "    page = chromium_browser.new_page()\n"
        "    page.set_content('<p id=x>hi</p>')\n"
        "    assert page.inner_text('#x') == 'hi'\n"
    )
    (tmp_path / "test_b_async.py").write_text(
        "import asyncio\n"
        "async def test_sleep():\n"
        "    await asyncio.sleep(0.01)\n"
        "def test_run():\n"
        "    assert asyncio.run(asyncio.sleep(0, result=7)) == 7\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO_ROOT / "pyproject.toml"),
         "--rootdir", str(REPO_ROOT), str(tmp_path / "test_a_browser.py"), str(tmp_path / "test_b_async.py")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout
