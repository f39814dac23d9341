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

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.orm import Session, aliased

from hub.auth import Principal
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
#: The hub's own account for check workers (``vf hub serve --with-worker``, ``hub worker-token``); a
#: reserved name (``hub.owners.SYSTEM_ACCOUNTS``), so only the hub itself ever creates it.
SYSTEM_WORKER = "check-worker"
_NEVER = dt.datetime(1970, 1, 1)
_OWNER_LOCK = 0x7643  # the first key of PostgreSQL's per-owner advisory lock taken by claims


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportedCheck(_Strict):
    name: str = Field(max_length=100)
    ok: bool
    skipped: bool = False
    detail: str = Field(default="", max_length=2000)


class HubDependency(_Strict):
    env: str = Field(max_length=200)
    version: str = Field(max_length=64)
    sha256: str = Field(pattern="^[0-9a-f]{64}$")


class CheckReport(_Strict):
    """What a worker may report about a check, field by field. The values come out of a sandbox
    (an environment could print anything): the API refuses anything else (422), and stored reports
    are read back through this model too, so pages and the API only ever see these fields."""

    env_args: dict[str, Any] = Field(default_factory=dict)
    num_examples: int | None = None
    rollouts_per_example: int | None = None
    wheel: str | None = Field(default=None, max_length=255)
    wheel_sha256: str | None = Field(default=None, max_length=64)
    hub_dependencies: list[HubDependency] = Field(default_factory=list, max_length=64)
    sandbox: str | None = Field(default=None, max_length=32)
    limits: dict[str, float] = Field(default_factory=dict, max_length=16)
    num_rollouts: int | None = None
    rewards: list[float | None] = Field(default_factory=list, max_length=1024)
    scripted_replies: list[str] = Field(default_factory=list, max_length=64)
    checks: list[ReportedCheck] = Field(default_factory=list, max_length=50)
    duration_s: float | None = None
    python_version: str | None = Field(default=None, max_length=32)
    verifiers_version: str | None = Field(default=None, max_length=64)
    truncated: bool = False
    note: str | None = Field(default=None, max_length=200)


def stored_report(raw: str | None) -> dict[str, Any]:
    """A stored report as the schema has it (unknown fields of older workers dropped; {} if unreadable)."""
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    known = {k: v for k, v in data.items() if k in CheckReport.model_fields}
    try:
        return CheckReport.model_validate(known).model_dump()
    except ValidationError:
        return {}


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


def check_out(run: CheckRun | None, *, detail: bool = False, admin: bool = False) -> dict[str, Any] | None:
    """The API's ``check`` object: the status and why; ``detail`` adds the report and the log tail.

    Which worker ran it is for hub admins only (``worker`` is null for everyone else): a label of the
    worker's host says nothing about the environment and something about the hub's machines."""
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
        report = stored_report(run.report_json)  # (older workers named their host in it: dropped)
        out.update(worker=(run.worker or None) if admin else None, report=report, log_tail=run.log_tail or "")
    return out


# --------------------------------------------------------------------------------- the queue
def _file_out(run_id: int, f: File, env: str, name: str, version: str) -> dict[str, Any]:
    return {
        "env": env,
        "name": name,
        "version": version,
        "filename": f.filename,
        "sha256": f.sha256,
        "size": int(f.size),
        "url": f"/api/v1/check-jobs/{run_id}/files/{f.sha256}",
    }


def owned_environments(s: Session, owner_id: int, names: set[str]) -> dict[str, Environment]:
    """The owner's environments among ``names`` (normalised), by name, in one query (a version's
    hub dependencies here, and the install advice of ``hub.queries``)."""
    if not names:
        return {}
    rows = s.scalars(select(Environment).where(Environment.owner_id == owner_id, Environment.name.in_(names)))
    return {d.name: d for d in rows}


def wheel_of(s: Session, version_id: int) -> File | None:
    return s.scalar(
        select(File).where(File.version_id == version_id, File.kind == "wheel").order_by(File.id).limit(1)
    )


