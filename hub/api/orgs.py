"""Organisations and their members."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import select

from hub.api.deps import CallerDep, HubDep, SessionDep, WriterDep
from hub.api.schemas import (
    MemberIn,
    MembershipOut,
    OrgIn,
    OrgOut,
)
from hub.errors import HubError
from hub.models import (
    Membership,
    Owner,
)
from hub.queries import (
    load_org,
)

router = APIRouter()


@router.post("/orgs", response_model=OrgOut, status_code=201, tags=["orgs"])
def create_org(request: Request, hub: HubDep, principal: WriterDep, body: OrgIn) -> dict[str, Any]:
    """A new organisation; the caller becomes its admin."""
    if not principal.unrestricted_write:
        raise HubError(403, "a restricted token cannot create organisations")
    org = hub.accounts.create_org(body.name, principal.user_id, body.description)
    return {"name": org.name, "kind": "org", "members": [{"user": principal.user_name, "role": "admin"}]}


@router.get("/orgs/{org}", response_model=OrgOut, response_model_exclude_none=True, tags=["orgs"])
def get_org(request: Request, s: SessionDep, principal: CallerDep, org: str) -> dict[str, Any]:
    """An organisation; its member list is shown to its members only."""
    o = load_org(s, org)
    out: dict[str, Any] = {"name": o.name, "kind": "org", "description": o.description}
    if (
        principal is not None
        and (principal.is_admin or o.id in principal.roles)
        and principal.within_restrictions(o.id, None)  # a limited token sees only what it may act on
    ):
        rows = s.execute(
            select(Owner.name, Membership.role)
            .join(Membership, Membership.user_id == Owner.id)
            .where(Membership.org_id == o.id)
            .order_by(Owner.name)
        ).all()
        out["members"] = [{"user": n, "role": r} for n, r in rows]
    return out


@router.put("/orgs/{org}/members/{user}", response_model=MembershipOut, response_model_exclude_none=True, tags=["orgs"])
def set_member(request: Request, hub: HubDep, principal: WriterDep, org: str, user: str, body: MemberIn) -> dict[str, Any]:
    o, u = hub.accounts.set_member(principal, org, user, body.role)
    return {"org": o.name, "user": u.name, "role": body.role}


@router.delete("/orgs/{org}/members/{user}", response_model=MembershipOut, response_model_exclude_none=True, tags=["orgs"])
def remove_member(request: Request, hub: HubDep, principal: WriterDep, org: str, user: str) -> dict[str, Any]:
    o, u = hub.accounts.remove_member(principal, org, user)
    return {"org": o.name, "user": u.name, "removed": True}
