"""``vf install`` / ``vf uninstall`` and lock files: hub environments pinned by version and sha256.

How an install works: the release is resolved through the hub's package index (PEP 691 JSON of
``/{owner}/simple/{name}/``: files, sha256, yanked; every file name checked before it becomes a path),
the wheel is downloaded from the hub's own host (the token goes nowhere else), its sha256 is checked
against the index *and* against the lock file when one pins it. Its dependencies that the same owner
publishes on the hub are resolved and verified the same way; all verified files are handed to
``pip`` (or ``uv pip``) for the current interpreter as files, so no other index can supply those
names; so do the environments a release loads by id (its ``[tool.verifiers] environments``), which
come from the same owner on the hub or not at all. The remaining dependencies resolve from the user's
normal index, never from the hub: indexes are never mixed for one name (see ``install``). A tampered file on the hub fails the install before
pip runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verifiers.hub_client.api import EnvRef, HubClient, HubClientError
from verifiers.hub_client.files import checked_filename, checked_sha256, checked_version

JSON_V1 = "application/vnd.pypi.simple.v1+json"
LOCK_VERSION = 1


@dataclass
class Release:
    id: str  # owner/name
    version: str
    distribution: str
    filename: str
    url: str  # absolute
    sha256: str
    yanked: bool = False
    yank_reason: str | None = None
    hub: str = ""


# -------------------------------------------------------------------------------------- resolve
def project_page(client: HubClient, owner: str | None, name: str) -> dict[str, Any] | None:
    """The hub's PEP 691 page of ``name`` (per-owner when ``owner`` is given), None when absent.

    Without a token a 401 is absent too: a hub set to challenge anonymous index misses answers 401
    for absent and private projects alike."""
    path = f"/{owner}/simple/{name}/" if owner else f"/simple/{name}/"
    absent = (404,) if client.config.token else (404, 401)
    resp = client.request("GET", path, headers={"Accept": JSON_V1}, expect=(200, *absent))
    if resp.status_code in absent:
        return None
    try:
        doc = resp.json()
    except ValueError:
        raise HubClientError(f"the hub's index page {path} is not JSON") from None
    if not isinstance(doc, dict):
        raise HubClientError(f"the hub's index page {path} is not a PEP 691 project page")
    return doc


def _files_by_version(doc: dict[str, Any], project: str) -> dict[str, list[dict[str, Any]]]:
    """Files of an index page grouped by normalised version. Every file name must be a safe wheel or
    sdist name of ``project`` (a hostile page is refused as a whole, not filtered)."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    by_version: dict[str, list[dict[str, Any]]] = {}
    files = doc.get("files")
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict):
            raise HubClientError(f"the hub's index page of {project} is malformed")
        filename = f.get("filename")
        try:
            if isinstance(filename, str) and filename.endswith(".whl"):
                raw = str(parse_wheel_filename(filename)[1])
            elif isinstance(filename, str) and filename.endswith(".tar.gz"):
                raw = str(parse_sdist_filename(filename)[1])
            else:
                raw = "0"
        except (InvalidWheelFilename, InvalidSdistFilename):
            raw = "0"
        # The name check runs on every file, parseable or not: it refuses with the reason.
        kind, filename = checked_filename(filename, project=project, version=raw)
        hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
        sha = checked_sha256(hashes.get("sha256"))
        by_version.setdefault(checked_version(raw), []).append({**f, "kind": kind, "sha256": sha})
    return by_version


