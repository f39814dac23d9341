"""Versions: list, publish, detail, yank, and browsing a version's source."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload

from hub import source
from hub.api.deps import (
    Addressed,
    EnvDep,
    HubDep,
    SessionDep,
    WriterDep,
    WriterEnvDep,
    form_bool,
    read_upload_form,
    require_write,
)
from hub.api.schemas import (
    PublishOut,
    SourceListOut,
    VersionDetail,
    VersionOut,
    YankIn,
)
from hub.auth import Principal
from hub.core import Hub
from hub.errors import HubError
from hub.http import content_disposition
from hub.queries import (
    install_commands,
    resolve_version,
    sdist_of,
    sorted_versions,
    version_out,
)
from hub.versions import normalise_version

router = APIRouter()


@router.get("/environments/{owner}/{name}/versions", response_model=list[VersionOut], tags=["versions"])
def list_versions(request: Request, s: SessionDep, target: EnvDep) -> list[dict[str, Any]]:
    return [version_out(request, s, v) for v in sorted_versions(s, target.env)]


UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["files"],
                "properties": {
                    "files": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "description": "The wheel and/or the sdist of one version",
                    },
                    "private": {"type": "boolean", "description": "Visibility the environment must have"},
                },
            }
        }
    },
}


@router.post(
    "/environments/{owner}/{name}/versions",
    response_model=PublishOut,
    tags=["versions"],
    openapi_extra={"requestBody": UPLOAD_BODY},
)
async def publish_version(request: Request, hub: HubDep, principal: WriterDep, response: Response, owner: str, name: str) -> dict[str, Any]:
    """Publish one version (a wheel and an sdist, or one at a time). The archive's distribution name
    must be ``name``. Re-uploading identical bytes is a no-op (200); different bytes for an existing
    file are 409. A new version answers 201.

    The credentials are checked, and an upload slot taken, before a byte of the body is read."""
    with hub.upload_slot(principal.user_id):
        form = await read_upload_form(request, hub.settings.max_upload_files)
        try:
            files = [f for f in form.getlist("files") if isinstance(f, StarletteUpload)]
            if not files:
                raise HubError(422, "no files: send the wheel and/or the sdist as multipart 'files' parts")
            private = form_bool(form.get("private"), "private")
            result = await run_in_threadpool(_stage_and_publish, hub, principal, owner, name, files, private)
        finally:
            await form.close()
    response.status_code = 201 if any(f["created"] for f in result.files) else 200
    return result.__dict__


def _stage_and_publish(
    hub: Hub, principal: Principal, owner: str | None, name: str | None, files: list[Any], private: bool | None
) -> Any:
    staged = []
    try:
        for up in files:
            staged.append(hub.publishing.stage(up.file, up.filename or ""))
    except BaseException:
        hub.publishing.discard(staged)
        raise
    return hub.publishing.publish(principal, owner, name, staged, private=private)


@router.get(
    "/environments/{owner}/{name}/versions/{version}", response_model=VersionDetail, tags=["versions"]
)
def get_version(request: Request, hub: HubDep, s: SessionDep, target: EnvDep, version: str) -> dict[str, Any]:
    """``version`` may be ``latest``: the newest non-yanked final release (else newest pre-release)."""
    ver = resolve_version(s, target.env, version)
    out = version_out(request, s, ver, detail=True)
    out["install_commands"] = install_commands(hub, request, s, target.principal, target.env, target.owner, ver)
    return out


@router.post(
    "/environments/{owner}/{name}/versions/{version}/yank", response_model=VersionOut, tags=["versions"]
)
def yank_version(
    request: Request, hub: HubDep, s: SessionDep, principal: WriterDep, target: WriterEnvDep, version: str,
    body: Annotated[YankIn | None, Body()] = None,
) -> dict[str, Any]:
    return _set_yank(request, hub, s, principal, target, version, True, body.reason if body else "")


@router.post(
    "/environments/{owner}/{name}/versions/{version}/unyank", response_model=VersionOut, tags=["versions"]
)
def unyank_version(
    request: Request, hub: HubDep, s: SessionDep, principal: WriterDep, target: WriterEnvDep, version: str
) -> dict[str, Any]:
    return _set_yank(request, hub, s, principal, target, version, False, None)


def _set_yank(
    request: Request, hub: Hub, s: Session, principal: Principal, target: Addressed, version: str, yanked: bool,
    reason: str | None,
) -> dict[str, Any]:
    require_write(principal, target.env)
    ver = hub.publishing.set_yanked(target.env.id, normalise_version(version), yanked, reason)
    return version_out(request, s, ver)  # the read session's first query: after the commit


@router.get("/environments/{owner}/{name}/versions/{version}/source", response_model=SourceListOut, tags=["versions"])
def list_source(hub: HubDep, s: SessionDep, target: EnvDep, version: str) -> dict[str, Any]:
    """The files of the version's sdist (from an index of the stored archive, built once per worker)."""
    ver = resolve_version(s, target.env, version)
    f = sdist_of(s, ver)
    key, filename = f.storage_key, f.filename
    idx = hub.source_cache.get(hub.storage, key, hub.settings.source_max_archive_bytes)
    return {"version": ver.version, "sdist": filename, "files": idx.files}


@router.get(
    "/environments/{owner}/{name}/versions/{version}/source/{path:path}", response_class=Response, tags=["versions"],
    responses={200: {"content": {"text/plain": {}, "application/octet-stream": {}}, "description": "The file: text/plain when UTF-8 text, else a download"}},
)
def read_source(hub: HubDep, s: SessionDep, target: EnvDep, version: str, path: str) -> Response:
    """One file of the sdist: as ``text/plain`` when it is UTF-8 text (HTML and SVG included, so that
    nothing uploaded ever renders on the hub's origin), otherwise as a download."""
    env = target.env
    ver = resolve_version(s, env, version)
    key = sdist_of(s, ver).storage_key
    data = source.member(hub.source_cache.get(hub.storage, key, hub.settings.source_max_archive_bytes), path)
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}
    try:
        data.decode("utf-8")
        media = "text/plain; charset=utf-8"
    except UnicodeDecodeError:
        media = "application/octet-stream"
        headers["Content-Disposition"] = content_disposition(path.rsplit("/", 1)[-1])
    if env.private:
        headers["Cache-Control"] = "private, no-cache"
    return Response(data, media_type=media, headers=headers)
