"""Checks (verified environments, ``hub/checks.py``): the check workers' job API and each version's
check history.

Workers authenticate with a ``worker``-scope token, which is refused everywhere else
(``hub.http.principal_of``); such a token can claim a job, extend its lease, fetch the wheel of the
job it holds, and report. Nothing else: it reads no private environment outside its job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy import select

from hub import checks
from hub.api.deps import EnvDep, HubDep, SessionDep, WriterDep, WriterEnvDep
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
    report: dict[str, Any] = Field(default_factory=dict)


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
    request: Request, hub: HubDep, _worker: WorkerToken, body: ClaimIn | None = None
) -> dict[str, Any]:
    """The oldest queued check (or one whose worker's lease ran out) with a fresh lease, or ``job: null``."""
    label = (body.worker if body else "") or (request.client.host if request.client else "worker")
    return {"job": checks.claim(hub.db, hub.settings, label)}


@router.post("/check-jobs/{job_id}/heartbeat", response_model=HeartbeatOut, tags=["checks"])
def heartbeat(hub: HubDep, _worker: WorkerToken, job_id: int, body: HeartbeatIn) -> dict[str, Any]:
    """Extend the lease; 409 when this claim lost the job (the worker must stop)."""
    if not checks.heartbeat(hub.db, hub.settings, _job_id(job_id), body.lease_token, body.log_tail):
        raise HubError(409, "this lease is no longer valid: the job was given to another worker or finished")
    return {"ok": True, "lease_seconds": hub.settings.check_lease_seconds}


@router.post("/check-jobs/{job_id}/report", response_model=ReportOut, tags=["checks"])
def report(hub: HubDep, _worker: WorkerToken, job_id: int, body: ReportIn) -> dict[str, Any]:
    """Record the verdict. ``error`` (the checker's own failure) is retried up to ``check_max_attempts``."""
    run = checks.finish(
        hub.db,
        hub.settings,
        _job_id(job_id),
        body.lease_token,
        body.status,
        body.reason,
        body.log_tail,
        body.report,
    )
    if run is None:
        raise HubError(409, "this lease is no longer valid: the job was given to another worker or finished")
    return {"id": run.id, "status": run.status}


@router.get(
    "/check-jobs/{job_id}/wheel", response_class=StreamingResponse, tags=["checks"],
    responses={200: {"content": {"application/octet-stream": {}}, "description": "The file"}},
)
def job_wheel(
    hub: HubDep,
    s: SessionDep,
    _worker: WorkerToken,
    job_id: int,
    x_vf_lease: Annotated[str, Header(max_length=64)] = "",
) -> Response:
    """The wheel of the job this lease holds (private environments included, for that job only)."""
    run = checks.owns(s, _job_id(job_id), x_vf_lease) if x_vf_lease else None
    if run is None:
        raise not_found("no such job held by this lease")
    wheel = s.scalar(
        select(File).where(File.version_id == run.version_id, File.kind == "wheel").order_by(File.id).limit(1)
    )
    if wheel is None:
        raise not_found("the version has no wheel")
    key, filename, size = wheel.storage_key, wheel.filename, int(wheel.size)
    return StreamingResponse(
        hub.storage.iter_bytes(key),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size), "Content-Disposition": content_disposition(filename)},
    )


@router.get(
    "/environments/{owner}/{name}/versions/{version}/checks",
    response_model=list[CheckDetail],
    tags=["checks"],
)
def list_checks(s: SessionDep, target: EnvDep, version: str) -> list[dict[str, Any]]:
    """Every check of the version, newest first (the first is its current status)."""
    ver = resolve_version(s, target.env, version)
    return [checks.check_out(r, detail=True) for r in checks.history(s, ver.id)]


@router.post(
    "/environments/{owner}/{name}/versions/{version}/checks",
    response_model=CheckOut,
    status_code=201,
    tags=["checks"],
)
def recheck(hub: HubDep, principal: WriterDep, target: WriterEnvDep, version: str) -> dict[str, Any]:
    """Queue the version for another check (hub admins; e.g. after a new ``verifiers`` release).
    Earlier verdicts stay in the history."""
    if not principal.is_admin:
        raise HubError(403, "only hub administrators re-queue checks")
    out = checks.check_out(checks.requeue(hub.uow, target.env, version, principal.user_id))
    assert out is not None
    return out


def _job_id(job_id: int) -> int:
    if not 0 < job_id < 2**62:
        raise not_found("no such job")
    return job_id
