"""The PyPI legacy upload API (``POST /legacy/``) spoken by ``twine upload`` and ``uv publish``.

Each request carries one file (``content``) plus form fields (``:action=file_upload``, ``name``,
``version``, ``sha256_digest``, metadata). The token is the Basic-auth password. The owner is the
token's user, or the owner an owner- or environment-limited token names; for an existing environment
it is that environment's owner.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from hub.api.deps import read_upload_form
from hub.auth import Principal
from hub.core import Hub
from hub.errors import HubError
from hub.http import hub_of, require_principal

router = APIRouter()


LEGACY_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["content"],
                "properties": {
                    "content": {"type": "string", "format": "binary", "description": "The distribution file"},
                    ":action": {"type": "string", "default": "file_upload"},
                    "name": {"type": "string", "maxLength": 200},
                    "version": {"type": "string", "maxLength": 100},
                    "sha256_digest": {"type": "string", "maxLength": 64},
                    "filetype": {"type": "string", "maxLength": 32},
                },
            }
        }
    },
}


@router.post(
    "/legacy/",
    tags=["upload"],
    response_class=PlainTextResponse,
    summary="twine / uv publish uploads",
    openapi_extra={"requestBody": LEGACY_BODY},
)
async def legacy_upload(request: Request) -> PlainTextResponse:
    """One file per request. The credentials are checked, and an upload slot taken, before a byte of
    the body is read."""
    hub = hub_of(request)
    principal = await run_in_threadpool(require_principal, request, write=True)
    with hub.upload_slot(principal.user_id):
        form = await read_upload_form(request, 1)
        try:
            content = form.get("content")
            if not isinstance(content, UploadFile):
                raise HubError(422, "the distribution file must be the multipart 'content' part")
            fields = {}
            for key, limit in ((":action", 32), ("name", 200), ("version", 100), ("sha256_digest", 64),
                               ("filetype", 32)):  # fmt: skip
                value = form.get(key)
                if value is not None and (not isinstance(value, str) or len(value) > limit):
                    raise HubError(422, f"form field {key!r} must be text of at most {limit} characters")
                fields[key] = value
            return await run_in_threadpool(_legacy_publish, hub, principal, content, fields)
        finally:
            await form.close()


def _legacy_publish(
    hub: Hub, principal: Principal, content: UploadFile, fields: dict[str, str | None]
) -> PlainTextResponse:
    action = fields[":action"] or "file_upload"
    name, version, sha256_digest, filetype = (
        fields["name"], fields["version"], fields["sha256_digest"], fields["filetype"]
    )  # fmt: skip
    if action != "file_upload":
        raise HubError(400, f"unsupported :action {action!r}")
    filename = content.filename or ""
    staged = [hub.publishing.stage(content.file, filename, expected_sha256=sha256_digest or None)]
    try:
        hub.publishing.validate(staged)
    except BaseException:
        hub.publishing.discard(staged)
        raise
    info = staged[0].info
    assert info is not None
    try:
        if name is not None and canonicalize_name(name) != info.name:
            raise HubError(400, f"form field name {name!r} does not match the archive ({info.name!r})")
        if version is not None:
            try:
                if str(Version(version)) != info.version:
                    raise HubError(
                        400, f"form field version {version!r} does not match the archive ({info.version})"
                    )
            except (InvalidVersion, ValueError):
                raise HubError(400, f"invalid version {version[:80]!r}") from None
        if filetype is not None and filetype not in ("bdist_wheel", "sdist"):
            raise HubError(400, f"unsupported filetype {filetype!r}")
        if filetype is not None and (filetype == "sdist") != (info.kind == "sdist"):
            raise HubError(400, f"filetype {filetype!r} does not match {filename!r}")
    except BaseException:
        hub.publishing.discard(staged)
        raise
    result = hub.publishing.publish(principal, None, None, staged)
    created = any(f["created"] for f in result.files)
    return PlainTextResponse(
        f"{'uploaded' if created else 'already present (identical)'}: {result.owner}/{result.name} {result.version}\n",
        status_code=200,
    )
