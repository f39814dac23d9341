"""Start a real hub for tests and benchmarks: a uvicorn subprocess on a free loopback port.

    handle = run_hub(tmp_path / "hub", admin_token="vfh_...")
    ... handle.url, handle.admin_token ...
    handle.stop()

Also usable as a context manager. ``make_settings`` builds in-process settings for ``create_app``.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hub.settings import Settings


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Config:
    """Where an S3-compatible store lives (e.g. a SeaweedFS started by tests/support/services.py)."""

    endpoint_url: str
    bucket: str = "vf-hub"
    access_key_id: str = "any"
    secret_access_key: str = "any"
    region: str = "us-east-1"
    prefix: str = ""

    def env(self) -> dict[str, str]:
        return {
            "VF_HUB_STORAGE": "s3",
            "VF_HUB_S3_ENDPOINT_URL": self.endpoint_url,
            "VF_HUB_S3_BUCKET": self.bucket,
            "VF_HUB_S3_ACCESS_KEY_ID": self.access_key_id,
            "VF_HUB_S3_SECRET_ACCESS_KEY": self.secret_access_key,
            "VF_HUB_S3_REGION": self.region,
            "VF_HUB_S3_PREFIX": self.prefix,
        }


@dataclass
class HubProcess:
    """A running hub subprocess."""

    url: str
    port: int
    admin_token: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """Hard kill (SIGKILL), as a crash would."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, token: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers.update(kw.pop("headers", None) or {})
        kw.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, headers=headers, **kw)

    def __enter__(self) -> HubProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def hub_env(
    data_dir: Path,
    *,
    database_url: str | None = None,
    storage: str | S3Config | None = None,
    admin_token: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, str]:
    """The VF_HUB_* variables for a hub with these settings (rate limits off unless extra_env sets them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB_")}
    env["VF_HUB_DATA_DIR"] = str(Path(data_dir).resolve())
    env["VF_HUB_RATE_LIMIT_ENABLED"] = "0"
    if admin_token:
        env["VF_HUB_ADMIN_TOKEN"] = admin_token
    if database_url:
        env["VF_HUB_DATABASE_URL"] = database_url
    if isinstance(storage, S3Config):
        env.update(storage.env())
    elif storage not in (None, "local"):
        raise ValueError(f"storage must be 'local' or an S3Config, not {storage!r}")
    env.update(extra_env or {})
    return env


def run_hub(
    data_dir: Path | str,
    *,
    port: int | None = None,
    database_url: str | None = None,
    storage: str | S3Config | None = None,
    admin_token: str | None = None,
    workers: int = 1,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> HubProcess:
    """Start ``python -m hub serve`` on 127.0.0.1 and wait until ``/healthz`` answers.

    ``admin_token`` defaults to a fresh random token (user ``admin``). Rate limits are off by default
    (tests hammer the server); pass ``extra_env={"VF_HUB_RATE_LIMIT_ENABLED": "1"}`` to test them.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    admin_token = admin_token or ("vfh_" + secrets.token_urlsafe(32))
    env = hub_env(
        data_dir, database_url=database_url, storage=storage, admin_token=admin_token, extra_env=extra_env
    )
    log_path = data_dir / f"hub-{int(time.time() * 1000)}.log"
    last_err: str = ""
    for _attempt in range(3):
        p = port or free_port()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hub",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(p),
                    "--workers",
                    str(workers),
                    "--log-level",
                    "warning",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(Path(__file__).resolve().parent.parent),
            )
        url = f"http://127.0.0.1:{p}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    return HubProcess(url, p, admin_token, data_dir, proc, log_path)
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        last_err = log_path.read_text(errors="replace")[-3000:]
        if port is not None:
            break
    raise RuntimeError(f"the hub did not start:\n{last_err}")


def make_settings(data_dir: Path | str, **overrides: Any) -> Settings:
    """In-process settings for ``create_app``: embedded defaults, rate limits off unless overridden."""
    overrides.setdefault("rate_limit_enabled", False)
    overrides.setdefault("log_level", "WARNING")
    return Settings(data_dir=Path(data_dir), **overrides)


WORDS = (
    "math gsm8k reasoning code python tests sandbox tool search wiki judge logic puzzle sudoku wordle game "
    "chess proof lean algebra geometry physics chemistry biology trivia qa summarise translate retrieval "
    "agent browser sql regex json format multi turn single swe repo bash terminal web crawl citation"
).split()


def seed_synthetic_environments(
    settings: Settings, n: int, *, owner: str = "bench", private_every: int = 10
) -> int:
    """Insert ``n`` synthetic environments (rows only, no files) for search and memory benchmarks.

    Every ``private_every``-th one is private. Names, descriptions and tags are drawn from a fixed word
    list with a fixed seed, so runs are comparable. Returns the number inserted.
    """
    import random

    from sqlalchemy import select

    from hub.core import Hub
    from hub.models import Environment, EnvTag, Owner, utcnow
    from hub.search import update_search_index

    rng = random.Random(1234)
    hub = Hub(settings)
    try:
        with hub.uow.write() as s:  # the generation moves: pages cached before the seed go
            own = s.scalar(select(Owner).where(Owner.name == owner))
            if own is None:
                own = Owner(name=owner, display_name=owner, kind="user", is_admin=False, description="")
                s.add(own)
                s.flush()
            start = int(s.scalar(select(Environment.id).order_by(Environment.id.desc()).limit(1)) or 0)
            now = utcnow()
            for i in range(n):
                words = rng.sample(WORDS, 3)
                tags = rng.sample(WORDS, 2)
                env = Environment(
                    owner_id=own.id,
                    name=f"{words[0]}-{words[1]}-{start + i}",
                    display_name=f"{words[0]}-{words[1]}-{start + i}",
                    private=(private_every > 0 and i % private_every == 0),
                    description=f"A {words[0]} environment about {words[1]} and {words[2]}.",
                    tags=" ".join(tags),
                    latest_version="1.0.0",
                    downloads=rng.randint(0, 100_000),
                    stars=rng.randint(0, 500),
                    created_at=now,
                    updated_at=now,
                )
                s.add(env)
                s.flush()
                for t in tags:
                    s.add(EnvTag(env_id=env.id, tag=t))
                update_search_index(s, env)
        return n
    finally:
        hub.close()
