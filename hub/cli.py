"""``vf hub`` / ``python -m hub``: serve the hub and manage accounts from the command line."""

from __future__ import annotations

import os
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
            f"`python -m hub user create NAME --data {settings.data_dir}` for a user and its first token.",
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
        worker_proc = _start_worker(settings, host, port)
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
        )
    finally:
        if worker_proc is not None:
            worker_proc.terminate()
            try:
                worker_proc.wait(timeout=15)
            except Exception:
                worker_proc.kill()


def _start_worker(settings, host: str, port: int):  # type: ignore[no-untyped-def]
    """A check worker beside the hub: a fresh worker-scope token of user ``check-worker`` (earlier
    ones revoked), handed over in the worker's environment, never on its command line."""
    import subprocess
    import sys

    from hub.core import Hub

    hub = Hub(settings)
    try:
        secret = hub.accounts.rotate_worker_token("serve --with-worker")
    finally:
        hub.close()
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    env = {**os.environ, "VF_HUB_WORKER_TOKEN": secret}
    return subprocess.Popen(
        [sys.executable, "-m", "hub", "worker", "--hub", f"http://{target}:{port}", "--exit-with-parent"],
        env=env,
    )


@app.command()
def worker(
    hub: Annotated[str, typer.Option("--hub", envvar="VF_HUB_URL", help="The hub's base URL")] = "http://127.0.0.1:8080",
    token: Annotated[
        str | None,
        typer.Option(envvar="VF_HUB_WORKER_TOKEN", help="A worker-scope token (prefer the variable: argv is public)"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="This worker's label on the hub")] = None,
    index_url: Annotated[
        str | None, typer.Option(help="Index for the environments' dependencies (default: pip's)")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Sandbox backend: bwrap (default), nsjail")] = None,
    python: Annotated[
        str, typer.Option(help="Interpreter under /usr the check's fresh venv is made from")
    ] = "/usr/bin/python3",
    timeout: Annotated[float, typer.Option(help="Wall-clock seconds per check (install + run)")] = 300.0,
    memory_mb: Annotated[int, typer.Option(help="Address-space limit of the check, MiB")] = 4096,
    processes: Annotated[int, typer.Option(help="Process/thread limit of the check")] = 256,
    disk_mb: Annotated[int, typer.Option(help="Work-folder disk limit of the check, MiB")] = 1024,
    poll_interval: Annotated[float, typer.Option(help="Seconds between claims when the queue is empty")] = 2.0,
    max_jobs: Annotated[int | None, typer.Option(help="Exit after this many jobs")] = None,
    exit_with_parent: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Run checks of pushed versions: claim a job from the hub over HTTP, install the version's wheel
    into a fresh virtual environment in the sandbox, run `vf check` there, report the verdict."""
    import logging
    import threading

    from verifiers.hub_client.check_worker import CheckWorker, WorkerConfig

    if not token:
        typer.echo("error: give a worker token: VF_HUB_WORKER_TOKEN=... (vf hub token create USER --scope worker)", err=True)
        raise typer.Exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = WorkerConfig(
        hub_url=hub, token=token, index_url=index_url, backend=backend, timeout_s=timeout, memory_mb=memory_mb,
        processes=processes, disk_mb=disk_mb, poll_interval=poll_interval, python=python,
    )
    if name:
        config.name = name
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
