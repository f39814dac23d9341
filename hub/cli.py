"""``vf hub`` / ``python -m hub``: serve the hub and manage accounts from the command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="The Environments Hub service.", no_args_is_help=True, add_completion=False)
user_app = typer.Typer(help="Users.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
org_app = typer.Typer(help="Organisations.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.add_typer(org_app, name="org")

DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help="Data folder (SQLite file + files); default VF_HUB_DATA_DIR or ./hub-data"),
]


def _settings(data: Path | None):  # type: ignore[no-untyped-def]
    from hub.settings import Settings

    return Settings(data_dir=data) if data is not None else Settings()


@app.command()
def serve(
    data: DataOpt = None,
    host: Annotated[str, typer.Option(help="Address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one)")] = 8080,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
    log_level: Annotated[str, typer.Option(help="Log level")] = "info",
    with_worker: Annotated[
        bool, typer.Option("--with-worker", help="Also run one check worker (vf hub worker) beside the hub")
    ] = False,
) -> None:
    """Serve the hub. With no configuration: SQLite and a local file folder under --data."""
    import uvicorn

    from hub.db import Database, run_migrations

    settings = _settings(data)
    if settings.admin_token is not None:
        from hub.core import check_admin_token

        try:
            check_admin_token(settings.admin_token.get_secret_value())
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    if settings.public_names_file is not None:
        from hub.names import read_names

        try:
            read_names(settings.public_names_file)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Migrate once here, so that several workers never race to migrate.
    db = Database(settings.resolved_database_url)
    run_migrations(db.engine)
    from sqlalchemy import text

    with db.engine.connect() as conn:
        users = conn.execute(text("SELECT count(*) FROM owners WHERE kind = 'user'")).scalar()
    db.dispose()
    if not users and settings.admin_token is None:
        typer.echo(
            "No users yet: set VF_HUB_ADMIN_TOKEN=vfh_... to bootstrap user 'admin', or run "
            f"`vf hub user create NAME --data {settings.data_dir}` for a user and its first token.",
            err=True,
        )
    os.environ["VF_HUB_DATA_DIR"] = str(settings.data_dir.resolve())
    os.environ["VF_HUB_MIGRATE_ON_START"] = "0"
    os.environ["VF_HUB_LOG_LEVEL"] = log_level.upper()
    typer.echo(f"Environments Hub on http://{host}:{port}/ (data: {settings.data_dir.resolve()})", err=True)
    worker_proc = None
    if with_worker:
        if port == 0:
            from hub.testing import free_port

            port = free_port()
        from hub.errors import HubError

        try:
            worker_proc, worker_secret = _start_worker(settings, host, port)
        except HubError as exc:
            typer.echo(f"error: --with-worker: {exc.message}", err=True)
            raise typer.Exit(1) from None
        # uvicorn shuts down on SIGTERM and then raises the signal again with the handler it found;
        # the default one would end the process before the `finally` below stops the worker and
        # revokes its token, so turn it into an exit that runs it.
        import signal

        signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(128 + signal.SIGTERM))
    try:
        uvicorn.run(
            "hub.app:create_app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            access_log=False,
            log_level=log_level.lower(),
            proxy_headers=bool(settings.forwarded_allow_ips),
            forwarded_allow_ips=settings.forwarded_allow_ips,
            # Connection limits (hub/server.py: head deadline and size, connections per address);
            # uvicorn's own: idle keep-alive, h11's head size (if h11 is ever chosen), connections.
            http="hub.server:HubHttpProtocol",
            timeout_keep_alive=settings.keep_alive_seconds,
            h11_max_incomplete_event_size=settings.max_header_bytes,
            limit_concurrency=settings.max_connections,
        )
    finally:
        if worker_proc is not None:
            worker_proc.terminate()
            try:
                worker_proc.wait(timeout=15)
            except Exception:
                worker_proc.kill()
            revoke_embedded_worker_token(settings, worker_secret)


def embedded_worker_token(settings):  # type: ignore[no-untyped-def]
    """A fresh worker token of the hub's own ``check-worker`` account for one `serve --with-worker`
    instance (:func:`hub.checks.embedded_worker_token`: only tokens of instances that are gone are
    rotated away)."""
    from hub.checks import embedded_worker_token as make_token
    from hub.core import Hub

    hub = Hub(settings)
    try:
        with hub.uow.write(cached=False) as s:  # revoke_tokens makes it a cached write if it revokes
            secret = make_token(hub, s)
    finally:
        hub.close()
    return secret


def revoke_embedded_worker_token(settings, secret: str) -> None:  # type: ignore[no-untyped-def]
    """Revoke this instance's embedded worker token when it stops (best effort: a crash leaves it to
    the next start's rotation)."""
    from hub.auth import hash_token, revoke_tokens
    from hub.db import Database
    from hub.models import Token

    db = Database(settings.resolved_database_url)
    try:
        with db.session() as s:
            revoke_tokens(s, Token.token_hash == hash_token(secret))
    except Exception as exc:  # the database may be gone at shutdown; say so, never hide it
        print(f"warning: could not revoke the embedded worker's token: {type(exc).__name__}", file=sys.stderr)
    finally:
        db.dispose()


