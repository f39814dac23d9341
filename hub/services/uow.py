"""The unit of work: the one way the hub writes.

``UnitOfWork.write()`` is a transaction: committed when its block succeeds, rolled back when it raises.
A write that changes anything a cache holds (an index page, a caller's rights; the default) also bumps
the database's ``generation`` counter **inside** that transaction, so every worker, on every host,
drops its page and principal caches at its next request; and once the commit is done, this worker's
caches are dropped at once. Nothing else in the hub bumps the generation or clears a cache by hand (a
test scans the HTTP layer for it), so no write can forget either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from hub.db import Database, bump_generation


class UnitOfWork:
    def __init__(self, db: Database, invalidate: Callable[[], None]) -> None:
        self.db = db
        self._invalidate = invalidate

    @contextmanager
    def write(self, *, cached: bool = True) -> Iterator[Session]:
        """One write transaction. ``cached=False`` for writes no cache shows (stars, eval results,
        download counters): they neither bump the generation nor drop caches."""
        with self.db.session() as s:
            s.info["vf_cached"] = cached
            yield s
            cached = s.info["vf_cached"]
            if cached:
                bump_generation(s)
        if cached:
            self.after_commit()

    @staticmethod
    def unchanged(session: Session) -> None:
        """This transaction turned out to change nothing a cache shows (an identical re-upload): commit
        it without bumping the generation."""
        session.info["vf_cached"] = False

    def after_commit(self) -> None:
        """Drop this worker's caches (the other workers notice the generation)."""
        self._invalidate()
