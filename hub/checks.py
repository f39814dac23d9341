"""Verified environments: the queue of sandboxed checks and their verdicts, one place for its queries.

Every version that gains a wheel gets a ``check_runs`` row in ``queued``. Check workers
(``vf hub worker``, :mod:`verifiers.hub_client.check_worker`) claim jobs over HTTP
(``hub/api/checks.py``), run the SDK's checker on the exact wheel inside the sandbox, heartbeat,
and report ``passed`` / ``failed`` (the environment's fault) or ``error`` (the checker's fault,
retried). The hub never runs environment code.

Leases: a claim sets a fresh random ``lease_token`` and ``lease_expires_at``. A claim, a heartbeat and
a report are each one ``UPDATE ... WHERE id = ? AND status = ? AND lease_token = ?`` whose row count
says whether it won (compare-and-set), which is atomic on SQLite and PostgreSQL alike; on PostgreSQL
the candidate is also selected ``FOR UPDATE SKIP LOCKED`` so racing workers pick different jobs
instead of retrying. A job whose worker died (its lease ran out) is claimed again; after
``check_max_attempts`` claims it ends ``error``. So a job never runs twice at once, and a job that
kills every worker it touches cannot loop forever.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from hub.db import Database
from hub.models import CheckRun, Environment, File, Owner, Version, utcnow
from hub.settings import Settings

if TYPE_CHECKING:
    from hub.services.uow import UnitOfWork

STATUSES = ("queued", "running", "passed", "failed", "error")
FINAL = ("passed", "failed", "error")
REPORTED = ("passed", "failed", "error")
MAX_REASON_CHARS = 2000
LOST_LEASE = " lost its lease (the worker died or hung)"


def _ts(v: dt.datetime | None) -> str | None:
    return None if v is None else v.isoformat() + "Z"


def tail_text(text: str, max_bytes: int) -> str:
    """The last ``max_bytes`` bytes of ``text`` (on a character boundary), marked when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    return "[... earlier output cut ...]\n" + data[-max_bytes:].decode("utf-8", "ignore")


# ------------------------------------------------------------------------------------ enqueue
def enqueue(
    s: Session, ver: Version, *, trigger: str = "publish", requested_by: int | None = None
) -> CheckRun:
    run = CheckRun(
        version_id=ver.id,
        env_id=ver.env_id,
        status="queued",
        trigger=trigger,
        requested_by_id=requested_by,
        created_at=utcnow(),
    )
    s.add(run)
    s.flush()
    return run


def enqueue_on_publish(s: Session, settings: Settings, ver: Version, new_kinds: Iterable[str]) -> None:
    """Called inside the publish transaction: queue the version's first check when its wheel arrives."""
    if not settings.checks_enabled or "wheel" not in set(new_kinds):
        return
    if s.scalar(select(CheckRun.id).where(CheckRun.version_id == ver.id).limit(1)) is None:
        enqueue(s, ver)


def has_wheel(s: Session, ver: Version) -> bool:
    return (
        s.scalar(select(File.id).where(File.version_id == ver.id, File.kind == "wheel").limit(1)) is not None
    )


# -------------------------------------------------------------------------------------- reads
def latest_for(s: Session, version_ids: Iterable[int]) -> dict[int, CheckRun]:
    """The newest check of each version (its current status), in one query."""
    ids = list(version_ids)
    if not ids:
        return {}
    newest = (
        select(CheckRun.version_id, func.max(CheckRun.id).label("rid"))
        .where(CheckRun.version_id.in_(ids))
        .group_by(CheckRun.version_id)
        .subquery()
    )
    rows = s.scalars(select(CheckRun).join(newest, CheckRun.id == newest.c.rid)).all()
    return {r.version_id: r for r in rows}


def history(s: Session, version_id: int, limit: int = 50) -> list[CheckRun]:
    return list(
        s.scalars(
            select(CheckRun)
            .where(CheckRun.version_id == version_id)
            .order_by(CheckRun.id.desc())
            .limit(limit)
        ).all()
    )


