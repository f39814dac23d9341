"""Hub configuration: environment variables prefixed ``VF_HUB_`` and an optional TOML file.

The TOML file is named by ``VF_HUB_CONFIG`` (or passed to :func:`load_settings`); environment variables
win over the file, so a deployment can keep defaults in a file and secrets in the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

MiB = 1024 * 1024


class _TomlSource(PydanticBaseSettingsSource):
    """Reads settings from the TOML file named by ``VF_HUB_CONFIG`` (a flat table of field names)."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | None) -> None:
        super().__init__(settings_cls)
        self._data: dict[str, Any] = {}
        if path:
            import tomllib

            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
            # Accept both a flat file and one with a [hub] table.
            self._data = dict(raw.get("hub", raw))

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._data.items() if k in self.settings_cls.model_fields}


class Settings(BaseSettings):
    """Every knob of the hub. Defaults give the embedded, zero set-up mode."""

    model_config = SettingsConfigDict(env_prefix="VF_HUB_", extra="ignore")

    data_dir: Path = Field(default=Path("hub-data"), description="Folder for the SQLite file and local files")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in data_dir")
    storage: Literal["local", "s3"] = "local"
    storage_path: Path | None = Field(default=None, description="Local file store; default data_dir/files")
    s3_endpoint_url: str | None = None
    s3_bucket: str = "vf-hub"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_region: str = "us-east-1"
    s3_prefix: str = ""
    s3_create_bucket: bool = True

    admin_token: SecretStr | None = Field(default=None, description="Bootstraps user 'admin' holding it")
    migrate_on_start: bool = True
    public_url: str | None = Field(default=None, description="Absolute base URL shown in install commands")
    default_private: bool = False
    index_auth_challenge: bool = Field(
        default=False,
        description=(
            "Answer anonymous index/file requests for absent or private projects with 401 + a Basic challenge "
            "instead of 404, for clients that send credentials only when challenged (pip with netrc/keyring). "
            "Existence is still not revealed: absent and private look the same."
        ),
    )
    public_index_url: str = Field(
        default="https://pypi.org/simple/",
        description="The public index install commands send an environment's public dependencies to",
    )
    allowed_public_names: list[str] = Field(
        default_factory=list,
        description=(
            "Names on the protected public-name list (hub/data/public_names.txt) that this hub lets users "
            "publish anyway (an operator's decision; a hub admin can also claim one with POST /environments)"
        ),
    )
    public_names_file: Path | None = Field(
        default=None,
        description=(
            "A file of more protected public names (one a line, '#' comments), on top of "
            "hub/data/public_names.txt: e.g. the most downloaded projects of the public index"
        ),
    )
    reserved_names: list[str] = Field(
        default_factory=lambda: ["verifiers", "pip", "setuptools", "wheel", "torch", "vllm", "simple"],
        description="Distribution names nobody may publish (they must resolve from the normal index)",
    )

    # Upload limits.
    max_request_bytes: int = 320 * MiB
    max_file_bytes: int = 150 * MiB
    max_uncompressed_bytes: int = 512 * MiB
    max_member_bytes: int = 128 * MiB
    max_compression_ratio: float = 100.0
    ratio_check_min_bytes: int = 1 * MiB
    max_archive_members: int = 20000

    # Bounds on what one request may ask of the database and the server.
    db_statement_timeout_ms: int = Field(
        default=5000, description="PostgreSQL statement_timeout for every request's queries (0: none)"
    )
    max_search_tags: int = 10
    source_max_archive_bytes: int = Field(default=32 * MiB, description="Largest sdist (unpacked) browsable")
    source_cache_bytes: int = Field(default=64 * MiB, description="Source-browsing index kept per worker")
    max_body_bytes: int = Field(
        default=1 * MiB,
        description=(
            "Bound on every request body except the two upload routes, whatever its Content-Type (413 "
            "beyond, refused from Content-Length before a byte is read, counted as a chunked body arrives)"
        ),
    )
    max_json_depth: int = Field(default=32, description="Bound on the nesting of stored JSON (422 beyond)")
    max_eval_bytes: int = Field(default=256 * 1024, description="An eval's metadata + summary, serialised")
    max_evals_per_user: int = Field(default=100, description="Eval results one user may keep per environment")
    max_upload_files: int = 4
    max_concurrent_uploads: int = Field(default=8, description="Uploads one worker streams at once (429 beyond)")
    max_uploads_per_user: int = Field(
        default=2, ge=1, description="Of those, the slots one user may hold at once (429 beyond): a fair share"
    )

    # Slow and many clients. A connection must finish its request head within header_timeout_seconds of
    # opening (or of its first byte, on a kept-alive connection); a body gets body_timeout_seconds of
    # grace plus one second per body_min_bytes_per_second it has delivered (Apache's mod_reqtimeout
    # rule), so a slow but steady upload finishes and a trickle is cut off with 408.
    header_timeout_seconds: float = Field(default=10.0, gt=0, description="Time to send a request's head")
    max_header_bytes: int = Field(default=64 * 1024, description="Request line + headers (431 beyond)")
    keep_alive_seconds: int = Field(default=5, ge=1, description="Idle time before a kept-alive connection closes")
    body_timeout_seconds: float = Field(default=30.0, gt=0, description="Grace for a request body's bytes")
    body_min_bytes_per_second: int = Field(
        default=16 * 1024, gt=0, description="Rate a body must keep up after its grace (408 when it falls behind)"
    )
    send_timeout_seconds: float = Field(
        default=60.0, gt=0, description="A client that reads nothing of a response for this long is dropped"
    )
    max_connections_per_client: int = Field(
        default=100,
        ge=1,
        description=(
            "Open connections one address may hold per worker (429 beyond); proxies named by "
            "forwarded_allow_ips are exempt (limit clients in the proxy)"
        ),
    )
    max_connections: int = Field(
        default=2000, ge=1, description="Open connections + requests one worker serves (uvicorn; 503 beyond)"
    )

    # Rate limits (token buckets, in-process: workers share nothing).
    rate_limit_enabled: bool = True
    auth_fail_burst: int = 20
    auth_fail_per_minute: float = 30.0
    write_burst: int = 120
    write_per_minute: float = 600.0

    # Index cache.
    index_cache_entries: int = 20000
    index_cache_max_bytes: int = 64 * MiB

    forwarded_allow_ips: str | None = Field(
        default=None,
        description="Proxy addresses whose X-Forwarded-For is trusted (uvicorn); rate limits key on the client",
    )

    # Verified environments (hub/checks.py): every version with a wheel is queued for a sandboxed check.
    checks_enabled: bool = Field(default=True, description="Queue a check for every version that gains a wheel")
    check_lease_seconds: float = Field(
        default=60.0, gt=0, description="A claimed check job's lease; workers heartbeat well within it"
    )
    check_max_attempts: int = Field(
        default=3, ge=1, description="Claims of one job (lost leases, checker errors) before it ends 'error'"
    )
    check_max_log_bytes: int = Field(default=16 * 1024, description="Log tail kept per check (the end)")
    check_max_report_bytes: int = Field(default=64 * 1024, description="Bound on a check's stored report")
    check_max_running_per_owner: int = Field(
        default=2,
        ge=1,
        description=(
            "Check jobs of one owner that run at once (live leases); the queue serves the owner served "
            "least recently first, so one owner's hanging versions never starve the others"
        ),
    )

    test_crash_at: Literal["stored", "committed"] | None = Field(
        default=None,
        description=(
            "Testing hook: SIGKILL this worker at a named point of publishing ('stored': blobs written, no "
            "row yet; 'committed': rows committed, no answer yet), so atomicity tests crash at a known point"
        ),
    )

    log_level: str = "INFO"
    log_json: bool = True
    cookie_secure: bool = False
    session_days: int = 30

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'hub.db').resolve()}"

    @property
    def resolved_storage_path(self) -> Path:
        return (self.storage_path or (self.data_dir / "files")).resolve()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            _TomlSource(settings_cls, os.environ.get("VF_HUB_CONFIG")),
            file_secret_settings,
        )


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (and ``VF_HUB_CONFIG``), with explicit keyword overrides on top."""
    return Settings(**overrides)