def hub_dependencies(s: Session, env: Environment, ver: Version) -> tuple[list[tuple[Environment, Version]], str]:
    """The version's hub dependencies, transitively, by the rule ``vf install`` follows: a requirement
    that names an environment of the *same owner* comes from the hub (the newest non-yanked version
    that satisfies it, final releases before pre-releases), every other one from the public index;
    an environment it loads by id (``[tool.verifiers] environments``) comes from the same owner on
    the hub or the version cannot be checked.
    Returns the chosen versions and, when one cannot be satisfied, why (the environment's fault)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion
    from packaging.version import Version as PV

    chosen: dict[str, tuple[Environment, Version]] = {env.name: (env, ver)}
    # the extras asked of each chosen environment: a requirement behind one of them is needed too
    # (and a same-owner one must come from the hub, not from a public index)
    extras_of: dict[str, frozenset[str]] = {env.name: frozenset()}
    queue = [(env, ver)]
    while queue:
        e, v = queue.pop(0)
        # its requirements, then the environments it loads by id ([tool.verifiers] environments):
        # those are hub-only, never the public index's
        listed: list[tuple[Requirement, bool]] = []
        for raw, hub_only in [(raw, False) for raw in json.loads(v.dependencies or "[]")] + [
            (raw, True) for raw in json.loads(v.environments or "[]")
        ]:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                return [], f"{e.name} {v.version} declares an invalid requirement {str(raw)[:100]!r}"
            if req.url is not None:
                return [], f"{e.name} {v.version} depends on a direct reference {str(raw)[:100]!r}"
            extras = ("", *sorted(extras_of.get(e.name, frozenset())))
            if req.marker is None or any(req.marker.evaluate({"extra": x}) for x in extras):
                listed.append((req, hub_only))
        owned = owned_environments(s, env.owner_id, {canonicalize_name(req.name) for req, _ in listed} - set(chosen))
        for req, hub_only in listed:
            name = canonicalize_name(req.name)
            wanted = frozenset(canonicalize_name(x) for x in req.extras)
            if name in chosen:
                have = chosen[name][1].version
                if not req.specifier.contains(have, prereleases=True):
                    return [], f"{e.name} {v.version} needs {req}, but {name} {have} is the version being checked"
                if name in extras_of and not wanted <= extras_of[name]:
                    extras_of[name] |= wanted  # its requirements again, with the new extras
                    queue.append(chosen[name])
                continue
            dep = owned.get(name)
            if dep is None:
                if hub_only:
                    return [], (
                        f"{e.name} {v.version} loads the environment {req} ([tool.verifiers] environments), "
                        "which its owner does not publish on this hub; such environments never come from a public index"
                    )
                continue  # not the owner's environment: the public index's
            cands = []
            for dv in s.scalars(select(Version).where(Version.env_id == dep.id, Version.yanked.is_(False))):
                try:
                    parsed = PV(dv.version)
                except InvalidVersion:
                    continue
                if req.specifier.contains(dv.version, prereleases=True) and wheel_of(s, dv.id) is not None:
                    cands.append((not parsed.is_prerelease, parsed, dv))
            if not cands:
                return [], (
                    f"{e.name} {v.version} needs {req}, a hub dependency (the same owner's environment), and no "
                    f"non-yanked version of {name} with a wheel satisfies it"
                )
            pick = max(cands, key=lambda c: (c[0], c[1]))[2]
            chosen[name] = (dep, pick)
            extras_of[name] = wanted
            queue.append((dep, pick))
    return [c for n, c in chosen.items() if n != env.name], ""


_WITHHELD: Any = object()  # _job: the worker may not read one of the job's hub dependencies


def _job(s: Session, run: CheckRun, settings: Settings, principal: Principal | None = None) -> Any:
    """The claim's answer (None: nothing to check; ``_WITHHELD``: not for this worker); also
    records in ``job_files`` the files this claim may download."""
    ver = s.get(Version, run.version_id)
    env = s.get(Environment, run.env_id)
    wheel = wheel_of(s, run.version_id)
    if ver is None or env is None or wheel is None:
        return None
    owner = s.get(Owner, env.owner_id)
    assert owner is not None
    deps, problem = hub_dependencies(s, env, ver)
    if principal is not None and not may_claim_everything(principal):
        # a worker token of another user checks public environments; their private hub
        # dependencies are the owner's to read, not that worker's
        if any(d.private and d.owner_id not in principal.roles for d, _v in deps):
            return _WITHHELD
    hub_files = []
    for dep_env, dep_ver in deps:
        f = wheel_of(s, dep_ver.id)
        assert f is not None
        hub_files.append(_file_out(run.id, f, f"{owner.name}/{dep_env.name}", dep_env.name, dep_ver.version))
    run.job_files = json.dumps([wheel.sha256, *[f["sha256"] for f in hub_files]])
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
        "wheel": _file_out(run.id, wheel, f"{owner.name}/{env.name}", env.name, ver.version),
        # same-owner hub dependencies, pinned by sha256; the rest resolve from the public index
        "hub_dependencies": hub_files,
        "unresolvable": problem or None,
    }


def may_claim_everything(principal: Principal) -> bool:
    """The hub's own worker account and hub admins' worker tokens check every environment; any other
    worker token only public ones and those of the owners its user belongs to."""
    return principal.is_admin or principal.user_name == SYSTEM_WORKER


def claim(
    db: Database, settings: Settings, worker: str, principal: Principal | None = None
) -> dict[str, Any] | None:
    """Give ``worker`` a queued job (or one whose lease ran out), or None when there is none.

    Fair across owners: the next job is the oldest of the owner served least recently (the latest
    claim of its jobs), and an owner whose ``check_max_running_per_owner`` jobs hold live leases
    gets no more until one ends, so one owner's many (or hanging) versions never starve another's.
    ``principal`` (the worker token) limits which private environments it may check. Every claim
    also notes that a worker is polling (``hub.worker_presence``, for ``GET /check-workers``)."""
    from hub import worker_presence

    worker_presence.note_claim(db)
    lease = dt.timedelta(seconds=settings.check_lease_seconds)
    cap = settings.check_max_running_per_owner
    skip_owners: set[int] = set()
    skip_runs: set[int] = set()
    for _ in range(50):
        now = utcnow()
        with db.session() as s:
            r2, e2 = aliased(CheckRun), aliased(Environment)
            live = (
                select(func.count(r2.id))
                .join(e2, e2.id == r2.env_id)
                .where(e2.owner_id == Environment.owner_id, r2.status == "running", r2.lease_expires_at >= now)
                .scalar_subquery()
            )
            served = (
                select(func.max(r2.started_at))
                .join(e2, e2.id == r2.env_id)
                .where(e2.owner_id == Environment.owner_id)
                .scalar_subquery()
            )
            q = (
                select(
                    CheckRun.id, CheckRun.status, CheckRun.lease_token, CheckRun.attempts, CheckRun.worker,
                    Environment.owner_id,
                )
                .join(Environment, Environment.id == CheckRun.env_id)
                .where(
                    or_(
                        CheckRun.status == "queued",
                        and_(CheckRun.status == "running", CheckRun.lease_expires_at < now),
                    ),
                    live < cap,
                )
                .order_by(func.coalesce(served, _NEVER), CheckRun.id)
                .limit(1)
            )
            if skip_owners:
                q = q.where(Environment.owner_id.not_in(skip_owners))
            if skip_runs:
                q = q.where(CheckRun.id.not_in(skip_runs))
            if principal is not None and not may_claim_everything(principal):
                q = q.where(or_(Environment.private.is_(False), Environment.owner_id.in_(list(principal.roles))))
            if not db.sqlite:
                q = q.with_for_update(skip_locked=True, of=CheckRun)
            row = s.execute(q).first()
            if row is None:
                return None
            if not db.sqlite:
                # Claims of one owner's jobs take turns, so the count below sees every other claim.
                s.execute(text("SELECT pg_advisory_xact_lock(:k, :o)"), {"k": _OWNER_LOCK, "o": row.owner_id})
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
                    claimed_by_token_id=principal.token_id if principal is not None else None,
                    log_tail=CheckRun.log_tail + note if note else CheckRun.log_tail,
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:
                continue  # another worker won this one; look again
            # The bound, counted inside this write (SQLite: writers are serialised; PostgreSQL: the
            # owner's lock): a claim that would exceed it is undone and the owner skipped.
            running = s.scalar(
                select(func.count(CheckRun.id))
                .join(Environment, Environment.id == CheckRun.env_id)
                .where(
                    Environment.owner_id == row.owner_id,
                    CheckRun.status == "running",
                    CheckRun.lease_expires_at >= now,
                )
            )
            if (running or 0) > cap:
                s.rollback()
                skip_owners.add(row.owner_id)
                continue
            run = s.get(CheckRun, row.id)
            assert run is not None
            s.refresh(run)
            job = _job(s, run, settings, principal)
            if job is _WITHHELD:
                # a restricted worker token would get a private hub dependency its user cannot read:
                # the claim is undone and this job left to workers that may read it (the owner's
                # other jobs stay claimable)
                s.rollback()
                skip_runs.add(row.id)
                continue
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


def _owned(job_id: int, lease_token: str, token_id: int | None = None) -> list[Any]:
    cond = [CheckRun.id == job_id, CheckRun.status == "running", CheckRun.lease_token == lease_token]
    if token_id is not None:
        # only the token whose claim holds the lease (a claim made without one, in-process, binds none)
        cond.append(or_(CheckRun.claimed_by_token_id.is_(None), CheckRun.claimed_by_token_id == token_id))
    return cond


def heartbeat(
    db: Database,
    settings: Settings,
    job_id: int,
    lease_token: str,
    log_tail: str | None = None,
    token_id: int | None = None,
) -> bool:
    """Extend the lease of a job this claim still owns; False when the lease was lost."""
    values: dict[str, Any] = {
        "lease_expires_at": utcnow() + dt.timedelta(seconds=settings.check_lease_seconds)
    }
    if log_tail is not None:
        values["log_tail"] = tail_text(log_tail, settings.check_max_log_bytes)
    with db.session() as s:
        res = s.execute(update(CheckRun).where(*_owned(job_id, lease_token, token_id)).values(**values))
        return res.rowcount == 1


def owns(s: Session, job_id: int, lease_token: str, token_id: int | None = None) -> CheckRun | None:
    """The running job this lease (and, given, this worker token) holds, with a live lease."""
    return s.scalar(
        select(CheckRun).where(*_owned(job_id, lease_token, token_id), CheckRun.lease_expires_at >= utcnow())
    )


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
    token_id: int | None = None,
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
        run = s.scalar(select(CheckRun).where(*_owned(job_id, lease_token, token_id)))
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
        res = s.execute(update(CheckRun).where(*_owned(job_id, lease_token, token_id)).values(**values))
        if res.rowcount != 1:
            return None
        s.refresh(run)
        return run


# ------------------------------------------------------------------------------ worker accounts
EMBEDDED_TOKEN_NAME = "serve --with-worker"


def system_worker(hub: Any, s: Session) -> Owner:
    """The hub's own check-worker account, created on first use. Its name is reserved, so no
    registration can have taken it; one that exists as an organisation or an administrator (a
    database from before the reservation) is refused with what to do about it."""
    from hub.errors import HubError
    from hub.models import Owner as OwnerRow

    user = s.scalar(select(OwnerRow).where(OwnerRow.name == SYSTEM_WORKER))
    if user is not None and (user.kind != "user" or user.is_admin):
        raise HubError(
            409,
            f"the name {SYSTEM_WORKER!r} belongs to an organisation or an administrator, but it is the hub's "
            "own check-worker account; rename that owner in the database first",
        )
    if user is None:
        user = OwnerRow(name=SYSTEM_WORKER, display_name=SYSTEM_WORKER, kind="user", is_admin=False,
                        description="the hub's check workers")  # fmt: skip
        s.add(user)
        s.flush()
    return user


# An embedded worker polls every few seconds and its use is recorded at most once a minute, so a
# token unused for this long belongs to an instance that is gone (heartbeats of a running check
# count as use too).
EMBEDDED_TOKEN_STALE = 600  # seconds


def embedded_worker_token(hub: Any, s: Session) -> str:
    """A fresh worker token of the hub's own ``check-worker`` account for one
    ``vf hub serve --with-worker`` instance.

    Several instances may serve one database: each gets its own token and none revokes another's
    live one. What is rotated away is only the embedded tokens no instance has used for
    ``EMBEDDED_TOKEN_STALE`` seconds (instances that died without revoking theirs); tokens made with
    ``hub worker-token`` or ``hub token create`` are never touched. Revocation goes through
    ``revoke_tokens`` (it bumps the generation), so no worker keeps a revoked token cached."""
    import datetime as dt

    from sqlalchemy import func

    from hub.auth import add_token, revoke_tokens
    from hub.models import Token

    user = system_worker(hub, s)
    stale = utcnow() - dt.timedelta(seconds=EMBEDDED_TOKEN_STALE)
    revoke_tokens(
        s,
        Token.user_id == user.id,
        Token.name == EMBEDDED_TOKEN_NAME,
        func.coalesce(Token.last_used_at, Token.created_at) < stale,
    )
    secret, _tok = add_token(s, user, name=EMBEDDED_TOKEN_NAME, scope="worker")
    return secret


def requeue(uow: UnitOfWork, version_id: int, requested_by: int) -> CheckRun:
    """Queue the version for another check (a hub admin's re-check); 409 without a wheel or while one
    is pending. Earlier verdicts stay in the history. (Moved from ``hub.api.checks.recheck``: writes
    are the service layer's; the route resolves the version, so this module needs no ``hub.queries``,
    which imports it.)"""
    from hub.errors import Conflict

    with uow.write() as s:
        ver = s.get(Version, version_id)
        if ver is None:
            raise Conflict("the version is gone")
        if not has_wheel(s, ver):
            raise Conflict(f"version {ver.version} has no wheel to check")
        pending = s.scalar(
            select(CheckRun.id).where(CheckRun.version_id == ver.id, CheckRun.status.in_(("queued", "running")))
        )
        if pending is not None:
            raise Conflict(f"a check of {ver.version} is already queued or running")
        return enqueue(s, ver, trigger="recheck", requested_by=requested_by)
