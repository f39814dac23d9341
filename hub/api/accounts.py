"""Accounts: whoami, users (admin), owners."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import select

from hub import search
from hub.api.deps import AuthDep, CallerDep, HubDep, SessionDep, WriterDep
from hub.api.schemas import (
    OwnerOut,
    UserCreatedOut,
    UserIn,
    WhoamiOut,
)
from hub.errors import HubError, not_found
from hub.models import (
    Membership,
    Owner,
)
from hub.queries import (
    env_summary,
    owner_by_name,
    ts,
)

router = APIRouter()


@router.get("/whoami", response_model=WhoamiOut, tags=["accounts"])
def whoami(request: Request, s: SessionDep, principal: AuthDep) -> dict[str, Any]:
    orgs = s.execute(
        select(Owner.name, Membership.role)
        .join(Membership, Membership.org_id == Owner.id)
        .where(Membership.user_id == principal.user_id)
    ).all()
    return {
        "name": principal.user_name,
        "admin": principal.is_admin,
        "scope": principal.scope,
        "orgs": [{"name": n, "role": r} for n, r in orgs],
    }


@router.post("/users", response_model=UserCreatedOut, status_code=201, tags=["accounts"])
def create_user(request: Request, hub: HubDep, principal: WriterDep, body: UserIn) -> dict[str, Any]:
    """Admins create users; the answer holds the user's first token (shown once)."""
    if not principal.is_admin or not principal.unrestricted_write:
        raise HubError(403, "only an admin may create users")
    user, secret = hub.accounts.create_user(body.name, is_admin=body.admin)
    return {"name": user.name, "admin": user.is_admin, "token": secret}


@router.get("/owners/{owner}", response_model=OwnerOut, tags=["accounts"])
def get_owner(request: Request, s: SessionDep, principal: CallerDep, owner: str) -> dict[str, Any]:
    """A user or an organisation and the environments of theirs the caller can see."""
    own = owner_by_name(s, owner)
    if own is None:
        raise not_found(f"owner {owner!r} not found")
    _total, rows = search.search_envs(s, principal, owner=own.name, sort="name", per_page=100)
    return {
        "name": own.name,
        "display_name": own.display_name,
        "kind": own.kind,
        "description": own.description,
        "created_at": ts(own.created_at),
        "environments": [env_summary(e, o) for e, o in rows],
    }
