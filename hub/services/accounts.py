"""Accounts: users, tokens, organisations and their members, the bootstrap admin.

Moved here from ``hub.core.Hub`` (``bootstrap_admin``, ``create_user``, ``create_token``,
``create_org``) and from the routers (``hub.api.tokens.revoke_token``, ``hub.api.orgs.set_member`` and
``remove_member``). Every method is one
transaction of the unit of work; the ``add_*`` functions do their part inside a transaction the caller
holds.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hub.auth import ROLES, Principal, add_token, hash_token, new_token, revoke_tokens
from hub.errors import Conflict, Forbidden, NotFound, Unprocessable
from hub.models import Environment, Membership, Owner, Token, utcnow
from hub.owners import check_admin_token, normalise_owner
from hub.queries import ensure_admin_left, load_org, owner_by_name
from hub.services.uow import UnitOfWork


def add_user(session: Session, name: str, *, is_admin: bool = False) -> tuple[Owner, str]:
    """A new user and its first write token (returned once), in the caller's transaction."""
    n = normalise_owner(name)
    if session.scalar(select(Owner.id).where(Owner.name == n)) is not None:
        raise Conflict(f"the name {n!r} is taken")
    user = Owner(name=n, display_name=name, kind="user", is_admin=is_admin, description="")
    session.add(user)
    session.flush()
    secret, _tok = add_token(session, user, name="first token", scope="write")
    return user, secret


