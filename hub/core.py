"""The hub's state (settings, database, storage, caches, limiters) and its write operations.

Publishing order, for atomicity: the upload is streamed to a temp file and validated; the blob is written
to storage under its content-addressed key; then one database transaction inserts the version and file
rows. A crash before the commit leaves at most an unreferenced blob (never visible, removed by
``gc_orphans``); a failed commit deletes the blobs it wrote unless another row references them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import logging
import os
import re
import secrets
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import Version
from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hub import archives
from hub.archives import ArchiveError, ArchiveInfo, Limits
from hub.auth import Principal, PrincipalCache, TokenBucket, TokenUseTracker, hash_token, new_token
from hub.db import Database, bump_generation, run_migrations
from hub.errors import HubError, not_found
from hub.http import GenerationReader
from hub.index import IndexCache
from hub.models import (
    DailyDownloads,
    Environment,
    EnvTag,
    File,
    Membership,
    Owner,
    Token,
    utcnow,
)
from hub.models import (
    Version as VersionRow,
)
from hub.settings import Settings
from hub.source import SourceCache
from hub.storage import Storage, blob_key, make_storage
from hub.versions import MAX_VERSION_CHARS, canonical_version, pick_latest

log = logging.getLogger("hub")

OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$")
# Owner names nobody may register: every top-level route name of the hub (a test checks the routes
# against this set), ``admin`` (the bootstrap user), and a few that would confuse readers.
RESERVED_OWNERS = {
    "admin", "api", "simple", "files", "legacy", "static", "docs", "redoc", "openapi.json", "healthz",
    "signin", "signout", "search", "tags", "new", "settings", "admin-panel", "favicon.ico", "robots.txt",
    "root", "hub", "login", "logout", "users", "orgs", "owners", "tokens", "environments",
}  # fmt: skip
ADMIN_TOKEN_RE = re.compile(r"^vfh_[A-Za-z0-9_-]{32,196}$")


def check_admin_token(token: str) -> None:
    """ValueError with one clear line unless ``token`` has the shape of a hub token."""
    if not ADMIN_TOKEN_RE.match(token):
        raise ValueError(
            "VF_HUB_ADMIN_TOKEN must be 'vfh_' followed by 32 to 196 URL-safe characters, e.g. "
            "vfh_$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def normalise_owner(name: str) -> str:
    if not OWNER_RE.match(name or ""):
        raise HubError(400, f"invalid name {name!r}: letters, digits, '.', '_', '-' (1-64 characters)")
    n = canonicalize_name(name)
    if n in RESERVED_OWNERS:
        raise HubError(400, f"the name {name!r} is reserved")
    return n


@dataclass
class StagedUpload:
    """An upload streamed to a temp file, hashed, and (after validation) described by ``info``."""

    path: Path
    filename: str
    size: int
    sha256: str
    info: ArchiveInfo | None = None

    def open(self) -> IO[bytes]:
        return open(self.path, "rb")


@dataclass
class PublishResult:
    owner: str
    name: str
    version: str
    created_version: bool
    files: list[dict[str, Any]]


class Hub:
    """Everything a request handler needs; one per application."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.db = Database(settings.resolved_database_url, settings.db_statement_timeout_ms)
        if settings.migrate_on_start:
            run_migrations(self.db.engine)
        self.storage: Storage = make_storage(settings)
        self.tmp_dir = (settings.data_dir / "tmp").resolve()
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.limits = Limits(
            max_file_bytes=settings.max_file_bytes,
            max_uncompressed_bytes=settings.max_uncompressed_bytes,
            max_member_bytes=settings.max_member_bytes,
            max_compression_ratio=settings.max_compression_ratio,
            ratio_check_min_bytes=settings.ratio_check_min_bytes,
            max_members=settings.max_archive_members,
        )
        self.auth_failures = TokenBucket(settings.auth_fail_burst, settings.auth_fail_per_minute)
        self.writes = TokenBucket(settings.write_burst, settings.write_per_minute)
        self.token_tracker = TokenUseTracker()
        self.principals = PrincipalCache()
        self._uploads = 0
        self._uploads_lock = threading.Lock()
        self.index_cache = IndexCache(self, settings.index_cache_entries, settings.index_cache_max_bytes)
        self.generations = GenerationReader(self.db.generation)  # the async index handlers' reads
        self.source_cache = SourceCache(settings.source_cache_bytes)
        self.reserved = {canonicalize_name(n) for n in settings.reserved_names}
        self.allowed_public_names = {canonicalize_name(n) for n in settings.allowed_public_names}
        if settings.admin_token:
            self.bootstrap_admin(settings.admin_token.get_secret_value())

    def close(self) -> None:
        self.generations.close()
        self.db.dispose()

    # ---------------------------------------------------------------- accounts
    def bootstrap_admin(self, token: str) -> None:
        """Ensure user ``admin`` exists and holds ``token``, and that no earlier bootstrap token still
        works (idempotent; safe across workers)."""
        check_admin_token(token)
        h = hash_token(token)
        for _attempt in range(3):
            try:
                with self.db.session() as s:
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
                    s.execute(
                        update(Token)
                        .where(
                            Token.user_id == admin.id,
                            Token.name == "bootstrap",
                            Token.token_hash != h,
                            Token.revoked_at.is_(None),
                        )
                        .values(revoked_at=utcnow())
                    )
                    bump_generation(s)  # cached principals of a revoked token must go
                return
            except IntegrityError:
                continue

    def create_user(self, session: Session, name: str, *, is_admin: bool = False) -> tuple[Owner, str]:
        """A new user and its first write token (returned once)."""
        n = normalise_owner(name)
        if session.scalar(select(Owner.id).where(Owner.name == n)) is not None:
            raise HubError(409, f"the name {n!r} is taken")
        user = Owner(name=n, display_name=name, kind="user", is_admin=is_admin, description="")
        session.add(user)
        session.flush()
        secret, _tok = self.create_token(session, user, name="first token", scope="write")
        return user, secret

    def create_token(
        self,
        session: Session,
        user: Owner,
        *,
        name: str = "",
        scope: str = "write",
        owner_restriction: Owner | None = None,
        env_restriction: Environment | None = None,
        expires_at: dt.datetime | None = None,
    ) -> tuple[str, Token]:
        if scope not in ("read", "write", "worker"):
            raise HubError(400, "scope must be 'read', 'write' or 'worker' (check workers only)")
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

    def create_org(self, session: Session, name: str, creator: Owner | None, description: str = "") -> Owner:
        n = normalise_owner(name)
        if session.scalar(select(Owner.id).where(Owner.name == n)) is not None:
            raise HubError(409, f"the name {n!r} is taken")
        org = Owner(name=n, display_name=name, kind="org", is_admin=False, description=description)
        session.add(org)
        session.flush()
        if creator is not None:
            session.add(Membership(org_id=org.id, user_id=creator.id, role="admin"))
            bump_generation(session)  # the creator's cached principal lacks the new role
        return org

    def check_public_name(self, principal: Principal, name: str) -> None:
        """403 for a new environment named like a well-known public package, unless an admin claims it."""
        from hub.names import shadows_public_name

        if shadows_public_name(name, self.allowed_public_names) and not principal.is_admin:
            raise HubError(
                403,
                f"the name {name!r} is a well-known package of the public index; an environment of that "
                "name would shadow it for installers that consult this hub. Choose another name, or ask "
                "a hub admin to claim it for you",
            )

    @contextlib.contextmanager
    def upload_slot(self) -> Iterator[None]:
        """One of ``max_concurrent_uploads`` slots of this worker, or 429 at once when all are taken."""
        with self._uploads_lock:
            if self._uploads >= self.settings.max_concurrent_uploads:
                raise HubError(429, "too many uploads in progress; retry shortly", {"Retry-After": "5"})
            self._uploads += 1
        try:
            yield
        finally:
            with self._uploads_lock:
                self._uploads -= 1

    # ---------------------------------------------------------------- staging
    def stage(self, src: IO[bytes], filename: str, expected_sha256: str | None = None) -> StagedUpload:
        """Copy an incoming file to our temp folder in chunks, hashing it and enforcing the size limit."""
        fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix="upload-")
        h = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(1024 * 1024):
                    size += len(chunk)
                    if size > self.settings.max_file_bytes:
                        raise HubError(
                            413, f"{filename}: file is larger than {self.settings.max_file_bytes} bytes"
                        )
                    h.update(chunk)
                    out.write(chunk)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        staged = StagedUpload(path=Path(name), filename=filename, size=size, sha256=h.hexdigest())
        if expected_sha256 and expected_sha256.lower() != staged.sha256:
            self.discard([staged])
            raise HubError(400, f"{filename}: sha256 digest does not match the uploaded bytes")
        return staged

    def discard(self, staged: list[StagedUpload]) -> None:
        for st in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(st.path)

    def validate(self, staged: list[StagedUpload]) -> None:
        """Check every staged file and that they all belong to one distribution and version."""
        if not staged:
            raise HubError(400, "no files uploaded")
        names = set()
        for st in staged:
            with st.open() as fh:
                try:
                    st.info = archives.inspect_upload(fh, st.filename, st.size, self.limits)
                except ArchiveError as exc:
                    raise HubError(exc.status, f"{st.filename}: {exc.message}") from None
            self._check_fields(st)
            names.add((st.info.name, st.info.version))
        if len(names) != 1:
            raise HubError(400, f"files belong to different releases: {sorted(names)}")
        kinds = [st.info.kind for st in staged if st.info]
        if kinds.count("sdist") > 1:
            raise HubError(400, "more than one sdist in one upload")
        if kinds.count("wheel") > 1:
            raise HubError(400, "more than one wheel in one upload (a version holds one wheel and one sdist)")
        if len({st.filename for st in staged}) != len(staged):
            raise HubError(400, "the same filename was uploaded twice")

    @staticmethod
    def _check_fields(st: StagedUpload) -> None:
        """Refuse what an index must not serve (local versions) and what the columns cannot hold."""
        info = st.info
        assert info is not None
        if Version(info.version).local is not None:
            raise HubError(
                400,
                f"{st.filename}: local versions ({info.version}) cannot be published to an index (PEP 440)",
            )
        if len(info.version) > MAX_VERSION_CHARS:
            raise HubError(400, f"{st.filename}: a version is at most {MAX_VERSION_CHARS} characters")
        if len(info.name) > 128 or len(info.display_name) > 128:
            raise HubError(400, f"{st.filename}: a distribution name is at most 128 characters")
        if len(st.filename) > 255:
            raise HubError(400, "a file name is at most 255 characters")
        if info.requires_python and len(info.requires_python) > 128:
            raise HubError(400, f"{st.filename}: Requires-Python is at most 128 characters")
        if info.readme_content_type and len(info.readme_content_type) > 64:
            info.readme_content_type = info.readme_content_type[:64]

    # ---------------------------------------------------------------- publish
    def publish(
        self,
        principal: Principal,
        owner_name: str | None,
        env_name: str | None,
        staged: list[StagedUpload],
        *,
        private: bool | None = None,
    ) -> PublishResult:
        """Validate and store one release's files (wheel and/or sdist). Idempotent for identical bytes."""
        try:
            if not staged or any(st.info is None for st in staged):
                self.validate(staged)
            info0 = staged[0].info
            assert info0 is not None
            if env_name is not None and canonicalize_name(env_name) != info0.name:
                raise HubError(
                    400, f"the archive is distribution {info0.name!r}, not {canonicalize_name(env_name)!r}"
                )
            if info0.name in self.reserved:
                raise HubError(
                    403, f"the name {info0.name!r} is reserved (it must resolve from the normal index)"
                )
            # Each upload writes its blobs under keys of its own (see storage.blob_key).
            keys: dict[str, str] = {}
            with self.db.session() as s:
                have = dict(
                    s.execute(
                        select(File.filename, File.sha256).where(
                            File.filename.in_([st.filename for st in staged])
                        )
                    ).all()
                )
            try:
                for st in staged:
                    if have.get(st.filename) == st.sha256:
                        continue  # an identical file is already published: nothing to store
                    key = blob_key(st.sha256, st.filename, secrets.token_hex(8))
                    with st.open() as fh:
                        self.storage.put(key, fh)
                    keys[st.filename] = key
                self._crash_point("stored")
                for attempt in range(2):
                    try:
                        result = self._publish_rows(principal, owner_name, staged, private, keys)
                        used = {f["filename"] for f in result.files if f["created"]}
                        keys = {fn: k for fn, k in keys.items() if fn not in used}
                        return result
                    except IntegrityError:
                        # A concurrent upload won a uniqueness race; the retry sees its rows and answers
                        # idempotently (same bytes) or with 409 (different bytes).
                        if attempt == 1:
                            raise HubError(
                                409, "a concurrent upload conflicted with this one; retry"
                            ) from None
            finally:
                for key in keys.values():
                    self._delete_if_unreferenced(key)
        finally:
            self.discard(staged)
        raise AssertionError("unreachable")

    def _crash_point(self, name: str) -> None:
        """The ``test_crash_at`` hook: die here as a power cut would (tests only; unset in production)."""
        if self.settings.test_crash_at == name:
            os.kill(os.getpid(), signal.SIGKILL)

    def _delete_if_unreferenced(self, key: str) -> None:
        with self.db.session() as s:
            if s.scalar(select(File.id).where(File.storage_key == key)) is None:
                with contextlib.suppress(Exception):
                    self.storage.delete(key)

    def _publish_rows(
        self,
        principal: Principal,
        owner_name: str | None,
        staged: list[StagedUpload],
        private: bool | None,
        keys: dict[str, str],
    ) -> PublishResult:
        infos = [st.info for st in staged if st.info is not None]
        info0 = infos[0]
        with self.db.session() as s:
            env = s.scalar(select(Environment).where(Environment.name == info0.name))
            if env is None:
                owner = self._resolve_upload_owner(s, principal, owner_name)
                if not principal.can_write(owner.id, None):
                    raise HubError(403, f"you cannot publish under {owner.name!r}")
                self.check_public_name(principal, info0.name)
                env = Environment(
                    owner_id=owner.id,
                    name=info0.name,
                    display_name=info0.display_name,
                    private=self.settings.default_private if private is None else private,
                    description="",
                    tags="",
                )
                s.add(env)
                s.flush()
            else:
                owner = s.get(Owner, env.owner_id)
                assert owner is not None
                if owner_name is not None and canonicalize_name(owner_name) != owner.name:
                    if principal.can_read(env.owner_id, env.id, env.private):
                        raise HubError(403, f"the name {env.name!r} belongs to {owner.name!r}")
                    raise HubError(403, f"the name {env.name!r} is taken")
                if not principal.can_write(env.owner_id, env.id):
                    if principal.can_read(env.owner_id, env.id, env.private):
                        raise HubError(403, f"you cannot publish to {owner.name}/{env.name}")
                    raise HubError(403, f"the name {env.name!r} is taken")
                if private is not None and private != env.private:
                    is_now, asked = ("private", "public") if env.private else ("public", "private")
                    raise HubError(
                        409,
                        f"{owner.name}/{env.name} is {is_now}, and this upload asks for {asked}; an upload "
                        "never changes visibility. Change it first (its owner: PATCH "
                        f"/api/v1/environments/{owner.name}/{env.name} with {{\"private\": "
                        f"{'true' if asked == 'private' else 'false'}}}), or push without the visibility option",
                    )
            canon = canonicalize_version(info0.version)
            ver = s.scalar(
                select(VersionRow).where(VersionRow.env_id == env.id, VersionRow.canonical_version == canon)
            )
            if ver is not None and ver.version != info0.version:
                raise HubError(
                    409,
                    f"version {info0.version} is the published version {ver.version} under PEP 440; "
                    "versions are immutable (publish a new version)",
                )
            created_version = ver is None
            out_files = []
            new_files: list[tuple[StagedUpload, ArchiveInfo]] = []
            for st in staged:
                assert st.info is not None
                existing = s.scalar(select(File).where(File.filename == st.filename))
                if existing is not None:
                    if existing.sha256 != st.sha256:
                        raise HubError(
                            409,
                            f"{st.filename} already exists with different content; versions are immutable "
                            "(publish a new version)",
                        )
                    out_files.append(self._file_dict(existing, created=False))
                else:
                    new_files.append((st, st.info))
            if ver is not None and new_files:
                self._check_counterpart(s, ver, [i for _st, i in new_files])
            if ver is None:
                ver = VersionRow(
                    env_id=env.id, version=info0.version, canonical_version=canon, uploader_id=principal.user_id
                )
                self._fill_version(ver, infos, new=True)
                s.add(ver)
                s.flush()
            elif new_files:
                self._fill_version(ver, [i for _st, i in new_files], new=False)
            for st, info in new_files:
                f = File(
                    version_id=ver.id,
                    env_id=env.id,
                    filename=st.filename,
                    kind=info.kind,
                    sha256=st.sha256,
                    size=st.size,
                    requires_python=info.requires_python,
                    core_metadata=info.core_metadata.decode("utf-8") if info.core_metadata else None,
                    core_metadata_sha256=hashlib.sha256(info.core_metadata).hexdigest()
                    if info.core_metadata
                    else None,
                    storage_key=keys[st.filename],
                    uploaded_at=utcnow(),
                )
                s.add(f)
                s.flush()
                out_files.append(self._file_dict(f, created=True))
            if new_files:
                from hub import checks

                checks.enqueue_on_publish(s, self.settings, ver, [info.kind for _st, info in new_files])
            if new_files or created_version:
                self.refresh_env(s, env)
                bump_generation(s)
            result = PublishResult(owner.name, env.name, ver.version, created_version, out_files)
        if new_files or created_version:
            self._crash_point("committed")
            self.index_cache.invalidate()
            log.info(
                "published",
                extra={
                    "env": f"{result.owner}/{result.name}",
                    "version": result.version,
                    "files": [f["filename"] for f in out_files if f["created"]],
                },
            )
        return result

    @staticmethod
    def _check_counterpart(s: Session, ver: VersionRow, infos: list[ArchiveInfo]) -> None:
        """A published version takes one new file only: its missing wheel or sdist, with the metadata
        the version was published with (same summary, Requires-Python and dependencies)."""
        have = set(s.scalars(select(File.kind).where(File.version_id == ver.id)))
        for info in infos:
            if info.kind in have:
                raise HubError(
                    409,
                    f"version {ver.version} already has its {info.kind}; a published version takes no new "
                    "files except its missing wheel or sdist counterpart (publish a new version)",
                )
            deps = json.loads(ver.dependencies or "[]")
            differs = [
                field
                for field, mine, theirs in (
                    ("summary", info.summary, ver.summary),
                    ("requires-python", info.requires_python, ver.requires_python),
                    ("dependencies", sorted(info.dependencies), sorted(deps)),
                )
                if mine and theirs and mine != theirs
            ]
            if differs:
                raise HubError(
                    409,
                    f"this {info.kind} does not match the published version {ver.version} "
                    f"({', '.join(differs)} differ); versions are immutable (publish a new version)",
                )

    def _resolve_upload_owner(self, s: Session, principal: Principal, owner_name: str | None) -> Owner:
        if owner_name is None:
            # Legacy uploads: an owner-limited token names the owner; otherwise the token's user.
            oid = principal.owner_restriction or principal.user_id
            owner = s.get(Owner, oid)
        else:
            owner = s.scalar(select(Owner).where(Owner.name == canonicalize_name(owner_name)))
        if owner is None:
            raise HubError(404, f"owner {owner_name!r} not found")
        return owner

    @staticmethod
    def _fill_version(ver: VersionRow, infos: list[ArchiveInfo], *, new: bool) -> None:
        wheel = next((i for i in infos if i.kind == "wheel"), None)
        sdist = next((i for i in infos if i.kind == "sdist"), None)
        primary = wheel or sdist
        assert primary is not None
        if new:
            ver.is_prerelease = Version(primary.version).is_prerelease
            ver.summary = primary.summary
            ver.license = primary.license
            ver.requires_python = primary.requires_python
            ver.dependencies = json.dumps(primary.dependencies)
            ver.tags = json.dumps(
                archives.normalise_tags([*(wheel.tags if wheel else []), *(sdist.tags if sdist else [])])
            )
            ver.metadata_json = json.dumps(primary.extra)
            ver.eval_defaults = "{}"
        if sdist is not None:
            if sdist.eval_defaults and ver.eval_defaults in (None, "", "{}"):
                ver.eval_defaults = json.dumps(sdist.eval_defaults)
            if ver.content_hash is None:
                ver.content_hash = sdist.content_hash
            if not new:
                merged = archives.normalise_tags([*json.loads(ver.tags or "[]"), *sdist.tags])
                ver.tags = json.dumps(merged)
        if not ver.readme:
            for i in (wheel, sdist):
                if i is not None and i.readme:
                    ver.readme = i.readme
                    ver.readme_content_type = i.readme_content_type
                    break

    @staticmethod
    def _file_dict(f: File, *, created: bool) -> dict[str, Any]:
        return {
            "filename": f.filename,
            "kind": f.kind,
            "sha256": f.sha256,
            "size": f.size,
            "created": created,
        }

    # ---------------------------------------------------------------- derived fields
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

    def set_yanked(
        self, s: Session, env: Environment, version: str, yanked: bool, reason: str | None
    ) -> VersionRow:
        ver = s.scalar(
            select(VersionRow).where(
                VersionRow.env_id == env.id, VersionRow.canonical_version == canonical_version(version)
            )
        )
        if ver is None:
            raise not_found(f"version {version} not found")
        ver.yanked = yanked
        ver.yank_reason = (reason or "") if yanked else None
        s.flush()
        self.refresh_env(s, env)
        bump_generation(s)
        return ver

    def count_download(self, env_id: int) -> None:
        """One real file download: bump the total and today's counter atomically (exact under concurrency)."""
        today = dt.datetime.now(dt.UTC).date()
        with self.db.session() as s:
            s.execute(text("UPDATE environments SET downloads = downloads + 1 WHERE id = :i"), {"i": env_id})
            table = DailyDownloads.__table__
            if self.db.sqlite:
                from sqlalchemy.dialects.sqlite import insert
            else:
                from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
            stmt = insert(table).values(env_id=env_id, day=today, count=1)
            stmt = stmt.on_conflict_do_update(
                index_elements=[table.c.env_id, table.c.day], set_={"count": table.c.count + 1}
            )
            s.execute(stmt)

    def downloads(self, s: Session, env_id: int) -> dict[str, Any]:
        since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=29)
        total = s.scalar(select(Environment.downloads).where(Environment.id == env_id)) or 0
        rows = s.execute(
            select(DailyDownloads.day, DailyDownloads.count)
            .where(DailyDownloads.env_id == env_id, DailyDownloads.day >= since)
            .order_by(DailyDownloads.day)
        ).all()
        return {
            "total": int(total),
            "last_30_days": int(sum(r[1] for r in rows)),
            "daily": [{"day": r[0].isoformat(), "count": int(r[1])} for r in rows],
        }

    # ---------------------------------------------------------------- storage identity, gc
    def claim_storage(self) -> None:
        """At first use, give the storage and the database one shared id (a marker object in the storage,
        a ``hub_state`` row in the database), so that ``gc`` can tell it is collecting its own storage.

        Only a database and a storage that both have no id are paired; any other mismatch is left alone
        (serving works, ``gc`` refuses)."""
        db_id = self.recorded_storage_id()
        if self.storage.exists(STORAGE_MARKER):
            return
        if db_id is None:
            with contextlib.suppress(IntegrityError), self.db.session() as s:
                s.execute(
                    text("INSERT INTO hub_state (key, value) VALUES ('storage_id', :v)"),
                    {"v": secrets.randbelow(2**62) + 1},
                )
            db_id = self.recorded_storage_id()
            self.storage.put(STORAGE_MARKER, io.BytesIO(str(db_id).encode()))

    def recorded_storage_id(self) -> int | None:
        with self.db.engine.connect() as conn:
            v = conn.execute(text("SELECT value FROM hub_state WHERE key = 'storage_id'")).scalar()
        return None if v is None else int(v)

    def check_storage_is_ours(self) -> None:
        """HubError unless this database recorded the id the storage carries."""
        db_id = self.recorded_storage_id()
        if db_id is None:
            raise HubError(
                409,
                "this database has no record of any storage; refusing to collect (is VF_HUB_DATABASE_URL the "
                "database that serves this storage?)",
            )
        if not self.storage.exists(STORAGE_MARKER):
            raise HubError(409, f"the storage has no {STORAGE_MARKER} marker; refusing to collect a storage "
                           "this database never used")  # fmt: skip
        with self.storage.open(STORAGE_MARKER) as fh:
            marker = fh.read(100).decode("ascii", "replace").strip()
        if marker != str(db_id):
            raise HubError(
                409, "the storage belongs to another database (storage ids differ); refusing to collect"
            )

    def gc_orphans(self, min_age_seconds: float = 3600.0, *, dry_run: bool = False) -> int:
        """Delete stored blobs no file row references (left by a crash between the write and the commit);
        with ``dry_run``, only count them (``orphans`` lists them). Refuses a storage this database does
        not know (see ``claim_storage``).

        Blobs younger than ``min_age_seconds`` are spared: they may belong to an upload still in flight.
        """
        keys = self.orphans(min_age_seconds)
        if dry_run:
            return len(keys)
        for key in keys:
            self.storage.delete(key)
        # Temp files of uploads interrupted by a crash.
        import time

        now = time.time()
        for p in self.tmp_dir.glob("upload-*"):
            if now - p.stat().st_mtime >= min_age_seconds:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        return len(keys)

    def orphans(self, min_age_seconds: float = 3600.0) -> list[str]:
        """Stored blobs no file row references and older than ``min_age_seconds``."""
        import time

        self.check_storage_is_ours()
        with self.db.session() as s:
            referenced = set(s.scalars(select(File.storage_key)))
        now = time.time()
        return [
            key
            for key in self.storage.keys("files/")
            if key not in referenced and now - self.storage.modified_at(key) >= min_age_seconds
        ]


STORAGE_MARKER = "hub-storage-id"
