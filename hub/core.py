"""The hub's state: settings, database, storage, caches, limiters, and the services built on them.

``Hub`` is one per application and holds what every request shares; it does no work of its own
beyond the upload slots (a limiter, like the token buckets). The writes and the domain rules live in
the services (``hub.services``), one per concern, reached as ``hub.accounts``, ``hub.environments``,
``hub.publishing``, ``hub.evals``, ``hub.downloads`` and ``hub.blobs``; every write is one transaction of
``hub.uow`` (the unit of work), which bumps the generation and drops the caches after the commit.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from hub.auth import PrincipalCache, TokenBucket, TokenUseTracker
from hub.db import Database, run_migrations
from hub.errors import HubError
from hub.http import GenerationReader
from hub.index import IndexCache
from hub.owners import ADMIN_TOKEN_RE, OWNER_RE, RESERVED_OWNERS, check_admin_token, normalise_owner
from hub.services.accounts import AccountService
from hub.services.blobs import STORAGE_MARKER, BlobService
from hub.services.downloads import DownloadService
from hub.services.environments import EnvironmentService
from hub.services.evals import EvalService
from hub.services.publishing import PublishingService, PublishResult, StagedUpload
from hub.services.uow import UnitOfWork
from hub.settings import Settings
from hub.source import SourceCache
from hub.storage import Storage, make_storage

# Their home before the services; imported from here by the CLI, the tests and the benchmarks.
__all__ = [
    "ADMIN_TOKEN_RE",
    "OWNER_RE",
    "RESERVED_OWNERS",
    "STORAGE_MARKER",
    "Hub",
    "PublishResult",
    "StagedUpload",
    "check_admin_token",
    "normalise_owner",
]


class Hub:
    """Everything a request handler needs; one per application."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.db = Database(settings.resolved_database_url, settings.db_statement_timeout_ms)
        if settings.migrate_on_start:
            run_migrations(self.db.engine)
        self.storage: Storage = make_storage(settings)
        self.tmp_dir = (settings.data_dir / "tmp").resolve()
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.auth_failures = TokenBucket(settings.auth_fail_burst, settings.auth_fail_per_minute)
        self.writes = TokenBucket(settings.write_burst, settings.write_per_minute)
        self.token_tracker = TokenUseTracker()
        self.principals = PrincipalCache()
        self._uploads = 0
        self._uploads_lock = threading.Lock()
        self._uploads_by_user: dict[int, int] = {}
        self.index_cache = IndexCache(self, settings.index_cache_entries, settings.index_cache_max_bytes)
        self.generations = GenerationReader(self.db.generation)  # the async index handlers' reads
        self.source_cache = SourceCache(settings.source_cache_bytes)
        # The principal cache needs no dropping: it is keyed by generation, which every write bumps.
        self.uow = UnitOfWork(self.db, self.index_cache.invalidate)
        self.accounts = AccountService(self.uow)
        self.environments = EnvironmentService(settings, self.uow)
        self.publishing = PublishingService(
            settings, self.db, self.uow, self.storage, self.environments, self.tmp_dir
        )
        self.downloads = DownloadService(self.db, self.uow)
        self.evals = EvalService(settings, self.uow)
        self.blobs = BlobService(self.db, self.storage, self.tmp_dir)
        if settings.admin_token:
            self.accounts.bootstrap_admin(settings.admin_token.get_secret_value())

    def close(self) -> None:
        self.generations.close()
        self.db.dispose()

    @contextlib.contextmanager
    def upload_slot(self, user_id: int) -> Iterator[None]:
        """One of ``max_concurrent_uploads`` slots of this worker, of which one user holds at most
        ``max_uploads_per_user`` (a fair share: one user's stalled uploads never block everyone's);
        429 at once beyond either."""
        with self._uploads_lock:
            if self._uploads >= self.settings.max_concurrent_uploads:
                raise HubError(429, "too many uploads in progress; retry shortly", {"Retry-After": "5"})
            mine = self._uploads_by_user.get(user_id, 0)
            if mine >= self.settings.max_uploads_per_user:
                raise HubError(
                    429,
                    f"you have {mine} uploads in progress, the most one user may have at once; retry when "
                    "one has finished",
                    {"Retry-After": "5"},
                )
            self._uploads += 1
            self._uploads_by_user[user_id] = mine + 1
        try:
            yield
        finally:
            with self._uploads_lock:
                self._uploads -= 1
                left = self._uploads_by_user.pop(user_id) - 1
                if left:
                    self._uploads_by_user[user_id] = left