class AccountService:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    def bootstrap_admin(self, token: str) -> None:
        """Ensure user ``admin`` exists and holds ``token``, and that no earlier bootstrap token still
        works (idempotent; safe across workers)."""
        check_admin_token(token)
        h = hash_token(token)
        for _attempt in range(3):
            try:
                with self.uow.write() as s:  # the generation moves: cached principals of a revoked token go
                    admin = s.scalar(select(Owner).where(Owner.name == "admin"))
                    if admin is not None and (admin.kind != "user" or not admin.is_admin):
                        raise ValueError(
                            "the name 'admin' belongs to an organisation or a non-admin user; VF_HUB_ADMIN_TOKEN "
                            "cannot bootstrap it (rename that owner in the database first)"
                        )
                    if admin is None:
                        admin = Owner(
                            name="admin", display_name="admin", kind="user", is_admin=True, description=""
                        )
                        s.add(admin)
                        s.flush()
                    if s.scalar(select(Token.id).where(Token.token_hash == h)) is None:
                        s.add(
                            Token(
                                user_id=admin.id,
                                name="bootstrap",
                                token_hash=h,
                                prefix=token[:8],
                                scope="write",
                            )
                        )
                    # A changed VF_HUB_ADMIN_TOKEN replaces the old one.
                    revoke_tokens(s, Token.user_id == admin.id, Token.name == "bootstrap", Token.token_hash != h)
                return
            except IntegrityError:
                continue

    def create_user(self, name: str, *, is_admin: bool = False) -> tuple[Owner, str]:
        """A new user and its first write token (returned once)."""
        try:
            with self.uow.write(cached=False) as s:
                user, secret = add_user(s, name, is_admin=is_admin)
        except IntegrityError:  # a concurrent request took the name
            raise Conflict(f"the name {name!r} is taken") from None
        return user, secret

    def create_token(
        self,
        user_id: int,
        *,
        name: str = "",
        scope: str = "write",
        owner_restriction_id: int | None = None,
        env_restriction_id: int | None = None,
        expires_at: dt.datetime | None = None,
    ) -> tuple[str, Token]:
        with self.uow.write(cached=False) as s:
            user = s.get(Owner, user_id)
            if user is None:
                raise NotFound("user not found")
            return add_token(
                s,
                user,
                name=name,
                scope=scope,
                owner_restriction=s.get(Owner, owner_restriction_id) if owner_restriction_id else None,
                env_restriction=s.get(Environment, env_restriction_id) if env_restriction_id else None,
                expires_at=expires_at,
            )

    def revoke_token(self, principal: Principal, token_id: int) -> Token:
        """Revoke one of the caller's tokens (a token may revoke itself; a restricted one only itself)."""
        with self.uow.write() as s:  # workers drop their cached principal of this token
            tok = s.scalar(select(Token).where(Token.id == token_id, Token.user_id == principal.user_id))
            if tok is None:
                raise NotFound("token not found")
            if tok.id != principal.token_id and not principal.unrestricted_write:
                raise Forbidden("a restricted token may revoke only itself")
            # Its web sessions end with it (hub.auth.lookup_token); every worker drops it from its cache.
            revoke_tokens(s, Token.id == tok.id)
            s.refresh(tok)
            return tok

    def create_org(self, name: str, creator_id: int | None, description: str = "") -> Owner:
        """A new organisation; ``creator_id`` (if given) becomes its admin."""
        try:
            with self.uow.write() as s:  # the creator's cached principal lacks the new role
                n = normalise_owner(name)
                if s.scalar(select(Owner.id).where(Owner.name == n)) is not None:
                    raise Conflict(f"the name {n!r} is taken")
                org = Owner(name=n, display_name=name, kind="org", is_admin=False, description=description)
                s.add(org)
                s.flush()
                if creator_id is not None:
                    s.add(Membership(org_id=org.id, user_id=creator_id, role="admin"))
                    s.flush()
        except IntegrityError:
            raise Conflict(f"the name {name!r} is taken") from None
        return org

    def set_member(self, principal: Principal, org: str, user: str, role: str) -> tuple[Owner, Owner]:
        """Give ``user`` ``role`` in ``org`` (organisation admins); the org and the user."""
        if role not in ROLES:
            raise Unprocessable(f"role must be one of {ROLES}")
        with self.uow.write() as s:  # membership changes what the member's index pages list
            o = load_org(s, org)
            if not principal.can_manage_org(o.id):
                raise Forbidden("only an organisation admin may manage members")
            u = owner_by_name(s, user, "user")
            if u is None:
                raise NotFound(f"user {user!r} not found")
            m = s.get(Membership, (o.id, u.id))
            if m is None:
                s.add(Membership(org_id=o.id, user_id=u.id, role=role))
            else:
                m.role = role
            s.flush()
            ensure_admin_left(s, o.id)
            return o, u

    def remove_member(self, principal: Principal, org: str, user: str) -> tuple[Owner, Owner]:
        """Remove ``user`` from ``org`` (an organisation admin, or the member itself)."""
        with self.uow.write() as s:
            o = load_org(s, org)
            u = owner_by_name(s, user)
            if u is None:
                raise NotFound(f"user {user!r} not found")
            if not principal.can_manage_org(o.id) and u.id != principal.user_id:
                raise Forbidden("only an organisation admin may remove members")
            m = s.get(Membership, (o.id, u.id))
            if m is None:
                raise NotFound(f"{user!r} is not a member of {o.name!r}")
            s.delete(m)
            s.flush()
            ensure_admin_left(s, o.id)
            return o, u

    def start_session(self, principal: Principal, days: float) -> tuple[str, dt.datetime]:
        """A web session for the caller who signed in: a new read-scope token of the same user with the
        signing token's limits (owner/environment, and an expiry no later than the signer's, at most
        ``days``) and its life (``parent_id``: lookup_token refuses it once the signer is revoked or
        expired). Its secret (the cookie) and expiry are returned once. The caller refuses sessions and
        check-worker tokens first. (Moved from ``hub.web.signin``.)"""
        expires = utcnow() + dt.timedelta(days=days)
        if principal.expires_at is not None:
            expires = min(expires, principal.expires_at)
        secret = new_token()
        with self.uow.write(cached=False) as s:  # a new token takes no right away from anyone
            s.add(
                Token(
                    user_id=principal.user_id,
                    name="web session",
                    token_hash=hash_token(secret),
                    prefix=secret[:8],
                    scope="read",
                    owner_restriction_id=principal.owner_restriction,
                    env_restriction_id=principal.env_restriction,
                    expires_at=expires,
                    parent_id=principal.token_id,
                )
            )
        return secret, expires

    def end_session(self, session_secret: str) -> None:
        """Sign-out: the session's token is revoked on the server (moved from ``hub.web.signout``)."""
        with self.uow.write(cached=False) as s:  # revoke_tokens marks it cached when it revokes one
            revoke_tokens(s, Token.token_hash == hash_token(session_secret), Token.parent_id.is_not(None))
