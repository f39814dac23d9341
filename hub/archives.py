"""Validation and metadata extraction for uploaded wheels and sdists (hostile input).

Nothing is ever extracted to the filesystem: members are read one by one from the uploaded temp file,
with every declared and actual size checked against the limits as bytes are decompressed. A rejection
raises :class:`ArchiveError` with a reason that is returned to the client as a 4xx.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import email.policy
import gzip
import hashlib
import io
import json
import posixpath
import re
import stat
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from typing import IO, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

SMALL_FILE_LIMIT = 2 * 1024 * 1024  # METADATA, PKG-INFO, pyproject.toml, README read into memory
README_NAMES = ("README.md", "README.rst", "README.txt", "README")


class ArchiveError(ValueError):
    """The upload is not an acceptable distribution; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class Limits:
    max_file_bytes: int
    max_uncompressed_bytes: int
    max_member_bytes: int
    max_compression_ratio: float
    ratio_check_min_bytes: int
    max_members: int


@dataclass
class ArchiveInfo:
    """What the hub keeps about one validated distribution file."""

    kind: str  # "wheel" | "sdist"
    name: str  # normalised distribution name
    display_name: str  # the Name: field as written
    version: str  # normalised PEP 440
    summary: str = ""
    license: str | None = None
    requires_python: str | None = None
    dependencies: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    eval_defaults: dict[str, Any] = field(default_factory=dict)
    environments: list[str] = field(default_factory=list)  # sdist: [tool.verifiers] environments
    readme: str | None = None
    readme_content_type: str | None = None
    core_metadata: bytes | None = None  # wheel METADATA bytes as stored
    content_hash: str | None = None  # sdist: hash over the sorted source files
    extra: dict[str, Any] = field(default_factory=dict)  # classifiers, urls, authors, ...


def parse_dist_filename(filename: str) -> tuple[str, str, str]:
    """``(kind, normalised name, normalised version)`` from a wheel or ``.tar.gz`` sdist filename.

    The name must be a distribution name of ASCII letters, digits, ``.``, ``_`` and ``-`` (PEP
    508), whatever the filename parsers of ``packaging`` let through: a name reaches index pages,
    install commands and shells, and a look-alike (Cyrillic, ligatures) would pass the reserved
    and protected names."""
    if "/" in filename or "\\" in filename or filename.startswith(".") or "\x00" in filename:
        raise ArchiveError(f"invalid filename {filename!r}")
    try:
        if filename.endswith(".whl"):
            kind, raw = "wheel", filename.split("-", 1)[0]
            name, version, _build, _tags = parse_wheel_filename(filename)
        elif filename.endswith(".tar.gz"):
            kind, raw = "sdist", filename[: -len(".tar.gz")].rpartition("-")[0]
            name, version = parse_sdist_filename(filename)
        else:
            raise ArchiveError(f"unsupported file type {filename!r}: upload a wheel (.whl) or an sdist (.tar.gz)")
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion) as exc:
        raise ArchiveError(f"invalid distribution filename {filename!r}: {exc}") from None
    if not is_valid_dist_name(raw):
        raise ArchiveError(
            f"invalid distribution name {raw!r} in {filename!r}: a name is ASCII letters, digits, '.', '_' "
            "and '-', starting and ending with a letter or digit"
        )
    return kind, str(name), str(version)


MAX_REQUIREMENTS = 500

_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])\Z", re.IGNORECASE | re.ASCII)


def is_valid_dist_name(name: str) -> bool:
    """A valid Python distribution name (PEP 508 / core metadata ``Name``)."""
    return bool(_DIST_NAME.match(name)) and len(name) <= 128


def _check_member_name(name: str) -> None:
    if not name or "\x00" in name:
        raise ArchiveError("archive member with an empty or NUL-containing name")
    if "\\" in name:
        raise ArchiveError(f"archive member {name!r} uses backslashes")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"archive member {name!r} has an absolute path")
    parts = name.rstrip("/").split("/")
    if any(p == ".." for p in parts):
        raise ArchiveError(f"archive member {name!r} escapes the archive root (path traversal)")