def _pick(by_version: dict[str, list[dict[str, Any]]], what: str, *, wanted: str | None = None,
          specifier: Any = None) -> str:
    """The version to install: ``wanted`` exactly, else the newest non-yanked final release that
    satisfies ``specifier`` (pre-releases when nothing else does, or the specifier names one)."""
    from packaging.version import Version

    if wanted:
        key = next((v for v in by_version if Version(v) == Version(wanted)), None) if _valid(wanted) else None
        if key is None:
            known = ", ".join(sorted(by_version, key=Version, reverse=True)[:10]) or "none"
            raise HubClientError(f"{what} has no version {wanted} (versions: {known})")
        return key

    def ok(v: str, allow_pre: bool) -> bool:
        if all(f.get("yanked") for f in by_version[v]):
            return False
        if specifier is not None and not specifier.contains(v, prereleases=True):
            return False
        return allow_pre or not Version(v).is_prerelease

    cands = [v for v in by_version if ok(v, False)] or [v for v in by_version if ok(v, True)]
    if not cands:
        if specifier is not None and str(specifier):
            raise HubClientError(f"{what}: no version on the hub satisfies {specifier}")
        raise HubClientError(f"every version of {what} is yanked", hint="pin one explicitly: owner/name@VERSION")
    return max(cands, key=Version)


def _release(client: HubClient, env_id: str, name: str, key: str, files: list[dict[str, Any]]) -> Release:
    import httpx

    f = sorted(files, key=lambda f: f["kind"] != "wheel")[0]  # prefer the wheel
    yanked = f.get("yanked")
    try:
        url = str(httpx.URL(f"{client.config.url}/").join(str(f.get("url") or "")))
    except (httpx.InvalidURL, ValueError):
        raise HubClientError(f"the hub sent an invalid URL for {f['filename']!r}") from None
    return Release(
        id=env_id, version=key, distribution=name, filename=f["filename"], url=url, sha256=f["sha256"],
        yanked=bool(yanked), yank_reason=yanked if isinstance(yanked, str) and yanked else None,
        hub=client.config.url,
    )


def resolve(client: HubClient, ref: EnvRef) -> Release:
    """The file to install for ``ref`` (exact version, or ``latest``: newest non-yanked final)."""
    from packaging.utils import canonicalize_name

    name = canonicalize_name(ref.name)
    doc = project_page(client, ref.owner, name)
    if doc is None:
        client.environment(ref)  # raises "not found, did you mean ..." (or explains auth)
        raise HubClientError(f"{ref.id} has no installable files on the hub")
    by_version = _files_by_version(doc, name)
    if not by_version:
        raise HubClientError(f"{ref.id} has no published files yet")
    wanted = ref.version if ref.version and ref.version != "latest" else None
    key = _pick(by_version, ref.id, wanted=wanted)
    return _release(client, ref.id, name, key, by_version[key])


def _valid(v: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(v)
        return True
    except InvalidVersion:
        return False


def _requirements(path: Path, rel: Release, extras: frozenset[str] = frozenset()) -> list[Any]:
    """The Requires-Dist of a verified wheel (its METADATA) or sdist (its PKG-INFO) that apply to
    this interpreter with the ``extras`` asked of it (markers evaluated as pip evaluates them: a
    requirement applies when its marker holds for no extra or for one of those)."""
    import email.parser
    import tarfile
    import zipfile

    from packaging.requirements import InvalidRequirement, Requirement

    raw: bytes | None = None
    try:
        if rel.filename.endswith(".whl"):
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
                if len(names) == 1 and zf.getinfo(names[0]).file_size < (2 << 20):
                    raw = zf.read(names[0])
        else:
            with tarfile.open(path, "r:gz") as tar:
                for m in tar:
                    if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO") and m.size < (2 << 20):
                        fh = tar.extractfile(m)
                        raw = fh.read() if fh else None
                        break
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise HubClientError(f"{rel.filename} cannot be read ({exc})") from None
    if raw is None:
        raise HubClientError(f"{rel.filename} has no readable core metadata")
    msg = email.parser.BytesParser().parsebytes(raw, headersonly=True)
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            raise HubClientError(f"{rel.filename} declares an invalid requirement {line[:100]!r}") from None
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *sorted(extras))):
            out.append(req)
    return out


