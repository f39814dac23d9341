"""Environments: claiming a name, visibility, stars, and the fields derived from the versions.

Moved here: ``check_public_name`` and ``refresh_env`` from ``hub.core.Hub``; the writes of
``hub.api.environments`` (``create_environment``, ``patch_environment``'s visibility change, ``_star``).
"""

from __future__ import annotations

import json

from packaging.utils import canonicalize_name
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hub import archives
from hub.auth import Principal
from hub.errors import Conflict, Forbidden, Invalid, NotFound
from hub.models import Environment, EnvTag, Owner, Star, utcnow
from hub.models import Version as VersionRow
from hub.names import read_names
from hub.queries import owner_by_name
from hub.services.uow import UnitOfWork
from hub.settings import Settings
from hub.versions import pick_latest


class EnvironmentService:
    def __init__(self, settings: Settings, uow: UnitOfWork) -> None:
        self.settings = settings
        self.uow = uow
        self.reserved = {canonicalize_name(n) for n in settings.reserved_names}
        self.allowed_public_names = {canonicalize_name(n) for n in settings.allowed_public_names}
        self.extra_public_names = read_names(settings.public_names_file) if settings.public_names_file else frozenset()

    def check_public_name(self, principal: Principal, name: str) -> None:
        """403 for a new environment named like a well-known public package, unless an admin claims it."""
        from hub.names import shadows_public_name

        if shadows_public_name(name, self.allowed_public_names, self.extra_public_names) and not principal.is_admin:
            raise Forbidden(
                f"the name {name!r} is a well-known package of the public index; an environment of that "
                "name would shadow it for installers that consult this hub. Choose another name, or ask "
                "a hub admin to claim it for you",
            )

    def refresh_env(self, s: Session, env: Environment) -> None:
        """Recompute latest version, description and tags from the versions, and the search index."""
        rows = s.execute(
            select(VersionRow.version, VersionRow.yanked, VersionRow.summary, VersionRow.tags).where(
                VersionRow.env_id == env.id
            )
        ).all()
        latest = pick_latest([(r[0], r[1]) for r in rows])
        env.latest_version = latest
        if latest is not None:
            row = next(r for r in rows if r[0] == latest)
            env.description = row[2] or ""
            tags = json.loads(row[3] or "[]")
        else:
            tags = []
        env.tags = " ".join(tags)
        env.updated_at = utcnow()
        s.execute(EnvTag.__table__.delete().where(EnvTag.env_id == env.id))
        for t in tags:
            s.add(EnvTag(env_id=env.id, tag=t))
        s.flush()
        from hub.search import update_search_index

        update_search_index(s, env)

    def create_environment(
        self, principal: Principal, owner_name: str, display_name: str, private: bool
    ) -> tuple[Environment, Owner]:
        """Claim a name before the first upload (e.g. to make it private from the start)."""
        name = canonicalize_name(display_name)
        if not name or not archives.is_valid_dist_name(display_name):
            raise Invalid(f"invalid environment name {display_name!r}")
        if name in self.reserved:
            raise Forbidden(f"the name {name!r} is reserved")
        with self.uow.write() as s:
            owner = owner_by_name(s, owner_name)
            if owner is None:
                raise NotFound(f"owner {owner_name!r} not found")
            if not principal.can_write(owner.id, None):
                raise Forbidden(f"you cannot create environments under {owner.name!r}")
            self.check_public_name(principal, name)
            if s.scalar(select(Environment.id).where(Environment.name == name)) is not None:
                raise Conflict(f"the name {name!r} is taken")
            env = Environment(
                owner_id=owner.id,
                name=name,
                display_name=display_name,
                private=private,
                description="",
                tags="",
            )
            s.add(env)
            try:
                s.flush()
            except IntegrityError:
                raise Conflict(f"the name {name!r} is taken") from None
            self.refresh_env(s, env)
            return env, owner

    def set_visibility(self, principal: Principal, env_id: int, private: bool | None) -> Environment:
        """``PATCH`` of an environment: its visibility, which only its owner changes (the user, an admin
        of the organisation, a hub admin); members with write access may send the same value."""
        with self.uow.write() as s:
            env = s.get(Environment, env_id)
            if env is None:  # removed since the caller's check
                raise NotFound("environment not found")
            if not principal.can_write(env.owner_id, env.id):
                raise Forbidden("you do not have write access to this environment")
            if private is not None and private != env.private:
                if not principal.can_manage_env(env.owner_id, env.id):
                    raise Forbidden(
                        "only the environment's owner (the user, or an admin of the organisation) may change "
                        "its visibility"
                    )
                env.private = private
            return env

    def set_star(self, principal: Principal, env_id: int, on: bool) -> int:
        """Star (``on``) or unstar an environment for the caller; its number of stars now."""
        with self.uow.write(cached=False) as s:  # no cached page shows stars
            env = s.get(Environment, env_id)
            if env is None:
                raise NotFound("environment not found")
            if not principal.within_restrictions(env.owner_id, env.id):
                raise Forbidden("this token is limited to another owner or environment")
            exists = s.scalar(
                select(Star.env_id).where(Star.env_id == env.id, Star.user_id == principal.user_id)
            )
            if on and exists is None:
                s.add(Star(env_id=env.id, user_id=principal.user_id))
                s.flush()
            elif not on and exists is not None:
                s.execute(delete(Star).where(Star.env_id == env.id, Star.user_id == principal.user_id))
            env.stars = int(
                s.scalar(select(func.count()).select_from(Star).where(Star.env_id == env.id)) or 0
            )
            return env.stars