def _parse_core_metadata(raw: bytes, where: str) -> email.message.Message:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"{where} is not valid UTF-8") from None
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


def _metadata_fields(msg: email.message.Message, info: ArchiveInfo) -> None:
    info.summary = (msg.get("Summary") or "").strip()
    info.license = (msg.get("License-Expression") or msg.get("License") or "").strip() or None
    rp = msg.get("Requires-Python")
    if rp:
        try:
            SpecifierSet(rp)
        except InvalidSpecifier:
            raise ArchiveError(f"invalid Requires-Python {rp!r}") from None
        info.requires_python = rp.strip()
    deps = []
    declared = msg.get_all("Requires-Dist") or []
    if len(declared) > MAX_REQUIREMENTS:
        # every view, install advice and check job resolves these: their number is bounded
        raise ArchiveError(f"the package declares {len(declared)} requirements (Requires-Dist); at most {MAX_REQUIREMENTS} are accepted")
    for d in declared:
        check_requirement(d, "Requires-Dist")
        deps.append(d.strip())
    info.dependencies = deps
    kw = msg.get("Keywords") or ""
    sep = "," if "," in kw else None
    info.tags = [t.strip() for t in kw.split(sep) if t.strip()]
    body = msg.get_payload()
    desc = msg.get("Description")
    text = body if isinstance(body, str) and body.strip() else desc
    if text and text.strip():
        info.readme = text
        ctype = (msg.get("Description-Content-Type") or "text/plain").split(";")[0].strip().lower()
        info.readme_content_type = ctype
    info.extra = {
        "classifiers": msg.get_all("Classifier") or [],
        "project_urls": msg.get_all("Project-URL") or [],
        "author": msg.get("Author") or msg.get("Author-email") or None,
        "metadata_version": msg.get("Metadata-Version"),
    }


def check_requirement(raw: object, where: str) -> Requirement:
    """A PEP 508 requirement that resolves by name from an index. A direct reference (``name @ URL``,
    a ``file:`` path, a VCS URL) is refused, as PyPI refuses it: whoever installs or checks the
    release would fetch (and possibly build, running its code) whatever that URL serves."""
    if not isinstance(raw, str):
        raise ArchiveError(f"invalid {where} {raw!r}: not a string")
    try:
        req = Requirement(raw)
    except InvalidRequirement:
        raise ArchiveError(f"invalid {where} {raw!r}") from None
    if req.url is not None:
        raise ArchiveError(
            f"{where} {raw.strip()[:200]!r} is a direct reference (name @ URL or path); an index accepts "
            "only dependencies that resolve by name, as PyPI does: publish the dependency and depend on "
            "it by name"
        )
    return req


def _check_name_version(msg: email.message.Message, name: str, version: str, where: str) -> str:
    mname, mversion = msg.get("Name"), msg.get("Version")
    if not mname or not mversion:
        raise ArchiveError(f"{where} lacks Name or Version")
    if not is_valid_dist_name(mname.strip()):
        raise ArchiveError(f"{where} has an invalid Name {mname!r}: a name is ASCII letters, digits, '.', '_' and '-'")
    if canonicalize_name(mname) != name:
        raise ArchiveError(f"{where} names {mname!r}, but the filename says {name!r}")
    try:
        if str(Version(mversion)) != version:
            raise ArchiveError(f"{where} has version {mversion!r}, but the filename says {version!r}")
    except InvalidVersion:
        raise ArchiveError(f"{where} has an invalid version {mversion!r}") from None
    return mname.strip()