def check_out(run: CheckRun | None, *, detail: bool = False) -> dict[str, Any] | None:
    """The API's ``check`` object: the status and why; ``detail`` adds the report and the log tail."""
    if run is None:
        return None
    duration = None
    if run.started_at is not None and run.finished_at is not None:
        duration = round((run.finished_at - run.started_at).total_seconds(), 3)
    out: dict[str, Any] = {
        "id": run.id,
        "status": run.status,
        "reason": run.reason or None,
        "attempts": run.attempts,
        "trigger": run.trigger,
        "created_at": _ts(run.created_at),
        "started_at": _ts(run.started_at),
        "finished_at": _ts(run.finished_at),
        "duration_s": duration,
    }
    if detail:
        try:
            report = json.loads(run.report_json or "{}")
        except ValueError:
            report = {}
        out.update(worker=run.worker or None, report=report, log_tail=run.log_tail or "")
    return out


# --------------------------------------------------------------------------------- the queue
def _job(s: Session, run: CheckRun, settings: Settings) -> dict[str, Any] | None:
    ver = s.get(Version, run.version_id)
    env = s.get(Environment, run.env_id)
    wheel = s.scalar(
        select(File).where(File.version_id == run.version_id, File.kind == "wheel").order_by(File.id).limit(1)
    )
    if ver is None or env is None or wheel is None:
        return None
    owner = s.get(Owner, env.owner_id)
    assert owner is not None
    return {
        "id": run.id,
        "lease_token": run.lease_token,
        "lease_seconds": settings.check_lease_seconds,
        "attempt": run.attempts,
        "max_attempts": settings.check_max_attempts,
        "env": f"{owner.name}/{env.name}",
        "owner": owner.name,
        "name": env.name,
        "version": ver.version,
        "requires_python": ver.requires_python,
        "dependencies": json.loads(ver.dependencies or "[]"),
        "wheel": {
            "filename": wheel.filename,
            "sha256": wheel.sha256,
            "size": int(wheel.size),
            "url": f"/api/v1/check-jobs/{run.id}/wheel",
        },
    }


