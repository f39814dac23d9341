"""Environments: search, claim, detail, visibility, README, stars, downloads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from sqlalchemy import select

from hub import search
from hub.api.deps import (
    Addressed,
    CallerDep,
    EnvDep,
    HubDep,
    SessionDep,
    WriterDep,
    WriterEnvDep,
)
from hub.api.schemas import (
    CreateEnvIn,
    DownloadsOut,
    EnvDetail,
    EnvSummary,
    PatchEnvIn,
    ReadmeOut,
    SearchOut,
    StarOut,
)
from hub.auth import Principal
from hub.core import Hub
from hub.models import (
    Star,
    Version,
)
from hub.queries import (
    check_tags,
    env_summary,
    install_commands,
    resolve_version,
    sorted_versions,
)
from hub.render import render_readme

router = APIRouter()


@router.get("/environments", response_model=SearchOut, tags=["environments"])
def list_environments(
    request: Request, hub: HubDep, s: SessionDep, principal: CallerDep,
    q: Annotated[
        str, Query(max_length=200, description="Words matched (by prefix) in name, description, tags")
    ] = "",
    tag: Annotated[
        list[str] | None, Query(description="Only environments with every tag given (at most 10)")
    ] = None,
    owner: Annotated[str | None, Query(max_length=64)] = None,
    sort: Annotated[Literal["downloads", "stars", "updated", "name"], Query()] = "downloads",
    page: Annotated[int, Query(ge=1, le=100000)] = 1,
    per_page: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    tags = check_tags(hub, tag)
    total, rows = search.search_envs(s, principal, q=q, tags=tags, owner=owner, sort=sort, page=page, per_page=per_page)
    items = [env_summary(e, o) for e, o in rows]
    return {"total": total, "page": page, "per_page": per_page, "items": items}


@router.post("/environments", response_model=EnvSummary, status_code=201, tags=["environments"])
def create_environment(request: Request, hub: HubDep, principal: WriterDep, body: CreateEnvIn) -> dict[str, Any]:
    """Claim a name before the first upload (e.g. to make it private from the start)."""
    env, owner = hub.environments.create_environment(principal, body.owner, body.name, body.private)
    return env_summary(env, owner.name)


@router.get("/environments/{owner}/{name}", response_model=EnvDetail, tags=["environments"])
def get_environment(request: Request, hub: HubDep, s: SessionDep, principal: CallerDep, target: EnvDep) -> dict[str, Any]:
    env, own = target.env, target.owner
    out = env_summary(env, own.name)
    out["versions"] = [v.version for v in sorted_versions(s, env)]
    out["starred"] = bool(
        principal
        and s.scalar(select(Star.env_id).where(Star.env_id == env.id, Star.user_id == principal.user_id))
    )
    out["downloads_last_30_days"] = hub.downloads.downloads(s, env.id)["last_30_days"]
    latest = (
        s.scalar(select(Version).where(Version.env_id == env.id, Version.version == env.latest_version))
        if env.latest_version
        else None
    )
    cmds = install_commands(hub, request, s, principal, env, own, latest)
    out["install"] = " && ".join(cmds["pip"])
    out["install_commands"] = cmds
    out["distribution"] = env.name
    return out


@router.patch("/environments/{owner}/{name}", response_model=EnvSummary, tags=["environments"])
def patch_environment(request: Request, hub: HubDep, principal: WriterDep, target: WriterEnvDep, body: PatchEnvIn) -> dict[str, Any]:
    env = hub.environments.set_visibility(principal, target.env.id, body.private)
    return env_summary(env, target.owner.name)


@router.get("/environments/{owner}/{name}/readme", response_model=ReadmeOut, tags=["environments"])
def get_readme(request: Request, s: SessionDep, target: EnvDep, version: str = "latest") -> dict[str, Any]:
    """The README as sanitised HTML (and its source)."""
    ver = resolve_version(s, target.env, version)
    return {
        "version": ver.version,
        "content_type": ver.readme_content_type,
        "source": ver.readme or "",
        "html": render_readme(ver.readme, ver.readme_content_type),
    }


@router.put("/environments/{owner}/{name}/star", response_model=StarOut, tags=["stars"])
def star(hub: HubDep, principal: WriterDep, target: WriterEnvDep) -> dict[str, Any]:
    return _star(hub, principal, target, True)


@router.delete("/environments/{owner}/{name}/star", response_model=StarOut, tags=["stars"])
def unstar(hub: HubDep, principal: WriterDep, target: WriterEnvDep) -> dict[str, Any]:
    return _star(hub, principal, target, False)


def _star(hub: Hub, principal: Principal, target: Addressed, on: bool) -> dict[str, Any]:
    return {"starred": on, "stars": hub.environments.set_star(principal, target.env.id, on)}


@router.get("/environments/{owner}/{name}/downloads", response_model=DownloadsOut, tags=["environments"])
def downloads(hub: HubDep, s: SessionDep, target: EnvDep) -> dict[str, Any]:
    """Download counts (real file downloads): total, last 30 days, and per day."""
    return hub.downloads.downloads(s, target.env.id)
