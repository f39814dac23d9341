"""The PyPI legacy upload API (``POST /legacy/``) spoken by ``twine upload`` and ``uv publish``.

Each request carries one file (``content``) plus form fields (``:action=file_upload``, ``name``,
``version``, ``sha256_digest``, metadata). The token is the Basic-auth password. The owner is the
token's user, or the owner an owner- or environment-limited token names; for an existing environment
it is that environment's owner.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import PlainTextResponse
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from hub.core import HubError
from hub.http import hub_of, require_principal

router = APIRouter()


@router.post(
    "/legacy/", tags=["upload"], response_class=PlainTextResponse, summary="twine / uv publish uploads"
)
def legacy_upload(
    request: Request,
    content: Annotated[UploadFile, File(description="The distribution file")],
    action: Annotated[str, Form(alias=":action")] = "file_upload",
    name: Annotated[str | None, Form(max_length=200)] = None,
    version: Annotated[str | None, Form(max_length=100)] = None,
    sha256_digest: Annotated[str | None, Form(max_length=64)] = None,
    filetype: Annotated[str | None, Form(max_length=32)] = None,
) -> PlainTextResponse:
    hub = hub_of(request)
    principal = require_principal(request, write=True)
    if action != "file_upload":
        raise HubError(400, f"unsupported :action {action!r}")
    filename = content.filename or ""
    staged = [hub.stage(content.file, filename, expected_sha256=sha256_digest or None)]
    try:
        hub.validate(staged)
    except BaseException:
        hub.discard(staged)
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
            except InvalidVersion:
                raise HubError(400, f"invalid version {version!r}") from None
        if filetype is not None and filetype not in ("bdist_wheel", "sdist"):
            raise HubError(400, f"unsupported filetype {filetype!r}")
        if filetype is not None and (filetype == "sdist") != (info.kind == "sdist"):
            raise HubError(400, f"filetype {filetype!r} does not match {filename!r}")
    except BaseException:
        hub.discard(staged)
        raise
    result = hub.publish(principal, None, None, staged)
    created = any(f["created"] for f in result.files)
    return PlainTextResponse(
        f"{'uploaded' if created else 'already present (identical)'}: {result.owner}/{result.name} {result.version}\n",
        status_code=200,
    )