def _start_worker(settings, host: str, port: int):  # type: ignore[no-untyped-def]
    """A check worker beside the hub with its own worker token (:func:`embedded_worker_token`).

    The worker never sees the admin token or anything else of this process's environment: it starts
    from an allow-listed environment (``check_worker.clean_environment``), and its token travels through
    an inherited pipe, read once and closed (never in argv or the environment, which other processes
    of the machine can read). Returns the process and the token (revoked when the hub stops)."""
    import subprocess

    from verifiers.hub_client.check_worker import clean_environment

    secret = embedded_worker_token(settings)
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, secret.encode())
    finally:
        os.close(write_end)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hub", "worker", "--hub", f"http://{target}:{port}", "--exit-with-parent",
             "--token-fd", str(read_end)],
            env=clean_environment(os.environ),
            pass_fds=(read_end,),
        )  # fmt: skip
    finally:
        os.close(read_end)
    return proc, secret


@app.command("worker-token")
def worker_token(
    data: DataOpt = None,
    name: Annotated[str, typer.Option(help="A label for the token")] = "check worker",
) -> None:
    """Print a new worker token of the hub's own check-worker account (for `vf hub worker` elsewhere)."""
    from hub.auth import add_token
    from hub.checks import system_worker
    from hub.core import Hub
    from hub.errors import HubError

    hub = Hub(_settings(data))
    try:
        with hub.uow.write(cached=False) as s:  # a new token takes no right away from anyone
            secret, _tok = add_token(s, system_worker(hub, s), name=name, scope="worker")
    except HubError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        hub.close()
    typer.echo(secret)


