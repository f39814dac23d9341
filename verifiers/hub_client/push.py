"""``vf push``: validate an environment package, build it with the standard front end, upload it.

The package is built from a *staged copy* of its folder that holds only what may be published:
files matched by ``.gitignore`` files, build outputs, caches, virtual environments, result folders
and anything that looks like a secret (``.env``, private keys, ``.netrc`` ...) are left out before the
build backend ever sees them, and the built archives are checked again before upload.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.hub_client.api import EnvRef, HubClient, HubClientError
from verifiers.ids import ENTRY_POINT_GROUP, canonical_name, module_name_for, parse_env_id
from verifiers.utils.env_loading import declared_entry_points, split_target

README_NAMES = ("README.md", "README.rst", "README.txt", "README")

# Never published, whatever .gitignore says: tooling state, build outputs and run results.
ALWAYS_EXCLUDED_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".pytest_cache",
    ".ruff_cache", ".mypy_cache", ".ipynb_checkpoints", "build", "dist", "outputs", "runs",
    "wandb", ".idea", ".vscode", "node_modules", ".aws", ".ssh", ".gnupg",
}
ALWAYS_EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".swp")
# Files that hold credentials. Matched on the file name (glob), case-insensitively.
SECRET_PATTERNS = (
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.kdbx", "id_rsa*", "id_dsa*",
    "id_ecdsa*", "id_ed25519*", ".netrc", "_netrc", ".pypirc", ".npmrc", ".git-credentials",
    "credentials", "credentials.json", "*.token", ".dockercfg", "secrets.toml", "secrets.json",
)
SECRET_ALLOWED = (".env.example", ".env.sample", ".env.template")
BUMPS = ("patch", "minor", "major", "rc", "post")


@dataclass
class PackageInfo:
    root: Path
    name: str  # as written in pyproject
    version: str
    module: str
    pyproject: dict[str, Any]
    attr: str = "load_environment"  # the factory: the entry point's target, else load_environment
    entry_points: dict[str, str] = field(default_factory=dict)  # verifiers.environments, as declared


@dataclass
class BuildResult:
    wheel: Path
    sdist: Path
    content_hash: str
    files: list[str] = field(default_factory=list)  # relative paths staged for the build
    left_out_secrets: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ validation
def read_package(root: Path) -> PackageInfo:
    root = root.resolve()
    if not root.is_dir():
        raise HubClientError(f"{root} is not a folder")
    pp = root / "pyproject.toml"
    if not pp.is_file():
        raise HubClientError(f"{root} has no pyproject.toml", hint="vf init NAME scaffolds an environment package")
    try:
        data = tomllib.loads(pp.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HubClientError(f"pyproject.toml is not valid TOML: {exc}") from None
    project = data.get("project") or {}
    name, version = project.get("name"), project.get("version")
    if not isinstance(name, str) or not name:
        raise HubClientError("pyproject.toml has no [project] name")
    if not isinstance(version, str) or not version:
        if "version" in (project.get("dynamic") or []):
            raise HubClientError("a dynamic version is not supported: write [project] version in pyproject.toml")
        raise HubClientError("pyproject.toml has no [project] version")
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        raise HubClientError(f"version {version!r} is not a valid PEP 440 version") from None
    if not any((root / n).is_file() for n in README_NAMES):
        raise HubClientError(f"{root} has no README.md", hint="describe the task, reward and arguments in README.md")
    declared = declared_entry_points(data)
    module, attr = module_name_for(name), "load_environment"
    for key, target in declared.items():  # the entry point naming this package says where the factory is
        if _valid_id(key) and canonical_name(parse_env_id(key).name) == canonical_name(name):
            module, attr = split_target(target)
            break
    return PackageInfo(root, name, version, module, data, attr, declared)


def _valid_id(text: str) -> bool:
    try:
        parse_env_id(text)
        return True
    except ValueError:
        return False


def check_entry_points(pkg: PackageInfo, owner: str | None, *, v1: bool = False) -> list[str]:
    """Check the package's ``verifiers.environments`` entry points; return warnings, raise on errors.

    Each name must be ``name`` or ``owner/name`` for this package (``owner`` the one publishing it)
    and each target ``module:function``. A classic package without any is still publishable (the
    loader falls back to its module name) but gets a warning saying what to add; a v1 package
    (``v1``: its ``__all__`` lists a Taskset) has none by design.
    """
    example = f'[project.entry-points."{ENTRY_POINT_GROUP}"] "{canonical_name(pkg.name)}" = "{pkg.module}:load_environment"'
    if not pkg.entry_points:
        if v1:
            return []
        return [f"pyproject.toml declares no {ENTRY_POINT_GROUP} entry point; the loader will look for "
                f"the module {pkg.module!r}. Add: {example}"]
    for key, target in pkg.entry_points.items():
        try:
            parsed = parse_env_id(key)
        except ValueError:
            raise HubClientError(f"entry point {key!r} is not an environment id (name or owner/name)") from None
        if parsed.version:
            raise HubClientError(f"entry point {key!r} names a version; versions come from [project] version")
        if canonical_name(parsed.name) != canonical_name(pkg.name):
            raise HubClientError(f"entry point {key!r} does not name this package ({pkg.name!r})", hint=example)
        if parsed.owner and owner and canonical_name(parsed.owner) != canonical_name(owner):
            raise HubClientError(f"entry point {key!r} claims owner {parsed.owner!r}, but this push publishes as {owner!r}")
        module, _, attr = target.partition(":")
        if not (module and attr and all(p.isidentifier() for p in [*module.split("."), *attr.split(".")])):
            raise HubClientError(f"entry point {key!r} = {target!r}: expected 'module:function'", hint=example)
    if len(set(pkg.entry_points.values())) > 1:
        raise HubClientError(f"the {ENTRY_POINT_GROUP} entry points of {pkg.name} name different functions: "
                             f"{sorted(set(pkg.entry_points.values()))}")
    return []


def check_importable(pkg: PackageInfo, *, timeout: float = 180.0) -> str:
    """Import the module in a fresh interpreter and check it defines the factory (``load_environment``
    or the entry point's target), or is a v1 package (exactly one ``Taskset`` subclass in its
    ``__all__``). Returns ``"classic"`` or ``"v1"``."""
    search = [str(pkg.root / "src"), str(pkg.root)]
    code = (
        "import sys, importlib\n"
        f"sys.path[:0] = {search!r}\n"
        f"m = f = importlib.import_module({pkg.module!r})\n"
        f"for part in {pkg.attr.split('.')!r}:\n"
        "    f = getattr(f, part, None)\n"
        "if callable(f):\n"
        "    sys.exit(0)\n"
        f"if {pkg.attr == 'load_environment'!r} and 'verifiers.v1' in sys.modules:\n"
        "    from verifiers.v1.loading import v1_taskset_class\n"
        "    try:\n"
        "        found = v1_taskset_class(m)\n"
        "    except Exception as exc:\n"
        "        print(exc, file=sys.stderr)\n"
        "        sys.exit(5)\n"
        "    sys.exit(4 if found is not None else 3)\n"
        "sys.exit(3)\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              cwd=pkg.root)
    except subprocess.TimeoutExpired:
        raise HubClientError(f"importing {pkg.module} took more than {timeout:.0f}s") from None
    if proc.returncode == 3:
        raise HubClientError(
            f"module {pkg.module} has no {pkg.attr}() function"
            + (" (a classic environment) and its __all__ lists no Taskset subclass (a v1 package)"
               if pkg.attr == "load_environment" else "")
        )
    if proc.returncode == 5:
        last = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise HubClientError(f"module {pkg.module} is a v1 package that breaks the convention: {last}")
    if proc.returncode == 4:
        return "v1"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise HubClientError(f"cannot import module {pkg.module}: {last}")
    return "classic"


def check_conformance(pkg: PackageInfo, *, timeout: float = 900.0) -> dict[str, Any]:
    """Run ``vf check PATH --json`` in a fresh interpreter (as the hub's sandboxed check does) and
    return its verdict; HubClientError naming the failed checks when it did not pass."""
    import json

    cmd = [sys.executable, "-m", "verifiers.cli", "check", str(pkg.root), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=pkg.root)
    except subprocess.TimeoutExpired:
        raise HubClientError(f"vf check {pkg.root} took more than {timeout:.0f}s",
                             hint="run it yourself to see where it hangs, or push with --no-check") from None
    try:
        verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HubClientError(f"vf check {pkg.root} did not give a verdict: {last}") from None
    if not verdict.get("ok"):
        failed = [f"{c['name']} ({c.get('detail', '')[:160]})" for c in verdict.get("checks", [])
                  if not c.get("ok") and not c.get("skipped")]
        raise HubClientError(
            f"{pkg.name} {pkg.version} failed the conformance check: " + "; ".join(failed or ["no rollout ran"]),
            hint=f"vf check {pkg.root} shows the whole report; push with --no-check to publish anyway",
        )
    return verdict


# ----------------------------------------------------------------------------------------- bump
def bumped(version: str, how: str) -> str:
    """The next version: ``patch`` 1.2.3 -> 1.2.4, ``minor`` -> 1.3.0, ``major`` -> 2.0.0,
    ``rc`` 1.2.3 -> 1.2.4rc1 (1.2.4rc1 -> 1.2.4rc2), ``post`` 1.2.3 -> 1.2.3.post1."""
    from packaging.version import Version

    v = Version(version)
    major, minor, micro = ([*list(v.release), 0, 0, 0])[:3]
    if how == "patch":
        return f"{major}.{minor}.{micro}" if v.pre else f"{major}.{minor}.{micro + 1}"
    if how == "minor":
        return f"{major}.{minor + 1}.0"
    if how == "major":
        return f"{major + 1}.0.0"
    if how == "rc":
        if v.pre and v.pre[0] == "rc":
            return f"{major}.{minor}.{micro}rc{v.pre[1] + 1}"
        return f"{major}.{minor}.{micro + 1}rc1"
    if how == "post":
        base = v.base_version
        return f"{base}.post{(v.post or 0) + 1}"
    raise HubClientError(f"unknown bump {how!r}: choose one of {', '.join(BUMPS)}")


def write_version(pkg: PackageInfo, new_version: str, root: Path | None = None) -> None:
    """Rewrite ``version = "..."`` in the [project] table of ``root/pyproject.toml`` (default: the
    package's own), leaving the rest of the file as it is."""
    path = (root or pkg.root) / "pyproject.toml"
    text = path.read_text()
    out, in_project, done = [], False, False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            in_project = stripped == "[project]"
        if in_project and not done and re.match(r"^\s*version\s*=", line):
            line = re.sub(r"""(=\s*)(["']).*?\2""", lambda m: f'{m.group(1)}"{new_version}"', line, count=1)
            done = True
        out.append(line)
    if not done:
        raise HubClientError("could not find [project] version in pyproject.toml to bump")
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text("".join(out))
    os.replace(tmp, path)
    if root is None:
        pkg.version = new_version


# -------------------------------------------------------------------------------------- staging
def _is_secret(name: str) -> bool:
    from fnmatch import fnmatch

    low = name.lower()
    if low in SECRET_ALLOWED:
        return False
    return any(fnmatch(low, pat) for pat in SECRET_PATTERNS)


def _gitignore_specs(root: Path) -> list[tuple[Path, Any]]:
    import pathspec

    specs = []
    for gi in sorted(root.rglob(".gitignore")):
        if any(part in ALWAYS_EXCLUDED_DIRS for part in gi.relative_to(root).parts[:-1]):
            continue
        try:
            lines = gi.read_text().splitlines()
        except OSError:
            continue
        specs.append((gi.parent, pathspec.GitIgnoreSpec.from_lines(lines)))
    return specs


def publishable_files(root: Path) -> tuple[list[str], list[str]]:
    """(files to publish, secret-looking files left out), as sorted relative POSIX paths."""
    specs = _gitignore_specs(root)
    keep: list[str] = []
    secrets: list[str] = []

    def ignored(path: Path, is_dir: bool) -> bool:
        for base, spec in specs:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(rel + "/" if is_dir else rel):
                return True
        return False

    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(
            n for n in dirnames
            if n not in ALWAYS_EXCLUDED_DIRS and not n.endswith(ALWAYS_EXCLUDED_SUFFIXES)
            and not (d / n).is_symlink() and not ignored(d / n, True)
        )
        for n in sorted(filenames):
            p = d / n
            rel = p.relative_to(root).as_posix()
            if n.endswith(ALWAYS_EXCLUDED_SUFFIXES) or p.is_symlink() or not p.is_file():
                continue
            if _is_secret(n):
                secrets.append(rel)
                continue
            if ignored(p, False):
                continue
            keep.append(rel)
    return keep, secrets


def content_hash_of_sdist(sdist: Path) -> str:
    """The hub's content hash: sha256 over sorted ``path\\0sha256(file)`` lines of the sdist's
    files (paths below the top folder, PKG-INFO excluded) — the same value the hub computes."""
    digests = []
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            parts = m.name.split("/", 1)
            if len(parts) < 2 or parts[1] == "PKG-INFO":
                continue
            stream = tar.extractfile(m)
            assert stream is not None
            digests.append((parts[1], hashlib.sha256(stream.read()).hexdigest()))
    h = hashlib.sha256()
    for rel, digest in sorted(digests):
        h.update(f"{rel}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()


def _backend_available(pyproject: dict[str, Any]) -> bool:
    """True when the build requirements are importable here (then build without isolation: fast and
    offline); otherwise ``build`` creates an isolated environment and installs them."""
    import importlib.util

    from packaging.requirements import InvalidRequirement, Requirement

    requires = (pyproject.get("build-system") or {}).get("requires") or ["setuptools"]
    for req in requires:
        try:
            name = Requirement(req).name
        except InvalidRequirement:
            return False
        if importlib.util.find_spec(name.replace("-", "_")) is None:
            return False
    return True


def build(pkg: PackageInfo, workdir: Path, *, version: str | None = None) -> BuildResult:
    """Stage the publishable files and build the sdist and wheel with ``python -m build``.

    ``version`` overrides the version in the *staged* pyproject.toml only (``vf push --bump`` writes
    the user's file once the hub has accepted the upload)."""
    files, secrets = publishable_files(pkg.root)
    stage = workdir / "src"
    for rel in files:
        dst = stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pkg.root / rel, dst)
    if version is not None:
        write_version(pkg, version, root=stage)
    out = workdir / "dist"
    cmd = [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(stage)]
    if _backend_available(pkg.pyproject):
        cmd.insert(3, "--no-isolation")
    env = dict(os.environ, SOURCE_DATE_EPOCH=os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "?")
        raise HubClientError(f"the package does not build: {reason.strip()}",
                             hint="run `python -m build` in the package folder to see the whole log")
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise HubClientError(f"the build made {len(wheels)} wheel(s) and {len(sdists)} sdist(s), expected one each")
    for archive in (wheels[0], sdists[0]):
        leaked = [n for n in _archive_names(archive) if _is_secret(n.rsplit("/", 1)[-1])]
        if leaked:
            raise HubClientError(f"refusing to upload {archive.name}: it contains secret-looking files {leaked[:3]}")
    return BuildResult(wheels[0], sdists[0], content_hash_of_sdist(sdists[0]), files, secrets)


def _archive_names(path: Path) -> list[str]:
    if path.suffix == ".whl":
        import zipfile

        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    with tarfile.open(path, "r:gz") as tar:
        return tar.getnames()


# -------------------------------------------------------------------------------------- publish
@dataclass
class PushOutcome:
    ref: EnvRef
    status: str  # "published" | "unchanged"
    page_url: str
    install: str
    build: BuildResult


def push(client: HubClient, path: Path, *, owner: str | None = None, private: bool | None = None,
         bump: str | None = None, check_import: bool = True, check: bool = True,
         progress: Callable[[int, int], Any] | None = None,
         log: Callable[[str], None] = lambda _m: None) -> PushOutcome:
    """Validate, check, build and publish the package at ``path``. Identical content is a no-op;
    different content under an existing version is refused with the hint to bump.

    ``check`` runs the conformance checker (``vf check``) before anything is built or uploaded.
    """
    from packaging.utils import canonicalize_name

    pkg = read_package(path)
    if owner is None:
        owner = client.whoami()["name"]
    kind = check_importable(pkg) if check_import else None
    for warning in check_entry_points(pkg, owner, v1=kind == "v1"):
        log(f"warning: {warning}")
    dist = canonicalize_name(pkg.name)
    # A bump is applied to the staged copy that is built; pyproject.toml is rewritten only once the
    # hub has accepted the upload, so a refused push (read-only token, 409, network) changes nothing.
    version = bumped(pkg.version, bump) if bump else pkg.version
    ref = EnvRef(owner, dist, version)
    if check:  # every message names the version being published, not the one pyproject.toml still has
        log(f"checking {pkg.name} {version}" + (f" (bumped from {pkg.version})" if bump else "") + " (vf check) ...")
        check_conformance(pkg)

    def accepted(status: str, result: BuildResult) -> PushOutcome:
        if bump:
            write_version(pkg, version)
            log(f"version bumped to {version} in pyproject.toml")
        return PushOutcome(ref, status, page, f"vf install {owner}/{dist}@{version}", result)

    page = f"{client.config.url}/{owner}/{dist}"
    with tempfile.TemporaryDirectory(prefix="vf-push-") as tmp:
        result = build(pkg, Path(tmp), version=version if bump else None)
        for s in result.left_out_secrets:
            log(f"left out (looks like a secret): {s}")
        existing = client.version_or_none(ref, version)
        if existing is not None:
            if existing.get("content_hash") == result.content_hash:
                have = {f["kind"] for f in existing.get("files", [])}
                if {"wheel", "sdist"} <= have:
                    return accepted("unchanged", result)
            else:
                raise HubClientError(
                    f"{owner}/{dist} {version} is already published with different content",
                    hint="versions are immutable: bump it (vf push --bump patch) and push again",
                    status=409,
                )
        paths = [result.sdist, result.wheel]
        total = sum(p.stat().st_size for p in paths)
        sent = 0

        def on_bytes(n: int) -> None:
            nonlocal sent
            sent += n
            if progress:
                progress(min(sent, total), total)

        try:
            client.publish(owner, dist, paths, private=private, progress=on_bytes)
        except HubClientError as exc:
            if exc.status == 409:
                raise HubClientError(
                    f"{owner}/{dist} {version}: {exc.message}", hint=_conflict_hint(exc.message, owner, dist, private),
                    status=409,
                ) from None
            raise
        return accepted("published", result)


def _conflict_hint(message: str, owner: str, dist: str, private: bool | None) -> str:
    """The next step after the hub refused an upload (409): a visibility that disagrees is changed
    with ``vf visibility`` (a new version would be refused the same way); only a version conflict
    is solved by bumping."""
    if private is not None and "visibility" in message:
        wanted = "private" if private else "public"
        return (f"vf visibility {owner}/{dist} {wanted} changes it (every version goes with it), then push "
                f"again; or push without --{wanted}")
    return "versions are immutable: bump it (vf push --bump patch) and push again"
