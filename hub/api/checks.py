"""Checks (verified environments, ``hub/checks.py``): the check workers' job API and each version's
check history.

Workers authenticate with a ``worker``-scope token, which is refused everywhere else
(``hub.http.principal_of``); such a token can claim a job, extend its lease, fetch the files of the
job it holds (its wheel and its hub dependencies' wheels), and report. Nothing else: it reads no
private environment outside its job, and a lease works only with the token that claimed it.
Another user's worker token claims public environments and its own owners' only
(``checks.may_claim_everything``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Request
from fastapi import Path as PathParam
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy import select

from hub import checks
from hub.api.deps import CallerDep, EnvDep, HubDep, SessionDep, WriterDep, WriterEnvDep, require_acts_on
from hub.auth import Principal
from hub.errors import HubError, not_found
from hub.http import content_disposition, principal_of
from hub.models import File
from hub.queries import resolve_version

router = APIRouter()


class ClaimIn(BaseModel):
    worker: str = Field(default="", max_length=100, description="A label for the worker (shown on the page)")


class HeartbeatIn(BaseModel):
    lease_token: str = Field(max_length=64)
    log_tail: str | None = Field(default=None, max_length=256 * 1024)


class ReportIn(BaseModel):
    lease_token: str = Field(max_length=64)
    status: Literal["passed", "failed", "error"]
    reason: str = Field(default="", max_length=checks.MAX_REASON_CHARS)
    log_tail: str = Field(default="", max_length=256 * 1024)
    report: checks.CheckReport = Field(default_factory=checks.CheckReport)


class CheckOut(BaseModel):
    id: int
    status: Literal["queued", "running", "passed", "failed", "error"]
    reason: str | None
    attempts: int
    trigger: str
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    duration_s: float | None


class ClaimOut(BaseModel):
    job: dict[str, Any] | None = Field(description="The claimed job with its lease, or null when none waits")


class HeartbeatOut(BaseModel):
    ok: bool
    lease_seconds: int


class ReportOut(BaseModel):
    id: int
    status: str


class CheckDetail(CheckOut):
    worker: str | None
    report: dict[str, Any]
    log_tail: str


def require_worker(request: Request) -> Principal:
    principal = principal_of(request, allow_worker=True)
    if principal is None:
        raise HubError(401, "authentication required", {"WWW-Authenticate": 'Basic realm="vf-hub"'})
    if principal.scope != "worker":
        raise HubError(
            403, "only check-worker tokens claim check jobs (vf hub token create USER --scope worker)"
        )
    return principal


WorkerToken = Annotated[Principal, Depends(require_worker)]


@router.post("/check-jobs/claim", response_model=ClaimOut, tags=["checks"])
def claim_job(
    request: Request, hub: HubDep, worker: WorkerToken, body: ClaimIn | None = None
) -> dict[str, Any]:
    """The next queued check (fair across owners; or one whose worker's lease ran out) with a fresh
    lease, or ``job: null``."""
    label = (body.worker if body else "") or (request.client.host if request.client else "worker")
    return {"job": checks.claim(hub.db, hub.settings, label, worker)}


@router.post("/check-jobs/{job_id}/heartbeat", response_model=HeartbeatOut, tags=["checks"])
def heartbeat(hub: HubDep, worker: WorkerToken, job_id: int, body: HeartbeatIn) -> dict[str, Any]:
    """Extend the lease; 409 when this claim lost the job (the worker must stop)."""
    if not checks.heartbeat(
        hub.db, hub.settings, _job_id(job_id), body.lease_token, body.log_tail, token_id=_token_id(worker)
    ):
        raise HubError(409, "this lease is no longer valid: the job was given to another worker or finished")
    return {"ok": True, "lease_seconds": hub.settings.check_lease_seconds}


@router.post("/check-jobs/{job_id}/report", response_model=ReportOut, tags=["checks"])
def report(hub: HubDep, worker: WorkerToken, job_id: int, body: ReportIn) -> dict[str, Any]:
    """Record the verdict. ``error`` (the checker's own failure) is retried up to ``check_max_attempts``."""
    run = checks.finish(
        hub.db,
        hub.settings,
        _job_id(job_id),
        body.lease_token,
        body.status,
        body.reason,
        body.log_tail,
        body.report.model_dump(exclude_defaults=True),
        token_id=_token_id(worker),
    )
    if run is None:
        raise HubError(409, "this lease is no longer valid: the job was given to another worker or finished")
    return {"id": run.id, "status": run.status}


def _serve_job_file(
    hub: Any, s: Any, worker: Principal, job_id: int, lease: str, sha256: str | None
) -> Response:
    """A file of the job this lease (claimed with this token, still live) holds: its wheel
    (``sha256`` None) or one of the hub dependencies the claim resolved. Anything else is 404, the same
    404 whether the file is absent, private or another job's."""
    import json

    run = checks.owns(s, _job_id(job_id), lease, _token_id(worker)) if lease else None
    if run is None:
        raise not_found("no such job held by this lease")
    allowed = json.loads(run.job_files or "[]")
    if sha256 is None:
        f = checks.wheel_of(s, run.version_id)
    elif sha256 in allowed:
        f = s.scalar(select(File).where(File.sha256 == sha256, File.kind == "wheel").order_by(File.id).limit(1))
    else:
        f = None
    if f is None:
        raise not_found("no such file in this job")
    key, filename, size = f.storage_key, f.filename, int(f.size)
    return StreamingResponse(
        hub.storage.iter_bytes(key),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size), "Content-Disposition": content_disposition(filename)},
    )