@app.command()
def worker(
    hub: Annotated[str, typer.Option("--hub", envvar="VF_HUB_URL", help="The hub's base URL")] = "http://127.0.0.1:8080",
    token: Annotated[
        str | None,
        typer.Option(envvar="VF_HUB_WORKER_TOKEN", help="A worker-scope token (prefer the variable: argv is public)"),
    ] = None,
    token_fd: Annotated[
        int | None, typer.Option(help="Read the token from this inherited file descriptor (then closed)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="This worker's label on the hub (shown to hub admins)")] = None,
    index_url: Annotated[
        str | None, typer.Option(help="The public index of the environments' dependencies (default: PyPI)")
    ] = None,
    allow_host: Annotated[
        list[str] | None, typer.Option(help="Another HOST:PORT the setup phase may reach (repeatable)")
    ] = None,
    keep_env: Annotated[
        list[str] | None, typer.Option(help="Keep this environment variable for the worker (repeatable)")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Sandbox backend: bwrap (default), nsjail")] = None,
    python: Annotated[
        str, typer.Option(help="Interpreter under /usr the check's fresh venv is made from")
    ] = "/usr/bin/python3",
    timeout: Annotated[float, typer.Option(help="Wall-clock seconds per check")] = 300.0,
    setup_timeout: Annotated[float, typer.Option(help="Wall-clock seconds to install a check's dependencies")] = 300.0,
    memory_mb: Annotated[int, typer.Option(help="Address-space limit of the check, MiB")] = 4096,
    processes: Annotated[int, typer.Option(help="Process/thread limit of the check")] = 256,
    disk_mb: Annotated[int, typer.Option(help="Work-folder disk limit of the check, MiB")] = 4096,
    poll_interval: Annotated[float, typer.Option(help="Seconds between claims when the queue is empty")] = 2.0,
    max_jobs: Annotated[int | None, typer.Option(help="Exit after this many jobs")] = None,
    exit_with_parent: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Run checks of pushed versions: claim a job from the hub over HTTP, install the version's wheel
    into a fresh virtual environment in the sandbox, run `vf check` there, report the verdict."""
    import logging
    import threading

    from verifiers.hub_client.check_worker import CheckWorker, WorkerConfig, clean_environment

    if token_fd is not None:
        with os.fdopen(token_fd, "rb") as fh:
            token = fh.read(512).decode("ascii", "replace").strip()
    if not token:
        typer.echo("error: give a worker token: VF_HUB_WORKER_TOKEN=... (python -m hub worker-token)", err=True)
        raise typer.Exit(2)
    kept = clean_environment(os.environ, keep_env or ())
    if dict(os.environ) != kept:
        # Start again from the allow-listed environment, the token in a pipe: clearing os.environ
        # would leave the original strings readable in /proc/PID/environ.
        _reexec_clean(token, kept)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = WorkerConfig(
        hub_url=hub, token=token, index_url=index_url, backend=backend, timeout_s=timeout, memory_mb=memory_mb,
        processes=processes, disk_mb=disk_mb, poll_interval=poll_interval, python=python,
        allow_hosts=tuple(allow_host or ()), download_timeout_s=setup_timeout,
    )  # fmt: skip
    if name:
        config.name = name
    try:
        CheckWorker(config).allowed_hosts()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from verifiers.sandbox import Sandbox
    from verifiers.sandbox.types import SandboxError

    try:
        Sandbox(backend).check()
    except SandboxError as exc:
        typer.echo(f"error: the sandbox cannot run here: {exc}", err=True)
        raise typer.Exit(1) from None
    stop = threading.Event()
    if exit_with_parent:
        parent = os.getppid()

        def watch() -> None:
            while not stop.wait(1.0):
                if os.getppid() != parent:
                    os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
    w = CheckWorker(config)
    typer.echo(f"check worker {config.name} polling {hub}", err=True)
    try:
        w.run(max_jobs=max_jobs, stop=stop)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        w.close()


def _reexec_clean(token: str, env: dict[str, str]) -> None:
    """Replace this process (same pid) by ``python -m hub worker`` with the same options, ``env`` as
    its whole environment, and the token on an inherited pipe instead of argv or the environment."""
    import sys

    argv = sys.argv[sys.argv.index("worker") + 1 :] if "worker" in sys.argv else []
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--token", "--token-fd"):
            skip = True
            continue
        if arg.startswith(("--token=", "--token-fd=")):
            continue
        rest.append(arg)
    read_end, write_end = os.pipe()
    os.write(write_end, token.encode())
    os.close(write_end)
    os.set_inheritable(read_end, True)
    os.execve(sys.executable, [sys.executable, "-m", "hub", "worker", *rest, "--token-fd", str(read_end)], env)


@user_app.command("create")
def user_create(
    name: str,
    data: DataOpt = None,
    admin: Annotated[bool, typer.Option(help="Make the user an administrator")] = False,
) -> None:
    """Create a user and print its first token (shown once)."""
    from hub.core import Hub
    from hub.errors import HubError

    hub = Hub(_settings(data))
    try:
        _user, secret = hub.accounts.create_user(name, is_admin=admin)
    except HubError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        hub.close()
    typer.echo(secret)


@token_app.command("create")
def token_create(
    user: str,
    data: DataOpt = None,
    scope: Annotated[str, typer.Option(help="read, write, or worker (check workers: claim/report only)")] = "write",
    name: Annotated[str, typer.Option(help="A label for the token")] = "",
    expires_days: Annotated[float | None, typer.Option(help="Expire after this many days")] = None,
) -> None:
    """Create another token for USER and print it (shown once)."""
    import datetime as dt

    from hub.core import Hub
    from hub.errors import HubError
    from hub.models import utcnow
    from hub.queries import owner_by_name

    hub = Hub(_settings(data))
    try:
        with hub.db.session() as s:
            u = owner_by_name(s, user, "user")
        if u is None:
            typer.echo(f"error: no user {user!r}", err=True)
            raise typer.Exit(1)
        expires = utcnow() + dt.timedelta(days=expires_days) if expires_days else None
        secret, _tok = hub.accounts.create_token(u.id, name=name, scope=scope, expires_at=expires)
    except HubError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        hub.close()
    typer.echo(secret)


@org_app.command("create")
def org_create(
    name: str,
    data: DataOpt = None,
    admin_user: Annotated[str | None, typer.Option("--admin", help="User who administers the org")] = None,
) -> None:
    """Create an organisation (optionally with an admin member)."""

    from hub.core import Hub
    from hub.errors import HubError
    from hub.queries import owner_by_name

    hub = Hub(_settings(data))
    try:
        creator = None
        if admin_user:
            with hub.db.session() as s:
                creator = owner_by_name(s, admin_user, "user")
            if creator is None:
                typer.echo(f"error: no user {admin_user!r}", err=True)
                raise typer.Exit(1)
        org = hub.accounts.create_org(name, creator.id if creator else None)
        typer.echo(org.name)
    except HubError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        hub.close()


@app.command()
def gc(
    data: DataOpt = None,
    delete: Annotated[bool, typer.Option("--delete", help="Delete them (default: only list them)")] = False,
    min_age_hours: Annotated[float, typer.Option(help="Spare blobs younger than this (uploads in flight)")] = 1.0,
) -> None:
    """List (or, with --delete, delete) stored files no release references (left by a crash mid-publish).

    Refuses unless the database recorded the storage's id, so a wrong VF_HUB_DATABASE_URL can never
    empty a storage."""
    from hub.core import Hub
    from hub.errors import HubError

    hub = Hub(_settings(data))
    try:
        keys = hub.blobs.orphans(min_age_hours * 3600)
        for key in keys:
            typer.echo(key)
        if not delete:
            typer.echo(f"would remove {len(keys)} orphaned file(s); run with --delete to remove them", err=True)
            return
        removed = hub.blobs.gc_orphans(min_age_hours * 3600)
        typer.echo(f"removed {removed} orphaned file(s)", err=True)
    except HubError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        hub.close()


def main() -> None:
    app()
