"""Whether any check worker is alive, for clients that would otherwise wait for a verdict that no
one will ever give (``vf push --wait`` against a hub started without ``--with-worker``).

A worker polls ``POST /check-jobs/claim`` every few seconds while the queue is empty and heartbeats
the job it holds while busy. So "alive" is: a claim seen within :data:`STALE_AFTER_S`, or a running
check whose lease has not run out. The last claim's time is one ``hub_state`` row
(``worker_seen_at``, Unix seconds), written at most every :data:`WRITE_EVERY_S` per hub process, so
idle polling costs the database almost nothing. Kept apart from ``hub/checks.py`` (the queue itself):
this module only observes it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError

from hub.db import Database
from hub.models import CheckRun, utcnow

KEY = "worker_seen_at"
#: Workers claim every 2 s by default (``vf hub worker --poll-interval``); a minute without any
#: claim means none is polling (a worker set to poll less often than that shows up as stale).
STALE_AFTER_S = 60
WRITE_EVERY_S = 5.0

_lock = threading.Lock()


def note_claim(db: Database) -> None:
    """Record that a worker just asked for a job (rate-limited per database; never fails the claim)."""
    now = time.monotonic()
    with _lock:
        last = getattr(db, "_vf_worker_seen_written", None)
        if last is not None and now - last < WRITE_EVERY_S:
            return
        db._vf_worker_seen_written = now  # type: ignore[attr-defined]
    stamp = int(time.time())
    try:
        with db.session() as s:
            done = s.execute(text("UPDATE hub_state SET value = :v WHERE key = :k"), {"v": stamp, "k": KEY})
            if done.rowcount == 0:
                s.execute(text("INSERT INTO hub_state (key, value) VALUES (:k, :v)"), {"v": stamp, "k": KEY})
    except IntegrityError:  # another process inserted the row first: its stamp is as good
        pass


def status(db: Database) -> dict[str, Any]:
    """``alive``, seconds since the last claim (None: never), running and queued check counts."""
    now = utcnow()
    with db.session() as s:
        seen = s.execute(text("SELECT value FROM hub_state WHERE key = :k"), {"k": KEY}).scalar()
        counts = dict(
            s.execute(
                select(CheckRun.status, func.count())
                .where(CheckRun.status.in_(("queued", "running")))
                .group_by(CheckRun.status)
            ).all()
        )
        leased = s.scalar(
            select(func.count()).where(CheckRun.status == "running", CheckRun.lease_expires_at > now)
        )
    ago = max(0.0, time.time() - int(seen)) if seen is not None else None
    return {
        "alive": bool(leased) or (ago is not None and ago <= STALE_AFTER_S),
        "last_claim_seconds_ago": round(ago, 1) if ago is not None else None,
        "stale_after_seconds": STALE_AFTER_S,
        "running": int(counts.get("running", 0)),
        "queued": int(counts.get("queued", 0)),
    }