_FILE = {200: {"content": {"application/octet-stream": {}}, "description": "The file"}}


@router.get("/check-jobs/{job_id}/wheel", response_class=StreamingResponse, tags=["checks"], responses=_FILE)
def job_wheel(
    hub: HubDep,
    s: SessionDep,
    worker: WorkerToken,
    job_id: int,
    x_vf_lease: Annotated[str, Header(max_length=64)] = "",
) -> Response:
    """The wheel of the job this lease holds (private environments included, for that job only)."""
    return _serve_job_file(hub, s, worker, job_id, x_vf_lease, None)


@router.get(
    "/check-jobs/{job_id}/files/{sha256}", response_class=StreamingResponse, tags=["checks"], responses=_FILE
)
def job_file(
    hub: HubDep,
    s: SessionDep,
    worker: WorkerToken,
    job_id: int,
    sha256: Annotated[str, PathParam(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")],
    x_vf_lease: Annotated[str, Header(max_length=64)] = "",
) -> Response:
    """One file of the job this lease holds: its wheel or a hub dependency's wheel (by sha256)."""
    return _serve_job_file(hub, s, worker, job_id, x_vf_lease, sha256)


@router.get(
    "/environments/{owner}/{name}/versions/{version}/checks",
    response_model=list[CheckDetail],
    tags=["checks"],
)
def list_checks(s: SessionDep, target: EnvDep, caller: CallerDep, version: str) -> list[dict[str, Any]]:
    """Every check of the version, newest first (the first is its current status). The worker that
    ran each is shown to hub admins only."""
    admin = caller is not None and caller.is_admin
    ver = resolve_version(s, target.env, version)
    return [checks.check_out(r, detail=True, admin=admin) for r in checks.history(s, ver.id)]


@router.post(
    "/environments/{owner}/{name}/versions/{version}/checks",
    response_model=CheckOut,
    status_code=201,
    tags=["checks"],
)
def recheck(hub: HubDep, s: SessionDep, principal: WriterDep, target: WriterEnvDep, version: str) -> dict[str, Any]:
    """Queue the version for another check (hub admins; e.g. after a new ``verifiers`` release).
    Earlier verdicts stay in the history."""
    if not principal.is_admin:
        raise HubError(403, "only hub administrators re-queue checks")
    require_acts_on(principal, target.env)  # an admin's token limited to one environment acts there only
    ver = resolve_version(s, target.env, version)
    out = checks.check_out(checks.requeue(hub.uow, ver.id, principal.user_id))
    assert out is not None
    return out


def _token_id(worker: Principal) -> int:
    assert worker.token_id is not None  # a worker token is always a token
    return worker.token_id


def _job_id(job_id: int) -> int:
    if not 0 < job_id < 2**62:
        raise not_found("no such job")
    return job_id