class _Budget:
    """Counts decompressed bytes across an archive and enforces the total limit."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0

    def add(self, n: int, member: str) -> None:
        self.total += n
        if self.total > self.limits.max_uncompressed_bytes:
            raise ArchiveError(
                f"archive expands to more than {self.limits.max_uncompressed_bytes} bytes", status=413
            )


def _read_member(
    stream: IO[bytes], member: str, limit: int, budget: _Budget, keep: bool
) -> tuple[str, int, bytes]:
    """Hash a member while reading it; keep the bytes only for small files we parse."""
    h = hashlib.sha256()
    size = 0
    kept = io.BytesIO() if keep else None
    while chunk := stream.read(256 * 1024):
        size += len(chunk)
        if size > limit:
            raise ArchiveError(f"archive member {member!r} is larger than {limit} bytes", status=413)
        budget.add(len(chunk), member)
        h.update(chunk)
        if kept is not None:
            if size > SMALL_FILE_LIMIT:
                raise ArchiveError(f"{member!r} is too large to be metadata")
            kept.write(chunk)
    return h.hexdigest(), size, kept.getvalue() if kept is not None else b""


def inspect_wheel(fh: IO[bytes], filename: str, limits: Limits) -> ArchiveInfo:
    _kind, name, version = parse_dist_filename(filename)
    try:
        zf = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveError(f"not a valid wheel (zip) archive: {exc}") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise ArchiveError(f"archive has more than {limits.max_members} members")
        seen: set[str] = set()
        declared = 0
        for zi in infos:
            _check_member_name(zi.filename)
            if zi.filename in seen:
                raise ArchiveError(f"duplicate archive member {zi.filename!r}")
            seen.add(zi.filename)
            mode = zi.external_attr >> 16
            ftype = stat.S_IFMT(mode)
            if stat.S_ISLNK(mode):
                raise ArchiveError(f"archive member {zi.filename!r} is a symbolic link")
            if ftype and ftype not in (stat.S_IFREG, stat.S_IFDIR):
                raise ArchiveError(
                    f"archive member {zi.filename!r} is not a regular file (device/fifo/socket)"
                )
            if zi.flag_bits & 0x1:
                raise ArchiveError(f"archive member {zi.filename!r} is encrypted")
            if zi.file_size > limits.max_member_bytes:
                raise ArchiveError(
                    f"archive member {zi.filename!r} is larger than {limits.max_member_bytes} bytes", 413
                )
            declared += zi.file_size
            if zi.file_size >= limits.ratio_check_min_bytes:
                ratio = zi.file_size / max(zi.compress_size, 1)
                if ratio > limits.max_compression_ratio:
                    raise ArchiveError(
                        f"archive member {zi.filename!r} has compression ratio {ratio:.0f} "
                        f"(limit {limits.max_compression_ratio:.0f}): refusing a possible zip bomb"
                    )
        if declared > limits.max_uncompressed_bytes:
            raise ArchiveError(f"archive expands to more than {limits.max_uncompressed_bytes} bytes", 413)

        dist_infos = {
            n.split("/", 1)[0] for n in seen if "/" in n and n.split("/", 1)[0].endswith(".dist-info")
        }
        expected = [d for d in dist_infos if _dist_info_matches(d, name, version)]
        if len(dist_infos) != 1 or len(expected) != 1:
            raise ArchiveError(
                f"wheel must contain exactly one .dist-info folder for {name} {version}; found {sorted(dist_infos)}"
            )
        di = expected[0]
        for required in ("METADATA", "WHEEL", "RECORD"):
            if f"{di}/{required}" not in seen:
                raise ArchiveError(f"wheel lacks {di}/{required}")

        budget = _Budget(limits)
        digests: dict[str, tuple[str, int]] = {}
        small: dict[str, bytes] = {}
        for zi in infos:
            if zi.is_dir():
                continue
            keep = zi.filename in (f"{di}/METADATA", f"{di}/RECORD", f"{di}/WHEEL")
            try:
                with zf.open(zi) as member:
                    digest, size, data = _read_member(
                        member, zi.filename, limits.max_member_bytes, budget, keep
                    )
            except (zipfile.BadZipFile, zlib_error(), OSError, EOFError) as exc:
                raise ArchiveError(f"corrupt archive member {zi.filename!r}: {exc}") from None
            digests[zi.filename] = (digest, size)
            if keep:
                small[zi.filename] = data

    _verify_record(small[f"{di}/RECORD"], digests, f"{di}/RECORD")
    meta_raw = small[f"{di}/METADATA"]
    msg = _parse_core_metadata(meta_raw, "METADATA")
    display = _check_name_version(msg, name, version, "METADATA")
    info = ArchiveInfo(kind="wheel", name=name, display_name=display, version=version, core_metadata=meta_raw)
    _metadata_fields(msg, info)
    return info


def zlib_error() -> type[Exception]:
    import zlib

    return zlib.error


def _dist_info_matches(folder: str, name: str, version: str) -> bool:
    stem = folder[: -len(".dist-info")]
    if "-" not in stem:
        return False
    n, v = stem.rsplit("-", 1)
    try:
        return canonicalize_name(n) == name and str(Version(v)) == version
    except InvalidVersion:
        return False


def _verify_record(raw: bytes, digests: dict[str, tuple[str, int]], record_name: str) -> None:
    """Every file must be listed in RECORD with its sha256 and size, and every listed file must exist."""
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ArchiveError(f"unreadable RECORD: {exc}") from None
    listed: set[str] = set()
    unsigned = {record_name, record_name + ".jws", record_name + ".p7s"}
    for row in rows:
        if not row or not row[0]:
            continue
        if len(row) != 3:
            raise ArchiveError(f"malformed RECORD row {row!r}")
        path, hash_field, size_field = row
        path = posixpath.normpath(path)
        listed.add(path)
        if path in unsigned:
            continue
        if path not in digests:
            raise ArchiveError(f"RECORD lists {path!r}, which is not in the wheel")
        if not hash_field.startswith("sha256="):
            raise ArchiveError(f"RECORD entry for {path!r} lacks a sha256 hash")
        want = hash_field[len("sha256=") :]
        digest, size = digests[path]
        got = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
        if want.rstrip("=") != got:
            raise ArchiveError(f"RECORD hash mismatch for {path!r}")
        if size_field and size_field != str(size):
            raise ArchiveError(f"RECORD size mismatch for {path!r}")
    missing = sorted(set(digests) - listed - unsigned)
    if missing:
        raise ArchiveError(f"files not listed in RECORD: {missing[:5]}")


class _CountingReader(io.RawIOBase):
    """Wraps a decompressing stream; refuses to produce more than ``limit`` bytes."""

    def __init__(self, inner: IO[bytes], limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.inner.read(len(b))
        self.count += len(data)
        if self.count > self.limit:
            raise ArchiveError(f"archive expands to more than {self.limit} bytes", status=413)
        b[: len(data)] = data
        return len(data)


def inspect_sdist(fh: IO[bytes], filename: str, limits: Limits, compressed_size: int) -> ArchiveInfo:
    _kind, name, version = parse_dist_filename(filename)
    fh.seek(0)
    magic = fh.read(2)
    fh.seek(0)
    if magic != b"\x1f\x8b":
        raise ArchiveError("sdist is not a gzip-compressed tar archive")
    counting = _CountingReader(gzip.GzipFile(fileobj=fh, mode="rb"), limits.max_uncompressed_bytes)
    buffered = io.BufferedReader(counting, buffer_size=256 * 1024)
    budget = _Budget(limits)
    top: str | None = None
    members = 0
    seen: set[str] = set()
    file_digests: list[tuple[str, str]] = []
    small: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=buffered, mode="r|") as tar:
            for m in tar:
                members += 1
                if members > limits.max_members:
                    raise ArchiveError(f"archive has more than {limits.max_members} members")
                _check_member_name(m.name)
                if m.issym():
                    raise ArchiveError(f"archive member {m.name!r} is a symbolic link")
                if m.islnk():
                    raise ArchiveError(f"archive member {m.name!r} is a hard link")
                if m.ischr() or m.isblk() or m.isfifo() or m.isdev():
                    raise ArchiveError(f"archive member {m.name!r} is a device file or fifo")
                if not (m.isreg() or m.isdir()):
                    raise ArchiveError(f"archive member {m.name!r} has an unsupported type")
                norm = posixpath.normpath(m.name)
                if norm in seen and m.isreg():
                    raise ArchiveError(f"duplicate archive member {m.name!r}")
                seen.add(norm)
                first = norm.split("/", 1)[0]
                if top is None:
                    if not _sdist_top_matches(first, name, version):
                        raise ArchiveError(
                            f"sdist top-level folder {first!r} does not match {name}-{version}"
                        )
                    top = first
                elif first != top:
                    raise ArchiveError(f"sdist member {m.name!r} is outside the top-level folder {top!r}")
                if m.isdir():
                    continue
                if m.size > limits.max_member_bytes:
                    raise ArchiveError(
                        f"archive member {m.name!r} is larger than {limits.max_member_bytes} bytes", 413
                    )
                rel = norm[len(top) + 1 :] if norm != top else ""
                keep = (
                    rel in ("PKG-INFO", "pyproject.toml")
                    or rel in README_NAMES
                    or rel.lower().startswith("readme")
                )
                keep = keep and "/" not in rel and m.size <= SMALL_FILE_LIMIT
                stream = tar.extractfile(m)
                if stream is None:
                    raise ArchiveError(f"unreadable archive member {m.name!r}")
                digest, _size, data = _read_member(stream, m.name, limits.max_member_bytes, budget, keep)
                if rel != "PKG-INFO":
                    file_digests.append((rel, digest))
                if keep:
                    small[rel] = data
    except ArchiveError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib_error()) as exc:
        raise ArchiveError(f"not a valid sdist (tar.gz) archive: {exc}") from None
    if counting.count >= limits.ratio_check_min_bytes:
        ratio = counting.count / max(compressed_size, 1)
        if ratio > limits.max_compression_ratio:
            raise ArchiveError(
                f"archive has compression ratio {ratio:.0f} (limit {limits.max_compression_ratio:.0f}): "
                "refusing a possible decompression bomb"
            )
    if top is None or "PKG-INFO" not in small:
        raise ArchiveError("sdist lacks a top-level PKG-INFO")
    msg = _parse_core_metadata(small["PKG-INFO"], "PKG-INFO")
    display = _check_name_version(msg, name, version, "PKG-INFO")
    info = ArchiveInfo(kind="sdist", name=name, display_name=display, version=version)
    _metadata_fields(msg, info)
    h = hashlib.sha256()
    for rel, digest in sorted(file_digests):
        h.update(f"{rel}\0{digest}\n".encode())
    info.content_hash = "sha256:" + h.hexdigest()
    if "pyproject.toml" in small:
        _apply_pyproject(small, info)
    if not info.readme:
        for cand in README_NAMES:
            if cand in small:
                info.readme = small[cand].decode("utf-8", "replace")
                info.readme_content_type = "text/markdown" if cand.endswith(".md") else "text/plain"
                break
    return info


def _sdist_top_matches(folder: str, name: str, version: str) -> bool:
    if "-" not in folder:
        return False
    n, v = folder.rsplit("-", 1)
    try:
        return canonicalize_name(n) == name and str(Version(v)) == version
    except InvalidVersion:
        return False


def _apply_pyproject(small: dict[str, bytes], info: ArchiveInfo) -> None:
    try:
        data = tomllib.loads(small["pyproject.toml"].decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ArchiveError(f"invalid pyproject.toml: {exc}") from None
    project = data.get("project") or {}
    _check_pyproject_requirements(data)
    if isinstance(project, dict):
        pname = project.get("name")
        if isinstance(pname, str) and canonicalize_name(pname) != info.name:
            raise ArchiveError(f"pyproject.toml names {pname!r}, but the upload is {info.name!r}")
        kws = project.get("keywords")
        if isinstance(kws, list):
            info.tags = list(dict.fromkeys([*info.tags, *[str(k) for k in kws]]))
        readme = project.get("readme")
        path = (
            readme if isinstance(readme, str) else (readme.get("file") if isinstance(readme, dict) else None)
        )
        if isinstance(path, str) and path in small and not info.readme:
            info.readme = small[path].decode("utf-8", "replace")
            info.readme_content_type = "text/markdown" if path.lower().endswith(".md") else "text/plain"
    tool = (data.get("tool") or {}).get("verifiers") or {}
    if isinstance(tool, dict):
        tags = tool.get("tags")
        if isinstance(tags, list):
            info.tags = list(dict.fromkeys([*info.tags, *[str(t) for t in tags]]))
        ev = tool.get("eval")
        if isinstance(ev, dict):
            info.eval_defaults = json.loads(json.dumps(ev, default=str))
        if "environments" in tool:
            info.environments = hub_environments(tool["environments"])


MAX_HUB_ENVIRONMENTS = 64
"""At most this many entries in ``[tool.verifiers] environments``."""


def hub_environments(raw: object) -> list[str]:
    """``[tool.verifiers] environments`` of an sdist's pyproject.toml, checked: the environments this
    one loads by id (a group or mixture of them), as requirements (``"wordle"``, ``"math-problems>=0.2"``).
    They are *hub-only* dependencies: whoever installs or checks the release takes them from the same
    owner on this hub, never from a public index (where a stranger may hold any of the names), and a
    plain ``pip install`` of the package does not see them. So only a bare name and a version
    specifier are accepted: no URL, no extras, no environment markers."""
    where = "pyproject.toml [tool.verifiers] environments"
    if not isinstance(raw, list):
        raise ArchiveError(f"{where} must be a list of environment names (with optional version specifiers)")
    if len(raw) > MAX_HUB_ENVIRONMENTS:
        raise ArchiveError(f"{where} names {len(raw)} environments; at most {MAX_HUB_ENVIRONMENTS} are allowed")
    out: list[str] = []
    seen: set[str] = set()
    for item in raw:
        req = check_requirement(item, where)
        if req.extras or req.marker is not None:
            raise ArchiveError(f"{where} entry {str(item)[:200]!r} has extras or a marker; give a name and an optional version specifier")
        name = canonicalize_name(req.name)
        if name in seen:
            raise ArchiveError(f"{where} names {name!r} twice")
        seen.add(name)
        out.append(f"{name}{req.specifier}")
    return out


def _check_pyproject_requirements(data: dict[str, Any]) -> None:
    """The sdist's own requirement lists (what a build from it would use) take no direct references
    either: ``[project].dependencies``, ``[project.optional-dependencies]``, ``[build-system].requires``."""
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    lists: list[tuple[str, Any]] = [("pyproject.toml [project].dependencies", project.get("dependencies"))]
    optional = project.get("optional-dependencies")
    if isinstance(optional, dict):
        lists += [(f"pyproject.toml [project.optional-dependencies].{k}", v) for k, v in optional.items()]
    build = data.get("build-system") if isinstance(data.get("build-system"), dict) else {}
    lists.append(("pyproject.toml [build-system].requires", build.get("requires")))
    for where, items in lists:
        if items is None:
            continue
        if not isinstance(items, list):
            raise ArchiveError(f"{where} must be a list of requirements")
        for raw in items:
            check_requirement(raw, where)


def normalise_tags(tags: list[str]) -> list[str]:
    """Lower-case, dash-separated, de-duplicated tags (at most 20 of at most 64 characters)."""
    out: list[str] = []
    for t in tags:
        t = "-".join(t.strip().lower().replace("_", "-").split())
        t = "".join(c for c in t if c.isalnum() or c in "-.+")
        if t and len(t) <= 64 and t not in out:
            out.append(t)
    return out[:20]


def inspect_upload(fh: IO[bytes], filename: str, size: int, limits: Limits) -> ArchiveInfo:
    """Validate one uploaded distribution (the temp file ``fh``) and read its metadata."""
    if size > limits.max_file_bytes:
        raise ArchiveError(f"file is larger than {limits.max_file_bytes} bytes", status=413)
    if size == 0:
        raise ArchiveError("empty file")
    kind, _name, _version = parse_dist_filename(filename)
    fh.seek(0)
    info = (
        inspect_wheel(fh, filename, limits) if kind == "wheel" else inspect_sdist(fh, filename, limits, size)
    )
    info.tags = normalise_tags(info.tags)
    fh.seek(0)
    return info


