"""API tokens, principals and access rules.

Tokens are ``vfh_`` + 43 url-safe random characters (256 bits). Only their sha256 is stored, so a leaked
database does not leak credentials; because the secret has full entropy, an unsalted fast hash is
enough, and the lookup is by hash with a constant-time comparison of the stored value.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import text, update
from sqlalchemy.orm import Session

from hub.db import bump_generation
from hub.errors import Unprocessable
from hub.models import Token, utcnow

if TYPE_CHECKING:
    from hub.models import Environment, Owner

TOKEN_PREFIX = "vfh_"
ROLES = ("admin", "write", "read")
WRITE_ROLES = ("self", "admin", "write")


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass
class Principal:
    """Who is calling and what their token allows."""

    user_id: int
    user_name: str
    is_admin: bool
    token_id: int | None
    scope: str  # "read" | "write"
    owner_restriction: int | None = None
    env_restriction: int | None = None
    roles: dict[int, str] = field(default_factory=dict)  # owner id -> "self" | org role
    expires_at: dt.datetime | None = None  # the earlier of the token's and (a session's) its signer's
    session: bool = False  # a web session (``/signin``): serves pages, never the API or the index

    def within_restrictions(self, owner_id: int, env_id: int | None) -> bool:
        """Whether this token's owner/environment limits allow acting on ``env_id`` of ``owner_id``."""
        return self._restricted_ok(owner_id, env_id)

    def _restricted_ok(self, owner_id: int, env_id: int | None) -> bool:
        if self.owner_restriction is not None and owner_id != self.owner_restriction:
            return False
        return not (self.env_restriction is not None and env_id != self.env_restriction)

    def can_read(self, owner_id: int, env_id: int, private: bool) -> bool:
        if not private:
            return True
        if not self._restricted_ok(owner_id, env_id):
            return False
        return self.is_admin or owner_id in self.roles

    def can_write(self, owner_id: int, env_id: int | None) -> bool:
        """``env_id`` None means creating a new environment under ``owner_id``."""
        if self.scope != "write" or not self._restricted_ok(owner_id, env_id):
            return False
        return self.is_admin or self.roles.get(owner_id) in WRITE_ROLES

    def can_manage_env(self, owner_id: int, env_id: int) -> bool:
        """Owner-level changes (visibility): the owning user, an admin of the owning org, a hub admin."""
        if self.scope != "write" or not self._restricted_ok(owner_id, env_id):
            return False
        return self.is_admin or self.roles.get(owner_id) in ("self", "admin")

    def can_manage_org(self, org_id: int) -> bool:
        if self.scope != "write" or self.owner_restriction is not None or self.env_restriction is not None:
            return False
        return self.is_admin or self.roles.get(org_id) == "admin"

    @property
    def unrestricted_write(self) -> bool:
        return self.scope == "write" and self.owner_restriction is None and self.env_restriction is None

    def visibility_key(self) -> str:
        """Cache key for pages whose content depends on what the caller can see."""
        return f"u{self.user_id}:{self.owner_restriction}:{self.env_restriction}:{int(self.is_admin)}"


def parse_authorization(header: str | None) -> str | None:
    """The token in ``Bearer TOKEN`` or HTTP Basic (token as password, any username)."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "bearer" and value:
        return value
    if scheme == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ""
        user, sep, password = decoded.partition(":")
        if not sep:
            return ""
        # pip/uv send the token as the password; accept a token given as username too (``token@host``).
        return password or user
    return ""


class TokenUseTracker:
    """Writes ``last_used_at`` at most once a minute per token, so reads stay read-only."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._seen: dict[int, float] = {}
        self._lock = threading.Lock()

    def is_due(self, token_id: int) -> bool:
        """Whether the next ``due`` would be True (records nothing)."""
        with self._lock:
            last = self._seen.get(token_id)
        return last is None or time.monotonic() - last >= self.interval

    def due(self, token_id: int) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(token_id)
            if last is not None and now - last < self.interval:
                return False
            self._seen[token_id] = now
            return True


