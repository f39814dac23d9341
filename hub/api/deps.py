"""Access checks and request plumbing shared by the API routers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from hub.auth import Principal
from hub.core import Hub
from hub.errors import HubError, not_found
from hub.http import hub_of, principal_of, require_principal
from hub.models import (
    Environment,
    Owner,
)
from hub.queries import load_env


def require_write(principal: Principal, env: Environment) -> None:
    if not principal.can_write(env.owner_id, env.id):
        raise HubError(403, "you do not have write access to this environment")


def require_acts_on(principal: Principal, env: Environment) -> None:
    """A token limited to one owner or environment acts on that one only, even where reading is open."""
    if not principal.within_restrictions(env.owner_id, env.id):
        raise HubError(403, "this token is limited to another owner or environment")


async def read_upload_form(request: Request, max_files: int) -> Any:
    """The multipart body, bounded in parts (its bytes are bounded by the request-size middleware)."""
    try:
        return await request.form(max_files=max_files, max_fields=20)
    except StarletteHTTPException as exc:
        raise HubError(exc.status_code, f"invalid upload: {exc.detail} (at most {max_files} files)") from None


def form_bool(value: Any, field: str) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
        return False
    raise HubError(422, f"{field} must be true or false")


def caller(request: Request) -> Principal | None:
    """The caller (None if anonymous; 401 for a wrong token)."""
    return principal_of(request)


def authenticated(request: Request) -> Principal:
    return require_principal(request)


def writer(request: Request) -> Principal:
    """A caller with a write-scope token, within the write rate limit."""
    return require_principal(request, write=True)


def read_session(hub: Annotated[Hub, Depends(hub_of)]) -> Iterator[Session]:
    """The request's session for reading. It is never committed (rolled back at the end), so nothing
    a handler does through it can write: writes are the services' (``hub.services``), each its own
    transaction of the unit of work."""
    s = hub.db.sessionmaker()
    try:
        yield s
    finally:
        s.rollback()
        s.close()


# Annotated dependencies the routers declare instead of repeating the same opening lines.
HubDep = Annotated[Hub, Depends(hub_of)]
SessionDep = Annotated[Session, Depends(read_session)]
CallerDep = Annotated[Principal | None, Depends(caller)]
AuthDep = Annotated[Principal, Depends(authenticated)]
WriterDep = Annotated[Principal, Depends(writer)]


@dataclass(frozen=True)
class Addressed:
    """The environment a route's ``{owner}/{name}`` addresses, visible to ``principal`` (checked once,
    in :func:`addressed_env`). ``env`` and ``owner`` are read in their own short session; a handler
    that changes the environment takes it into its session with :meth:`env_in`."""

    env: Environment
    owner: Owner
    principal: Principal | None

    def env_in(self, s: Session) -> Environment:
        env = s.get(Environment, self.env.id)
        if env is None:  # removed since the check
            raise not_found(f"environment {self.owner.name}/{self.env.name} not found")
        return env


def _address(hub: Hub, principal: Principal | None, owner: str, name: str) -> Addressed:
    with hub.db.session() as s:
        env, own = load_env(s, principal, owner, name)  # 404 for absent and invisible alike
    return Addressed(env, own, principal)


def addressed_env(hub: HubDep, principal: CallerDep, owner: str, name: str) -> Addressed:
    """The addressed environment for any caller (anonymous included)."""
    return _address(hub, principal, owner, name)


def addressed_env_for_writer(hub: HubDep, principal: WriterDep, owner: str, name: str) -> Addressed:
    """The addressed environment for a caller with a write-scope token (rate-limited); what it may do
    there (write, or only act on it: star, post an eval) the route checks."""
    return _address(hub, principal, owner, name)


EnvDep = Annotated[Addressed, Depends(addressed_env)]
WriterEnvDep = Annotated[Addressed, Depends(addressed_env_for_writer)]
