"""The blobs the hub stored: the storage's identity, paired with the database's, and collecting the
blobs no release references (left by a crash between a blob's write and its rows' commit).

Moved here from ``hub.core.Hub`` (``claim_storage``, ``recorded_storage_id``, ``check_storage_is_ours``,
``gc_orphans``, ``orphans``).
"""

from __future__ import annotations

import contextlib
import io
import secrets
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from hub.db import Database
from hub.errors import Conflict
from hub.models import File
from hub.storage import Storage

STORAGE_MARKER = "hub-storage-id"


class BlobService:
    def __init__(self, db: Database, storage: Storage, tmp_dir: Path) -> None:
        self.db = db
        self.storage = storage
        self.tmp_dir = tmp_dir

    def claim_storage(self) -> None:
        """At first use, give the storage and the database one shared id (a marker object in the storage,
        a ``hub_state`` row in the database), so that ``gc`` can tell it is collecting its own storage.

        Only a database and a storage that both have no id are paired; any other mismatch is left alone
        (serving works, ``gc`` refuses)."""
        db_id = self.recorded_storage_id()
        if self.storage.exists(STORAGE_MARKER):
            return
        if db_id is None:
            with contextlib.suppress(IntegrityError), self.db.session() as s:
                s.execute(
                    text("INSERT INTO hub_state (key, value) VALUES ('storage_id', :v)"),
                    {"v": secrets.randbelow(2**62) + 1},
                )
            db_id = self.recorded_storage_id()
            self.storage.put(STORAGE_MARKER, io.BytesIO(str(db_id).encode()))

    def recorded_storage_id(self) -> int | None:
        with self.db.engine.connect() as conn:
            v = conn.execute(text("SELECT value FROM hub_state WHERE key = 'storage_id'")).scalar()
        return None if v is None else int(v)

    def check_storage_is_ours(self) -> None:
        """Conflict unless this database recorded the id the storage carries."""
        db_id = self.recorded_storage_id()
        if db_id is None:
            raise Conflict(
                "this database has no record of any storage; refusing to collect (is VF_HUB_DATABASE_URL the "
                "database that serves this storage?)",
            )
        if not self.storage.exists(STORAGE_MARKER):
            raise Conflict(f"the storage has no {STORAGE_MARKER} marker; refusing to collect a storage "
                           "this database never used")  # fmt: skip
        with self.storage.open(STORAGE_MARKER) as fh:
            marker = fh.read(100).decode("ascii", "replace").strip()
        if marker != str(db_id):
            raise Conflict(
                "the storage belongs to another database (storage ids differ); refusing to collect"
            )

    def gc_orphans(self, min_age_seconds: float = 3600.0, *, dry_run: bool = False) -> int:
        """Delete stored blobs no file row references (left by a crash between the write and the commit);
        with ``dry_run``, only count them (``orphans`` lists them). Refuses a storage this database does
        not know (see ``claim_storage``).

        Blobs younger than ``min_age_seconds`` are spared: they may belong to an upload still in flight.
        """
        keys = self.orphans(min_age_seconds)
        if dry_run:
            return len(keys)
        for key in keys:
            self.storage.delete(key)
        # Temp files of uploads interrupted by a crash.
        import time

        now = time.time()
        for p in self.tmp_dir.glob("upload-*"):
            if now - p.stat().st_mtime >= min_age_seconds:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        return len(keys)

    def orphans(self, min_age_seconds: float = 3600.0) -> list[str]:
        """Stored blobs no file row references and older than ``min_age_seconds``."""
        import time

        self.check_storage_is_ours()
        with self.db.session() as s:
            referenced = set(s.scalars(select(File.storage_key)))
        now = time.time()
        return [
            key
            for key in self.storage.keys("files/")
            if key not in referenced and now - self.storage.modified_at(key) >= min_age_seconds
        ]