def lookup_token(session: Session, token: str, tracker: TokenUseTracker | None = None) -> Principal | None:
    """The principal holding ``token``, or None if it is unknown, revoked or expired.

    A web session (a token with a parent: the token it was signed in with) is valid only while its
    parent is: revoking or expiring the parent ends it, and its expiry is the earlier of the two."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    row = session.execute(
        text(
            "SELECT t.id, t.token_hash, t.scope, t.owner_restriction_id, t.env_restriction_id, t.expires_at,"
            " t.revoked_at, o.id, o.name, o.is_admin, t.parent_id, p.id, p.revoked_at, p.expires_at"
            " FROM tokens t JOIN owners o ON o.id = t.user_id LEFT JOIN tokens p ON p.id = t.parent_id"
            " WHERE t.token_hash = :h"
        ),
        {"h": digest},
    ).first()
    if row is None or not hmac.compare_digest(row[1], digest):
        return None
    expiries = [e for e in (_as_dt(row[5]), _as_dt(row[13])) if e is not None]
    expires_at = min(expiries) if expiries else None
    is_session = row[10] is not None
    if row[6] is not None or (expires_at is not None and expires_at <= utcnow()):
        return None
    if is_session and (row[11] is None or row[12] is not None):
        return None
    roles: dict[int, str] = {row[7]: "self"}
    for org_id, role in session.execute(
        text("SELECT org_id, role FROM memberships WHERE user_id = :u"), {"u": row[7]}
    ):
        roles[org_id] = role
    if tracker is not None and tracker.due(row[0]):
        touch_token(session, row[0])
    return Principal(
        user_id=row[7],
        user_name=row[8],
        is_admin=bool(row[9]),
        token_id=row[0],
        scope=row[2],
        owner_restriction=row[3],
        env_restriction=row[4],
        roles=roles,
        expires_at=expires_at,
        session=is_session,
    )


def add_token(
    session: Session,
    user: Owner,
    *,
    name: str = "",
    scope: str = "write",
    owner_restriction: Owner | None = None,
    env_restriction: Environment | None = None,
    expires_at: dt.datetime | None = None,
) -> tuple[str, Token]:
    """A new token of ``user`` (the secret is returned once; only its hash is stored), in the caller's
    transaction (``hub.services.accounts`` and the check-worker accounts of ``hub.checks`` make tokens
    with it)."""
    if scope not in ("read", "write", "worker"):
        raise Unprocessable("scope must be 'read', 'write' or 'worker' (check workers only)")
    secret = new_token()
    tok = Token(
        user_id=user.id,
        name=name,
        token_hash=hash_token(secret),
        prefix=secret[:8],
        scope=scope,
        owner_restriction_id=owner_restriction.id if owner_restriction else None,
        env_restriction_id=env_restriction.id if env_restriction else None,
        expires_at=expires_at,
    )
    session.add(tok)
    session.flush()
    return secret, tok


def revoke_tokens(session: Session, *where: Any) -> int:
    """Revoke the unrevoked tokens matching ``where`` (SQLAlchemy conditions on ``Token``), in the
    caller's transaction, and bump the generation with it: every worker's principal cache (and its
    cached index pages) drops them at its next request. Every revocation goes through here. Inside a
    unit of work (``hub.services.uow``) the bump is the unit's own, at its commit, with this worker's
    caches dropped after it, even in a write begun as ``cached=False``. Returns how many were revoked."""
    res = session.execute(
        update(Token).where(Token.revoked_at.is_(None), *where).values(revoked_at=utcnow())
    )
    if res.rowcount:
        if "vf_cached" in session.info:
            session.info["vf_cached"] = True
        else:
            bump_generation(session)
    return int(res.rowcount or 0)


def touch_token(session: Session, token_id: int) -> None:
    """Record a use of the token (callers rate this to once a minute per token)."""
    session.execute(text("UPDATE tokens SET last_used_at = :n WHERE id = :i"), {"n": utcnow(), "i": token_id})
    session.commit()


def _as_dt(v: object) -> dt.datetime | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None)
    return dt.datetime.fromisoformat(str(v))


class PrincipalCache:
    """Principals by token hash, valid for one database generation.

    Every change that can take a right away (revocation, membership, a new organisation) bumps the
    generation in the same transaction, and each request reads the generation, so a cached principal
    never outlives a revocation; expiry is checked on every hit. Failed lookups are never cached."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._data: dict[str, tuple[int, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str, generation: int) -> Principal | None:
        with self._lock:
            hit = self._data.get(token_hash)
        if hit is None or hit[0] != generation:
            return None
        principal = hit[1]
        if principal.expires_at is not None and principal.expires_at <= utcnow():
            return None
        return principal

    def put(self, token_hash: str, generation: int, principal: Principal) -> None:
        with self._lock:
            if len(self._data) >= self.max_entries:
                self._data.clear()
            self._data[token_hash] = (generation, principal)


class TokenBucket:
    """Per-key token buckets in process memory (each worker limits on its own; they share nothing)."""

    def __init__(self, burst: int, per_minute: float, max_keys: int = 100_000) -> None:
        self.burst = float(burst)
        self.rate = per_minute / 60.0
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, key: str, now: float) -> float:
        level, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, level + (now - last) * self.rate)

    def allowed(self, key: str) -> bool:
        """True if ``key`` has at least one token left (does not consume)."""
        with self._lock:
            return self._level(key, time.monotonic()) >= 1.0

    def consume(self, key: str) -> bool:
        """Take one token; False (and nothing taken) when the bucket is empty."""
        now = time.monotonic()
        with self._lock:
            level = self._level(key, now)
            if level < 1.0:
                self._buckets[key] = (level, now)
                return False
            if len(self._buckets) >= self.max_keys and key not in self._buckets:
                self._buckets.clear()
            self._buckets[key] = (level - 1.0, now)
            return True

    def retry_after(self) -> int:
        return max(1, int(1.0 / self.rate) if self.rate > 0 else 60)
