"""Download counters (total and per day)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from hub.db import Database
from hub.models import DailyDownloads, Environment
from hub.services.uow import UnitOfWork


class DownloadService:
    def __init__(self, db: Database, uow: UnitOfWork) -> None:
        self.db = db
        self.uow = uow

    def count_download(self, env_id: int) -> None:
        """One real file download: bump the total and today's counter atomically (exact under concurrency)."""
        today = dt.datetime.now(dt.UTC).date()
        with self.uow.write(cached=False) as s:  # counted on every download: must not drop the caches
            s.execute(text("UPDATE environments SET downloads = downloads + 1 WHERE id = :i"), {"i": env_id})
            table = DailyDownloads.__table__
            if self.db.sqlite:
                from sqlalchemy.dialects.sqlite import insert
            else:
                from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
            stmt = insert(table).values(env_id=env_id, day=today, count=1)
            stmt = stmt.on_conflict_do_update(
                index_elements=[table.c.env_id, table.c.day], set_={"count": table.c.count + 1}
            )
            s.execute(stmt)

    def downloads(self, s: Session, env_id: int) -> dict[str, Any]:
        since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=29)
        total = s.scalar(select(Environment.downloads).where(Environment.id == env_id)) or 0
        rows = s.execute(
            select(DailyDownloads.day, DailyDownloads.count)
            .where(DailyDownloads.env_id == env_id, DailyDownloads.day >= since)
            .order_by(DailyDownloads.day)
        ).all()
        return {
            "total": int(total),
            "last_30_days": int(sum(r[1] for r in rows)),
            "daily": [{"day": r[0].isoformat(), "count": int(r[1])} for r in rows],
        }
