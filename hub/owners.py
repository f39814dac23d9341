"""Owner names (users and organisations share one namespace): their grammar, the names nobody may
register, and the shape of the bootstrap admin token. A leaf: used by the services, the CLI and the
tests, it imports nothing of the hub but its errors."""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name

from hub.errors import Invalid

OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?\Z")
# Owner names nobody may register: every top-level route name of the hub (a test checks the routes
# against this set), ``admin`` (the bootstrap user), and a few that would confuse readers.
RESERVED_OWNERS = {
    "admin", "api", "simple", "files", "legacy", "static", "docs", "redoc", "openapi.json", "healthz",
    "signin", "signout", "search", "tags", "new", "settings", "admin-panel", "favicon.ico", "robots.txt",
    "root", "hub", "login", "logout", "users", "orgs", "owners", "tokens", "environments",
}  # fmt: skip
# The accounts the hub itself creates and relies on (the bootstrap admin, the embedded check worker's
# account): reserved like the route names, so no registration can take one first (a user or an org
# named ``check-worker`` would get, or block, the embedded worker's token). A test checks that every
# account name the hub's code creates is in this set.
SYSTEM_ACCOUNTS = {"admin", "check-worker"}
RESERVED_OWNERS |= SYSTEM_ACCOUNTS | {"system", "hub-admin", "worker", "check-workers", "checks", "check-jobs"}
_RESERVED_NORMALISED = frozenset(canonicalize_name(n) for n in RESERVED_OWNERS)
ADMIN_TOKEN_RE = re.compile(r"^vfh_[A-Za-z0-9_-]{32,196}\Z")


def check_admin_token(token: str) -> None:
    """ValueError with one clear line unless ``token`` has the shape of a hub token."""
    if not ADMIN_TOKEN_RE.match(token):
        raise ValueError(
            "VF_HUB_ADMIN_TOKEN must be 'vfh_' followed by 32 to 196 URL-safe characters, e.g. "
            "vfh_$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def normalise_owner(name: str) -> str:
    if not OWNER_RE.match(name or ""):
        raise Invalid(f"invalid name {name!r}: letters, digits, '.', '_', '-' (1-64 characters)")
    n = canonicalize_name(name)
    # compared normalised both sides: ``robots.txt`` normalises to ``robots-txt``, which must not
    # slip past the reserved ``robots.txt`` (its owner page would be served at /robots.txt)
    if n in RESERVED_OWNERS or n in _RESERVED_NORMALISED:
        raise Invalid(f"the name {name!r} is reserved")
    return n