def _hub_environments(detail: dict[str, Any] | None, env_id: str) -> list[Any]:
    """The environments a release loads by id (its ``[tool.verifiers] environments``, as the hub read
    them from its sdist; ``detail``: the version's detail from the hub): hub-only dependencies, taken
    from the same owner on the hub or not at all. A hub that gave no detail (a plain package index,
    an older hub, an anonymous miss) lists none: the release then installs without them, and loading
    them says what is missing."""
    from packaging.requirements import InvalidRequirement, Requirement

    raw = (detail.get("environments") if isinstance(detail, dict) else None) or []
    if not isinstance(raw, list) or len(raw) > 64:
        raise HubClientError(f"the hub sent an unusable list of environments for {env_id}")
    out = []
    for item in raw:
        try:
            req = Requirement(item) if isinstance(item, str) else None
        except InvalidRequirement:
            req = None
        if req is None or req.url is not None or req.extras or req.marker is not None:
            raise HubClientError(f"the hub sent an unusable environment requirement {str(item)[:100]!r} for {env_id}")
        out.append(req)
    return out


# ----------------------------------------------------------------------------------------- lock
def read_lock(path: Path) -> dict[str, Release]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise HubClientError(f"lock file {path} is not valid TOML: {exc}") from None
    if data.get("version") != LOCK_VERSION:
        raise HubClientError(f"lock file {path} has version {data.get('version')!r}; this vf reads {LOCK_VERSION}")
    out = {}
    for item in data.get("environment", []):
        try:
            rel = Release(**{k: item[k] for k in ("id", "version", "distribution", "filename", "url", "sha256")},
                          hub=item.get("hub", ""))
        except KeyError as exc:
            raise HubClientError(f"lock file {path}: an entry lacks {exc.args[0]!r}") from None
        from packaging.utils import canonicalize_name

        where = f"lock file {path}"
        if not all(isinstance(getattr(rel, k), str) for k in ("id", "version", "distribution", "filename", "url")):
            raise HubClientError(f"{where}: an entry has a non-string field")
        if canonicalize_name(rel.distribution) != rel.distribution or rel.id.rsplit("/", 1)[-1] != rel.distribution:
            raise HubClientError(f"{where}: entry {rel.id!r} names distribution {rel.distribution!r}")
        rel.version = checked_version(rel.version, where=where)
        checked_filename(rel.filename, project=rel.distribution, version=rel.version, where=where)
        rel.sha256 = checked_sha256(rel.sha256, where=where)
        out[rel.id] = rel
    return out


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid TOML basic string


def write_lock(path: Path, releases: dict[str, Release]) -> None:
    lines = [
        "# Hub environments pinned by version and sha256. Written by `vf install --lock`;",
        "# `vf install --lock FILE` installs exactly these files and fails on any hash mismatch.",
        f"version = {LOCK_VERSION}",
        "",
    ]
    for rid in sorted(releases):
        r = releases[rid]
        lines.append("[[environment]]")
        for k in ("id", "version", "distribution", "filename", "sha256", "url", "hub"):
            lines.append(f"{k} = {_toml_str(getattr(r, k))}")
        lines.append("")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ install records
def _records_path(prefix: str | None = None) -> Path:
    return Path(prefix or sys.prefix) / "share" / "verifiers" / "hub-installs.json"


def installed_records(prefix: str | None = None) -> dict[str, dict[str, Any]]:
    """Distribution name -> what ``vf install`` put in this environment (id, version, hub, sha256)."""
    try:
        data = json.loads(_records_path(prefix).read_text())
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


def _save_records(records: dict[str, dict[str, Any]]) -> None:
    path = _records_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=2, sort_keys=True))
    os.replace(tmp, path)


def record_for(name_or_id: str) -> dict[str, Any] | None:
    from packaging.utils import canonicalize_name

    from verifiers.ids import parse_env_id

    try:
        key = canonicalize_name(parse_env_id(name_or_id).name)
    except ValueError:
        return None
    return installed_records().get(key)


# -------------------------------------------------------------------------------------- install
def _find_uv() -> str | None:
    found = shutil.which("uv") or (str(Path(sys.executable).parent / "uv")
                                   if (Path(sys.executable).parent / "uv").exists() else None)
    if found:
        return found
    try:  # the `uv` wheel from PyPI knows where its binary lies
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


