"""API tokens."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from sqlalchemy import select

from hub.api.deps import AuthDep, HubDep, SessionDep, WriterDep
from hub.api.schemas import (
    TokenCreatedOut,
    TokenIn,
    TokenOut,
)
from hub.errors import HubError, not_found
from hub.models import (
    Token,
    utcnow,
)
from hub.queries import (
    load_env,
    owner_by_name,
    token_out,
)

router = APIRouter()


@router.post("/tokens", response_model=TokenCreatedOut, status_code=201, tags=["tokens"])
def create_token(request: Request, hub: HubDep, s: SessionDep, principal: WriterDep, body: TokenIn) -> dict[str, Any]:
    """A new token for the caller (the secret is in this answer only). Needs an unrestricted write token."""
    if not principal.unrestricted_write:
        raise HubError(403, "a restricted token cannot create tokens")
    owner_r = env_r = None
    if body.owner:
        owner_r = owner_by_name(s, body.owner)
        if owner_r is None or (owner_r.id not in principal.roles and not principal.is_admin):
            raise not_found(f"owner {body.owner!r} not found")
    if body.environment:
        from verifiers.ids import parse_env_id

        try:
            ref = parse_env_id(body.environment)
        except ValueError:
            ref = None
        if ref is None or not ref.owner or ref.version:
            raise HubError(422, "environment must be 'owner/name'")
        env_r, _own = load_env(s, principal, ref.owner, ref.name)
    expires = utcnow() + dt.timedelta(days=body.expires_in_days) if body.expires_in_days else None
    source = s.get(Token, principal.token_id) if principal.token_id is not None else None
    if source is not None and source.parent_id is None and source.expires_at is not None:
        # a token made with an expiring API token never outlives it (a signed-in session's tokens
        # are the user's own, made to last)
        expires = source.expires_at if expires is None else min(expires, source.expires_at)
    secret, tok = hub.accounts.create_token(
        principal.user_id,
        name=body.name,
        scope=body.scope,
        owner_restriction_id=owner_r.id if owner_r else None,
        env_restriction_id=env_r.id if env_r else None,
        expires_at=expires,
    )
    out = token_out(tok, s)
    out["token"] = secret
    return out


@router.get("/tokens", response_model=list[TokenOut], tags=["tokens"])
def list_tokens(request: Request, s: SessionDep, principal: AuthDep) -> list[dict[str, Any]]:
    """Your tokens (never their secrets). Needs an unrestricted write token, like creating one."""
    if not principal.unrestricted_write:
        raise HubError(403, "listing tokens needs an unrestricted write token")
    toks = s.scalars(select(Token).where(Token.user_id == principal.user_id).order_by(Token.id)).all()
    return [token_out(t, s) for t in toks]


@router.delete("/tokens/{token_id}", response_model=TokenOut, tags=["tokens"])
def revoke_token(request: Request, hub: HubDep, s: SessionDep, principal: WriterDep, token_id: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> dict[str, Any]:
    """Revoke one of your tokens (a token may revoke itself)."""
    return token_out(hub.accounts.revoke_token(principal, token_id), s)
