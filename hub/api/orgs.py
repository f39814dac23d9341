"""Organisations and their members."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from hub.api.deps import CallerDep, HubDep, WriterDep
from hub.api.schemas import (
    MemberIn,
    MembershipOut,
    OrgIn,
    OrgOut,
)
from hub.auth import ROLES
from hub.db import bump_generation
from hub.errors import HubError, not_found
from hub.models import (
    Membership,
    Owner,
)
from hub.queries import (
    ensure_admin_left,
    load_org,
    owner_by_name,
)

router = APIRouter()


@router.post("/orgs", response_model=OrgOut, status_code=201, tags=["orgs"])
def create_org(request: Request, hub: HubDep, principal: WriterDep, body: OrgIn) -> dict[str, Any]:
    """A new organisation; the caller becomes its admin."""
    if not principal.unrestricted_write:
        raise HubError(403, "a restricted token cannot create organisations")
    with hub.db.session() as s:
        creator = s.get(Owner, principal.user_id)
        try:
            org = hub.create_org(s, body.name, creator, body.description)
            s.flush()
        except IntegrityError:
            raise HubError(409, f"the name {body.name!r} is taken") from None
        return {"name": org.name, "kind": "org", "members": [{"user": principal.user_name, "role": "admin"}]}


@router.get("/orgs/{org}", response_model=OrgOut, response_model_exclude_none=True, tags=["orgs"])
def get_org(request: Request, hub: HubDep, principal: CallerDep, org: str) -> dict[str, Any]:
    """An organisation; its member list is shown to its members only."""
    with hub.db.session() as s:
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
    if body.role not in ROLES:
        raise HubError(422, f"role must be one of {ROLES}")
    with hub.db.session() as s:
        o = load_org(s, org)
        if not principal.can_manage_org(o.id):
            raise HubError(403, "only an organisation admin may manage members")
        u = owner_by_name(s, user, "user")
        if u is None:
            raise not_found(f"user {user!r} not found")
        m = s.get(Membership, (o.id, u.id))
        if m is None:
            s.add(Membership(org_id=o.id, user_id=u.id, role=body.role))
        else:
            m.role = body.role
        s.flush()
        ensure_admin_left(s, o.id)
        bump_generation(s)  # membership changes what the member's index pages list
        out = {"org": o.name, "user": u.name, "role": body.role}
    hub.index_cache.invalidate()
    return out


@router.delete("/orgs/{org}/members/{user}", response_model=MembershipOut, response_model_exclude_none=True, tags=["orgs"])
def remove_member(request: Request, hub: HubDep, principal: WriterDep, org: str, user: str) -> dict[str, Any]:
    with hub.db.session() as s:
        o = load_org(s, org)
        u = owner_by_name(s, user)
        if u is None:
            raise not_found(f"user {user!r} not found")
        if not principal.can_manage_org(o.id) and u.id != principal.user_id:
            raise HubError(403, "only an organisation admin may remove members")
        m = s.get(Membership, (o.id, u.id))
        if m is None:
            raise not_found(f"{user!r} is not a member of {o.name!r}")
        s.delete(m)
        s.flush()
        ensure_admin_left(s, o.id)
        bump_generation(s)
        out = {"org": o.name, "user": u.name, "removed": True}
    hub.index_cache.invalidate()
    return out