def _installer_cmd(installer: str) -> list[str]:
    if installer == "uv":
        uv = _find_uv()
        if uv is None:
            raise HubClientError("uv is not installed", hint="pip install uv, or use --installer pip")
        return [uv, "pip", "install", "--python", sys.executable]
    if installer == "pip":
        return [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
    raise HubClientError(f"unknown installer {installer!r}: pip or uv")


def _hub_url_key(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def _check_origins(installer: str, cmd: list[str], hub_files: dict[str, Path], hub_url: str) -> None:
    """Resolve without installing and check where every distribution would come from: hub
    environments from the verified files, everything else from the user's own index, never from the
    hub. Anything else (e.g. the hub listed in pip.conf as an extra index, or a hub that serves pip
    what it hid from us) is dependency confusion: refuse before anything is installed."""
    import json as _json
    from urllib.parse import unquote, urlsplit

    from packaging.utils import canonicalize_name

    if installer != "pip":
        return
    proc = subprocess.run([*cmd, "--dry-run", "--quiet", "--report", "-", *map(str, hub_files.values())],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        if "--report" in proc.stderr and "no such option" in proc.stderr:
            raise HubClientError("this pip is too old to report where it installs from (pip >= 22.2 needed)",
                                 hint="python -m pip install -U pip, or vf install --installer uv")
        _fail(installer, proc, list(hub_files))
    try:
        report = _json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise HubClientError("pip's installation report could not be read") from None
    hub = _hub_url_key(hub_url)
    for item in report.get("install", []):
        dist = canonicalize_name(str((item.get("metadata") or {}).get("name", "")))
        url = str((item.get("download_info") or {}).get("url", ""))
        if dist in hub_files:
            expected = hub_files[dist].resolve()
            parts = urlsplit(url)
            if parts.scheme != "file" or Path(unquote(parts.path)).resolve() != expected:
                raise HubClientError(
                    f"dependency confusion: {dist} is a hub environment pinned by sha256, but pip would "
                    f"install it from {url}; refusing to install"
                )
        elif _hub_url_key(url)[1:] == hub[1:]:
            raise HubClientError(
                f"dependency confusion: {dist} is not a hub environment of this install, but pip would take "
                f"it from the hub ({url}); refusing to install",
                hint="remove the hub from pip's index settings (pip config list; PIP_INDEX_URL, "
                "PIP_EXTRA_INDEX_URL): vf install fetches hub environments itself",
            )


def _fail(installer: str, proc: subprocess.CompletedProcess[str], ids: list[str]) -> None:
    lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
    reason = next((ln for ln in lines if ln.lstrip().startswith("ERROR")), lines[-1] if lines else "?")
    raise HubClientError(f"{installer} could not install {', '.join(ids)}: {reason.strip()}")


def install(client: HubClient, refs: list[EnvRef], *, lock: Path | None = None, installer: str = "pip",
            log: Callable[[str], None] = lambda _m: None, quiet: bool = True,
            allow_unverified: bool = False) -> list[Release]:
    """Install hub environments into the current interpreter's environment.

    Every hub release this installs (the requested ones, their hub dependencies, everything a lock
    pins) passes the verification gate first (``verified.require_installable``): a version whose
    hub check failed is refused before anything is downloaded or installed, unless
    ``allow_unverified`` or ``VF_ALLOW_UNVERIFIED=1``. Every install path (``vf install``, ``--lock``,
    the loader's installer behind ``load_environment(..., install=True)``, ``VF_AUTO_INSTALL``,
    training configs, group members given by id) comes through here, so none can skip it.

    With ``lock`` and no ``refs``: install exactly what the lock pins. With ``lock`` and ``refs``: a ref
    already pinned there must still match the pinned hash; the lock is updated with what was installed.

    Which index each distribution comes from is decided here, never left to pip's "highest version
    across indexes": the requested environments and their dependencies that their owner publishes on
    the hub are fetched from the hub and verified by sha256, then handed to the installer as files
    (so no other index can supply those names); every other dependency comes from the user's normal
    index, even when the hub hosts that name under another owner: anyone may publish any unprotected
    name there, so a name the environment's owner does not publish is never a hub dependency (a
    squatter can neither take it nor make the install fail). With pip, the resolution is also
    checked before installing (``_check_origins``: a public dependency that pip would take from the
    hub is refused). uv has no installation report to check against, so with
    ``--installer uv`` that last check does not run (the rest does).
    """
    from packaging.utils import canonicalize_name

    from verifiers.hub_client.verified import allow_unverified as _allowed
    from verifiers.hub_client.verified import require_installable

    allow = _allowed(allow_unverified)
    locked = read_lock(lock) if lock else {}
    locked_by_dist = {r.distribution: r for r in locked.values()}
    if lock and not refs:
        if not locked:
            raise HubClientError(f"lock file {lock} pins nothing (or does not exist)")
        roots = list(locked.values())
        for r in roots:
            if r.hub and r.hub.rstrip("/") != client.config.url:
                raise HubClientError(f"{lock} pins {r.id} from {r.hub}, but the hub in use is {client.config.url}",
                                     hint=f"VF_HUB_URL={r.hub} vf install --lock {lock}")
    else:
        roots = []
        for ref in refs:
            rel = resolve(client, ref)
            pinned = locked.get(rel.id)
            if pinned and pinned.version == rel.version and pinned.sha256 != rel.sha256:
                raise HubClientError(
                    f"{rel.id} {rel.version}: the hub now serves sha256 {rel.sha256[:16]}..., "
                    f"but {lock} pins {pinned.sha256[:16]}...; refusing to install a changed file"
                )
            roots.append(rel)
    for r in roots:
        if r.yanked:
            log(f"warning: {r.id} {r.version} is yanked" + (f" ({r.yank_reason})" if r.yank_reason else ""))
    with tempfile.TemporaryDirectory(prefix="vf-install-") as tmp:
        chosen: dict[str, Release] = {}
        paths: dict[str, Path] = {}
        details: dict[str, Any] = {}
        # the extras asked of each hub environment: its requirements behind those extras are the
        # hub's too (pip would otherwise fetch a same-owner name behind an extra from a public index)
        extras_of: dict[str, frozenset[str]] = {}
        queue = list(roots)
        for r in roots:
            chosen[r.distribution] = r
            extras_of[r.distribution] = frozenset()
        while queue:
            r = queue.pop(0)
            owner, name = r.id.split("/", 1)
            dest = Path(tmp) / r.filename
            if r.distribution not in paths:
                details[r.distribution] = require_installable(client, EnvRef(owner, name, r.version), allow=allow, log=log)
                # Every name that becomes a path was checked when it was read; check again where it is used.
                checked_filename(r.filename, project=r.distribution, version=r.version)
                client.download(r.url, dest, expected_sha256=r.sha256)
                paths[r.distribution] = dest
            detail = details[r.distribution]
            commands = (detail.get("install_commands") if isinstance(detail, dict) else None) or {}
            extras = commands.get("needs_access_extras") if isinstance(commands, dict) else None
            if not isinstance(commands, dict) or not isinstance(extras or [], list) \
                    or not all(isinstance(e, str) for e in extras or []):
                raise HubClientError(f"the hub sent unusable install commands for {r.id} {r.version}")
            behind = sorted({canonicalize_name(e) for e in extras or []} & extras_of[r.distribution])
            if commands.get("needs_access") or behind:
                how = f" with the extra(s) {', '.join(behind)} asked of it" if behind and not commands.get("needs_access") else ""
                raise HubClientError(
                    f"{r.id} {r.version}{how} depends on a private environment of {owner} that this login cannot "
                    "read; vf install never takes such a name from a public index",
                    hint=f"vf login with an account (or VF_HUB_TOKEN with a token) that can read {owner}'s environments",
                )
            listed = [(req, False) for req in _requirements(dest, r, extras_of[r.distribution])]
            listed += [(req, True) for req in _hub_environments(detail, r.id)]
            for req, hub_only in listed:
                dep = canonicalize_name(req.name)
                wanted = frozenset(canonicalize_name(x) for x in req.extras)
                if dep in chosen:
                    have = chosen[dep]
                    if not req.specifier.contains(have.version, prereleases=True):
                        raise HubClientError(f"{r.id} {r.version} needs {req}, but {have.id} {have.version} "
                                             "is the version being installed")
                    if dep in extras_of and not wanted <= extras_of[dep]:
                        extras_of[dep] |= wanted  # read its requirements again with the new extras
                        queue.append(have)
                    continue
                doc = project_page(client, owner, dep)
                if doc is not None:  # published by the same owner: a hub dependency, pinned by hash
                    pin = locked_by_dist.get(dep)
                    by_version = _files_by_version(doc, dep)
                    if not by_version:
                        raise HubClientError(f"{r.id} needs {req}, and {owner}/{dep} has no files on the hub")
                    key = _pick(by_version, f"{owner}/{dep}", wanted=pin.version if pin else None,
                                specifier=None if pin else req.specifier)
                    rel = _release(client, f"{owner}/{dep}", dep, key, by_version[key])
                    if pin and pin.sha256 != rel.sha256:
                        raise HubClientError(
                            f"{rel.id} {rel.version}: the hub now serves sha256 {rel.sha256[:16]}..., but {lock} "
                            f"pins {pin.sha256[:16]}...; refusing to install a changed file")
                    if not req.specifier.contains(rel.version, prereleases=True):
                        raise HubClientError(f"{r.id} {r.version} needs {req}, but {lock} pins {rel.version}")
                    if rel.yanked:
                        log(f"warning: {rel.id} {rel.version} is yanked"
                            + (f" ({rel.yank_reason})" if rel.yank_reason else ""))
                    chosen[dep] = rel
                    extras_of[dep] = wanted
                    queue.append(rel)
                    continue
                if hub_only:  # never from a public index, where anyone may hold the name
                    raise HubClientError(
                        f"{r.id} {r.version} loads the environment {req} ([tool.verifiers] environments), and "
                        f"{owner} does not publish {dep} on {client.config.url}"
                    )
                # Anything else comes from the user's normal index, whoever holds that name on the hub.
        hub_ids = [chosen[d].id for d in paths]
        cmd = _installer_cmd(installer)
        _check_origins(installer, cmd, paths, client.config.url)
        full = cmd + [str(p) for p in paths.values()]
        if quiet and installer == "pip":
            full.insert(4, "-q")
        proc = subprocess.run(full, capture_output=True, text=True)
        if proc.returncode != 0:
            _fail(installer, proc, hub_ids)
    releases = [chosen[d] for d in paths]
    records = installed_records()
    for r in releases:
        records[r.distribution] = {"id": r.id, "version": r.version, "hub": r.hub or client.config.url,
                                   "sha256": r.sha256, "filename": r.filename}
    _save_records(records)
    if lock:
        merged = dict(locked)
        merged.update({r.id: r for r in releases})
        write_lock(lock, merged)
    return releases


def uninstall(names: list[str], *, installer: str = "pip") -> list[str]:
    from packaging.utils import canonicalize_name

    from verifiers.ids import parse_env_id

    dists = [canonicalize_name(parse_env_id(n).name) for n in names]
    if installer == "uv":
        cmd = _installer_cmd("uv")
        cmd[2] = "uninstall"
    else:
        cmd = [sys.executable, "-m", "pip", "uninstall", "-y", "-q"]
    proc = subprocess.run(cmd + dists, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["?"]
        raise HubClientError(f"uninstall failed: {lines[-1]}")
    records = installed_records()
    for d in dists:
        records.pop(d, None)
    _save_records(records)
    return dists


def release_dict(r: Release) -> dict[str, Any]:
    return asdict(r)
