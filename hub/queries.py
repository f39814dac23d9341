"""One module of queries shared by the JSON API, the web pages and the admin CLI: loading what a
caller may see, the shapes the API and the pages show, leaderboards, install commands."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from fastapi import Request
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from sqlalchemy import select
from sqlalchemy.orm import Session

from hub import search
from hub.auth import Principal
from hub.errors import HubError, not_found
from hub.models import (
    Environment,
    EvalResult,
    Membership,
    Owner,
    Token,
    Version,
)
from hub.models import (
    File as FileRow,
)
from hub.storage import file_key
from hub.versions import canonical_version, pick_latest, version_key

if TYPE_CHECKING:
    from hub.core import Hub


def ts(v: dt.datetime | None) -> str | None:
    return None if v is None else v.isoformat() + "Z"


def file_url(request: Request, f: FileRow) -> str:
    return f"{request.scope.get('root_path', '')}/{file_key(f.sha256, f.filename)}"


def env_summary(env: Environment, owner_name: str) -> dict[str, Any]:
    return {
        "id": f"{owner_name}/{env.name}",
        "owner": owner_name,
        "name": env.name,
        "display_name": env.display_name,
        "description": env.description,
        "tags": env.tags.split() if env.tags else [],
        "private": env.private,
        "latest_version": env.latest_version,
        "downloads": int(env.downloads),
        "stars": int(env.stars),
        "created_at": ts(env.created_at),
        "updated_at": ts(env.updated_at),
    }


def load_env(s: Session, principal: Principal | None, owner: str, name: str) -> tuple[Environment, Owner]:
    """The environment, or 404 if it does not exist or the caller may not see it."""
    row = s.execute(
        select(Environment, Owner)
        .join(Owner, Owner.id == Environment.owner_id)
        .where(Owner.name == canonicalize_name(owner), Environment.name == canonicalize_name(name))
    ).first()
    if row is None:
        raise not_found(f"environment {owner}/{name} not found{did_you_mean(s, principal, owner, name)}")
    env, own = row
    if env.private and (principal is None or not principal.can_read(env.owner_id, env.id, True)):
        # Exactly the answer an absent environment gets, hint included (computed over visible ones only).
        raise not_found(f"environment {owner}/{name} not found{did_you_mean(s, principal, owner, name)}")
    return env, own


def did_you_mean(s: Session, principal: Principal | None, owner: str, name: str) -> str:
    """A hint naming up to three close, visible ``owner/name`` ids (never a private one you cannot see)."""
    import difflib

    wanted = f"{canonicalize_name(owner)}/{canonicalize_name(name)}"
    if len(wanted) > 80:
        return ""  # comparing long ids costs seconds of CPU on a not-found: no hint for them
    stem = canonicalize_name(name)[:2]
    rows = s.execute(
        select(Owner.name, Environment.name)
        .join(Owner, Owner.id == Environment.owner_id)
        .where(search.visibility_clause(principal))
        .where((Owner.name == canonicalize_name(owner)) | Environment.name.startswith(stem))
        .limit(100)
    ).all()
    ids = [f"{o}/{n}" for o, n in rows if f"{o}/{n}" != wanted]
    close = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.75)
    return f"; did you mean {', '.join(close)}?" if close else ""


def resolve_version(s: Session, env: Environment, version: str) -> Version:
    if version == "latest":
        rows = s.execute(select(Version.version, Version.yanked).where(Version.env_id == env.id)).all()
        latest = pick_latest([(r[0], r[1]) for r in rows])
        if latest is None:
            raise not_found("no installable version")
        version = latest
        ver = s.scalar(select(Version).where(Version.env_id == env.id, Version.version == version))
    else:
        ver = s.scalar(
            select(Version).where(Version.env_id == env.id, Version.canonical_version == canonical_version(version))
        )
    if ver is None:
        raise not_found(f"version {version} not found")
    return ver


def version_out(request: Request, s: Session, ver: Version, detail: bool = False) -> dict[str, Any]:
    files = s.scalars(select(FileRow).where(FileRow.version_id == ver.id).order_by(FileRow.filename)).all()
    out: dict[str, Any] = {
        "version": ver.version,
        "yanked": ver.yanked,
        "yank_reason": ver.yank_reason,
        "prerelease": ver.is_prerelease,
        "created_at": ts(ver.created_at),
        "summary": ver.summary,
        "files": [
            {
                "filename": f.filename,
                "kind": f.kind,
                "sha256": f.sha256,
                "size": int(f.size),
                "upload_time": ts(f.uploaded_at),
                "url": file_url(request, f),
                "requires_python": f.requires_python,
                "core_metadata_sha256": f.core_metadata_sha256,
            }
            for f in files
        ],
    }
    from hub import checks

    out["check"] = checks.check_out(checks.latest_for(s, [ver.id]).get(ver.id))
    if detail:
        out.update(
            license=ver.license,
            requires_python=ver.requires_python,
            dependencies=json.loads(ver.dependencies or "[]"),
            environments=json.loads(ver.environments or "[]"),
            tags=json.loads(ver.tags or "[]"),
            eval_defaults=json.loads(ver.eval_defaults or "{}"),
            content_hash=ver.content_hash,
            metadata=json.loads(ver.metadata_json or "{}"),
            has_readme=bool(ver.readme),
        )
    return out


def sorted_versions(s: Session, env: Environment) -> list[Version]:
    rows = s.scalars(select(Version).where(Version.env_id == env.id)).all()
    return sorted(rows, key=lambda v: version_key(v.version), reverse=True)


def install_commands(
    hub: Hub, request: Request, s: Session, principal: Principal | None, env: Environment, own: Owner,
    ver: Version | None,
) -> dict[str, Any]:
    """The install commands for ``env`` at ``ver``: the one place they are written (the env page, the
    API's ``install``/``install_commands`` and ``vf info`` all show these). None mixes indexes for one
    name (never ``--extra-index-url``):

    * ``vf``: ``vf install owner/name@VERSION``, pinned by sha256.
    * ``pip``, in order: the public dependencies (transitively, through the owner's hub environments)
      from the public index alone, then the environment with the owner's hub index as the *only* index
      (``--isolated``: no extra index or find-links from pip.conf or ``PIP_*``); its hub dependencies
      come from there, its public ones are already installed.
    * ``uv``: the same two steps as pip, as ``uv pip install --no-config --index-url ...`` joined by
      ``&&``, for the active virtual environment (the README's ``.venv``; no uv project needed): each
      step has exactly one index (``--no-config``: none from ``uv.toml`` or ``pyproject.toml`` either).

    A dependency is a hub dependency when the same owner has an environment of that name the caller can
    see (the rule ``vf install`` follows); anything else goes to the public index, except the
    environments it loads by id (``[tool.verifiers] environments``): those are named in the hub step,
    so they come from the hub alone. For a private
    environment (or a private hub dependency) the commands read a token from ``VF_HUB_TOKEN`` the way
    each tool does, never the token itself.
    """
    base = hub.settings.public_url or str(request.base_url).rstrip("/")
    index = f"{base}/{quote(own.name, safe='')}/simple/"  # a name is [A-Za-z0-9._-]; quoted all the same
    private, public_reqs, hub_envs, hidden, hidden_extras = _split_dependencies(s, principal, env, ver)
    pin = f"{env.name}=={ver.version}" if ver is not None else env.name
    vf = "vf install " + shlex.quote(f"{own.name}/{env.name}" + (f"@{ver.version}" if ver is not None else ""))
    note = None
    if private:
        scheme, _, rest = index.partition("://")
        hub_index = f'"{scheme}://__token__:${{VF_HUB_TOKEN}}@{rest}"'
        note = "private: export VF_HUB_TOKEN=<a read token> for uv and pip; vf install uses your vf login"
        if hidden:
            note = (
                "it needs a private environment of its owner that you cannot read: export VF_HUB_TOKEN=<a token "
                "that can read it> for uv and pip; vf install needs a login that can read it"
            )
    else:
        hub_index = index
    if hidden_extras and not hidden:
        note = (f"with the extra(s) {', '.join(hidden_extras)} it needs a private environment of its owner that "
                "you cannot read: an install with them needs a token (VF_HUB_TOKEN, or a vf login) that can read it")
    steps = []  # (index, requirements): public dependencies from the public index, then the hub alone
    if public_reqs:
        steps.append((hub.settings.public_index_url, " ".join(shlex.quote(r) for r in public_reqs)))
    steps.append((hub_index, " ".join(shlex.quote(r) for r in [pin, *hub_envs])))
    pip = [f"pip install --isolated --index-url {url} {reqs}" for url, reqs in steps]
    uv = " && ".join(f"uv pip install --no-config --index-url {url} {reqs}" for url, reqs in steps)
    return {"vf": vf, "uv": uv, "pip": pip, "note": note, "needs_access": hidden,
            "needs_access_extras": hidden_extras}


_EXTRA_IN_MARKER = re.compile(r"""\bextra\s*==\s*(['"])(.*?)\1|(['"])(.*?)\3\s*==\s*extra\b""")


def _marker_extras(req: Requirement) -> list[str]:
    """The extras (normalised) under which ``req`` applies: those its marker names that make it hold."""
    if req.marker is None:
        return []
    named = {m.group(2) if m.group(2) is not None else m.group(4) for m in _EXTRA_IN_MARKER.finditer(str(req.marker))}
    out = set()
    for extra in named:
        try:
            if req.marker.evaluate({"extra": extra}):
                out.add(canonicalize_name(extra))
        except Exception:  # an unevaluable marker: pip would fail it as well
            continue
    return sorted(out)


class DependencySplit(NamedTuple):
    """How a version's requirements install (see :func:`_split_dependencies`)."""

    private: bool
    public_reqs: list[str]
    hub_envs: list[str]
    hidden: bool
    hidden_extras: list[str]


def _split_dependencies(
    s: Session, principal: Principal | None, env: Environment, ver: Version | None, limit: int = 50
) -> DependencySplit:
    """(whether any of ``env`` and its hub dependencies is private, the public requirements of ``ver``
    and, transitively, of its hub dependencies (their newest installable versions), the environments
    they load by id (``[tool.verifiers] environments``) that the owner publishes and the caller can
    see), following at most ``limit`` environments. Hub dependencies: the same owner's environments
    the caller can see. An environment loaded by id is never a public requirement: one the owner does
    not publish is left out (its install fails to load it, and its check says why); and whether one of
    them is the owner's private environment that the caller cannot read (never a public requirement);
    and the extras of ``ver`` itself under which one of its own requirements is such a hidden
    environment (an installer asked for one of them needs access too: ``vf install`` reads each hub
    dependency's requirements with the extras asked of it, so it checks this on every level)."""
    from hub import checks

    private = bool(env.private)
    hidden = False
    hidden_extras: set[str] = set()
    public_reqs: list[str] = []
    hub_envs: list[str] = []
    seen = {env.name}
    queue: list[tuple[list[str], list[str], bool]] = (
        [(json.loads(ver.dependencies or "[]"), json.loads(ver.environments or "[]"), True)] if ver is not None else []
    )
    while queue and len(seen) < limit:
        deps, loaded, first = queue.pop(0)
        listed = []
        for raw, hub_only in [*((r, False) for r in deps), *((r, True) for r in loaded)]:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            # whether it applies with no extra asked (pip's reading; one behind an extra is left to
            # the installer, which asks the hub for the environment with that extra)
            applies = req.marker is None or req.marker.evaluate({"extra": ""})
            listed.append((raw, hub_only, canonicalize_name(req.name), applies, req))
        owned = checks.owned_environments(s, env.owner_id, {name for _, _, name, _, _ in listed} - seen)
        for raw, hub_only, name, applies, req in listed:
            if name in seen:
                continue
            dep = owned.get(name)
            if dep is None:
                if not hub_only and raw not in public_reqs:
                    public_reqs.append(raw)
                continue
            if dep.private and (principal is None or not principal.can_read(dep.owner_id, dep.id, True)):
                # the owner's private environment, hidden from this caller: it still comes from the
                # hub alone (with a token), never from a public index where anyone may take the name
                if applies:
                    private = hidden = True
                elif first:
                    hidden_extras.update(_marker_extras(req))
                continue
            seen.add(name)
            if hub_only:
                hub_envs.append(raw)
            private = private or bool(dep.private)
            if dep.latest_version:
                row = s.execute(
                    select(Version.dependencies, Version.environments).where(
                        Version.env_id == dep.id, Version.version == dep.latest_version
                    )
                ).first()
                if row is not None:
                    queue.append((json.loads(row[0] or "[]"), json.loads(row[1] or "[]"), False))
    return DependencySplit(private, public_reqs, hub_envs, hidden, sorted(hidden_extras))


def leaderboard(s: Session, env: Environment) -> list[dict[str, Any]]:
    """Best average reward per model (ties: more rollouts, then earlier), best first."""
    rows = s.execute(
        select(
            EvalResult.id,
            EvalResult.model,
            EvalResult.avg_reward,
            EvalResult.num_rollouts,
            EvalResult.num_examples,
            EvalResult.rollouts_per_example,
            EvalResult.num_errors,
            EvalResult.num_infra_errors,
            EvalResult.sampling_args,
            EvalResult.created_at,
            Version.version,
            Version.yanked,
            Owner.name,
        )
        .join(Version, Version.id == EvalResult.version_id)
        .outerjoin(Owner, Owner.id == EvalResult.submitter_id)
        .where(EvalResult.env_id == env.id)
    ).all()
    best: dict[str, tuple[Any, ...]] = {}
    for r in rows:
        key = (r.avg_reward, r.num_rollouts, -r.created_at.timestamp(), -r.id)
        if r.model not in best or key > best[r.model][0]:
            best[r.model] = (key, r)
    out = []
    for _model, (_key, r) in best.items():
        out.append(
            {
                "model": r.model,
                "avg_reward": r.avg_reward,
                "version": r.version,
                "version_yanked": bool(r.yanked),
                "num_rollouts": r.num_rollouts,
                "num_examples": r.num_examples,
                "rollouts_per_example": r.rollouts_per_example,
                "num_errors": r.num_errors,
                "num_infra_errors": r.num_infra_errors,
                "sampling_args": json.loads(r.sampling_args or "{}"),
                "submitter": r.name,
                "eval_id": r.id,
                "created_at": ts(r.created_at),
            }
        )
    out.sort(key=lambda x: (-x["avg_reward"], -x["num_rollouts"], x["model"]))
    for i, row in enumerate(out, 1):
        row["rank"] = i
    return out


def eval_out(ev: EvalResult, version: str, submitter: str | None) -> dict[str, Any]:
    return {
        "id": ev.id,
        "version": version,
        "model": ev.model,
        "avg_reward": ev.avg_reward,
        "num_rollouts": ev.num_rollouts,
        "num_examples": ev.num_examples,
        "rollouts_per_example": ev.rollouts_per_example,
        "num_errors": ev.num_errors,
        "num_infra_errors": ev.num_infra_errors,
        "sampling_args": json.loads(ev.sampling_args or "{}"),
        "metadata": json.loads(ev.metadata_json or "{}"),
        "summary": json.loads(ev.summary_json or "{}"),
        "submitter": submitter,
        "created_at": ts(ev.created_at),
    }


def check_tags(hub: Hub, tags: list[str] | None) -> list[str]:
    """The ``tag=`` values of a search, bounded in number and length (422 beyond)."""
    tags = [t for t in (tags or []) if t]
    if len(tags) > hub.settings.max_search_tags:
        raise HubError(422, f"at most {hub.settings.max_search_tags} tag= values per search")
    if any(len(t) > 64 for t in tags):
        raise HubError(422, "a tag is at most 64 characters")
    return tags


def sdist_of(s: Session, ver: Version) -> FileRow:
    f = s.scalar(select(FileRow).where(FileRow.version_id == ver.id, FileRow.kind == "sdist"))
    if f is None:
        raise not_found("this version has no sdist to browse")
    return f


def token_out(t: Token, s: Session) -> dict[str, Any]:
    restr_owner = s.get(Owner, t.owner_restriction_id) if t.owner_restriction_id else None
    env_name = None
    if t.env_restriction_id:
        row = s.execute(
            select(Owner.name, Environment.name)
            .join(Environment, Environment.owner_id == Owner.id)
            .where(Environment.id == t.env_restriction_id)
        ).first()
        env_name = f"{row[0]}/{row[1]}" if row else None
    return {
        "id": t.id,
        "name": t.name,
        "prefix": t.prefix,
        "scope": t.scope,
        "owner": restr_owner.name if restr_owner else None,
        "environment": env_name,
        "expires_at": ts(t.expires_at),
        "revoked_at": ts(t.revoked_at),
        "last_used_at": ts(t.last_used_at),
        "created_at": ts(t.created_at),
    }


def load_org(s: Session, org: str) -> Owner:
    o = owner_by_name(s, org, "org")
    if o is None:
        raise not_found(f"organisation {org!r} not found")
    return o


def ensure_admin_left(s: Session, org_id: int) -> None:
    n = s.scalar(
        select(Membership.user_id).where(Membership.org_id == org_id, Membership.role == "admin").limit(1)
    )
    if n is None:
        raise HubError(409, "an organisation must keep at least one admin")


def owner_by_name(s: Session, name: str, kind: str | None = None) -> Owner | None:
    """A user or an organisation by any spelling of its name (PEP 503 normalisation, the one the hub
    stores), optionally of one kind."""
    stmt = select(Owner).where(Owner.name == canonicalize_name(name))
    if kind is not None:
        stmt = stmt.where(Owner.kind == kind)
    return s.scalar(stmt)