def claim(db: Database, settings: Settings, worker: str) -> dict[str, Any] | None:
    """Give ``worker`` the oldest queued job (or one whose lease ran out), or None when there is none."""
    lease = dt.timedelta(seconds=settings.check_lease_seconds)
    for _ in range(50):
        now = utcnow()
        with db.session() as s:
            q = (
                select(CheckRun.id, CheckRun.status, CheckRun.lease_token, CheckRun.attempts, CheckRun.worker)
                .where(
                    or_(
                        CheckRun.status == "queued",
                        and_(CheckRun.status == "running", CheckRun.lease_expires_at < now),
                    )
                )
                .order_by(CheckRun.id)
                .limit(1)
            )
            if not db.sqlite:
                q = q.with_for_update(skip_locked=True)
            row = s.execute(q).first()
            if row is None:
                return None
            same = [CheckRun.id == row.id, CheckRun.status == row.status]
            same.append(
                CheckRun.lease_token.is_(None)
                if row.lease_token is None
                else CheckRun.lease_token == row.lease_token
            )
            note = ""
            if row.status == "running":
                note = f"attempt {row.attempts} on worker {row.worker!r}{LOST_LEASE}\n"
                if row.attempts >= settings.check_max_attempts:
                    s.execute(
                        update(CheckRun)
                        .where(*same)
                        .values(
                            status="error",
                            reason=(
                                f"the check lost its worker {row.attempts} times (killed, out of memory or hung); "
                                "giving up"
                            ),
                            log_tail=CheckRun.log_tail + note,
                            lease_token=None,
                            lease_expires_at=None,
                            finished_at=now,
                        )
                    )
                    continue
            token = secrets.token_hex(16)
            res = s.execute(
                update(CheckRun)
                .where(*same)
                .values(
                    status="running",
                    lease_token=token,
                    lease_expires_at=now + lease,
                    attempts=CheckRun.attempts + 1,
                    worker=worker[:100],
                    started_at=now,
                    finished_at=None,
                    log_tail=CheckRun.log_tail + note if note else CheckRun.log_tail,
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:
                continue  # another worker won this one; look again
            run = s.get(CheckRun, row.id)
            assert run is not None
            s.refresh(run)
            job = _job(s, run, settings)
            if job is None:  # the version lost its wheel or vanished: nothing to check
                run.status, run.reason, run.lease_token, run.finished_at = (
                    "error",
                    "the version has no wheel",
                    None,
                    now,
                )
                continue
            return job
    return None


def _owned(job_id: int, lease_token: str) -> list[Any]:
    return [CheckRun.id == job_id, CheckRun.status == "running", CheckRun.lease_token == lease_token]


def heartbeat(
    db: Database, settings: Settings, job_id: int, lease_token: str, log_tail: str | None = None
) -> bool:
    """Extend the lease of a job this claim still owns; False when the lease was lost."""
    values: dict[str, Any] = {
        "lease_expires_at": utcnow() + dt.timedelta(seconds=settings.check_lease_seconds)
    }
    if log_tail is not None:
        values["log_tail"] = tail_text(log_tail, settings.check_max_log_bytes)
    with db.session() as s:
        res = s.execute(update(CheckRun).where(*_owned(job_id, lease_token)).values(**values))
        return res.rowcount == 1


def owns(s: Session, job_id: int, lease_token: str) -> CheckRun | None:
    return s.scalar(select(CheckRun).where(*_owned(job_id, lease_token)))


def bounded_report(report: dict[str, Any], max_bytes: int) -> str:
    """The report as JSON, its longest lists shortened until it fits ``max_bytes``."""
    text = json.dumps(report, default=str)
    report = dict(report)
    while len(text.encode()) > max_bytes:
        lists = [k for k, v in report.items() if isinstance(v, list) and v]
        if not lists:
            return json.dumps({"truncated": True, "note": "the report was too large to keep"})
        key = max(lists, key=lambda k: len(json.dumps(report[k], default=str)))
        report[key] = report[key][: len(report[key]) // 2]
        report["truncated"] = True
        text = json.dumps(report, default=str)
    return text


def finish(
    db: Database,
    settings: Settings,
    job_id: int,
    lease_token: str,
    status: str,
    reason: str,
    log_tail: str,
    report: dict[str, Any],
) -> CheckRun | None:
    """Record a worker's verdict; None when this claim no longer owns the job (nothing is written).

    ``error`` (the checker failed, not the environment) puts the job back in the queue until it has
    been tried ``check_max_attempts`` times.
    """
    assert status in REPORTED
    now = utcnow()
    values: dict[str, Any] = {
        "reason": reason[:MAX_REASON_CHARS],
        "log_tail": tail_text(log_tail, settings.check_max_log_bytes),
        "report_json": bounded_report(report, settings.check_max_report_bytes),
        "lease_token": None,
        "lease_expires_at": None,
    }
    with db.session() as s:
        run = owns(s, job_id, lease_token)
        if run is None:
            return None
        # Earlier attempts that lost their worker stay on record above this attempt's log.
        notes = [line for line in (run.log_tail or "").splitlines() if line.endswith(LOST_LEASE)]
        if notes:
            values["log_tail"] = "\n".join(notes) + "\n" + values["log_tail"]
        if status == "error" and run.attempts < settings.check_max_attempts:
            values.update(status="queued", started_at=None, finished_at=None)
        else:
            values.update(status=status, finished_at=now)
        res = s.execute(update(CheckRun).where(*_owned(job_id, lease_token)).values(**values))
        if res.rowcount != 1:
            return None
        s.refresh(run)
        return run


def requeue(uow: UnitOfWork, env: Environment, version: str, requested_by: int) -> CheckRun:
    """Queue ``version`` of ``env`` for another check (a hub admin's re-check); 409 without a wheel or
    while one is pending. Earlier verdicts stay in the history. (Moved from ``hub.api.checks.recheck``:
    writes are the service layer's.)"""
    from hub.errors import Conflict
    from hub.queries import resolve_version

    with uow.write() as s:
        ver = resolve_version(s, env, version)
        if not has_wheel(s, ver):
            raise Conflict(f"version {ver.version} has no wheel to check")
        pending = s.scalar(
            select(CheckRun.id).where(CheckRun.version_id == ver.id, CheckRun.status.in_(("queued", "running")))
        )
        if pending is not None:
            raise Conflict(f"a check of {ver.version} is already queued or running")
        return enqueue(s, ver, trigger="recheck", requested_by=requested_by)
