"""The loader: from an environment id or path to a ready environment (``vf.load_environment``).

Every way of loading goes through here: ``vf.load_environment``, ``vf eval``, ``vf check``,
``vf train``'s config, ``vf install`` (to confirm what it installed is found) and ``EnvGroup``
members named by id. Ids and paths are read by :mod:`verifiers.ids`; this module only finds and
imports.

Finding an id, first match wins:

1. an **entry point** in the ``verifiers.environments`` group named ``owner/name`` or ``name``
   (``my-env = "my_env:load_environment"`` in ``[project.entry-points."verifiers.environments"]``,
   written by ``vf init``), as installed packages advertise plugins everywhere in Python;
2. the **module** named after the environment (``my-env`` -> ``my_env``), for packages without an
   entry point (the classic convention);
3. for a bare ``name`` only, a package folder under one of the caller's ``search_dirs``
   (``vf eval`` passes ``./environments``).

An ``owner/name[@version]`` that is missing, or installed at another version than the one pinned,
is installed by a registered *installer* when the caller allows it (``install=True`` or
``VF_AUTO_INSTALL=1``). The loader knows no installer itself: the hub client registers one
(:func:`register_installer`, or the ``verifiers.installers`` entry-point group), so the SDK never
imports the hub client and the hub client may import the loader without a cycle.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.errors import EnvironmentNotFoundError, MissingKeyError
from verifiers.ids import (
    ENTRY_POINT_GROUP,
    EnvId,
    canonical_name,
    entry_point_names,
    format_env_id,
    module_name_for,
    parse_env_id,
    parse_env_spec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "INSTALLER_GROUP",
    "EnvId",
    "EnvSource",
    "Installer",
    "annotate",
    "ensure_keys",
    "format_env_id",
    "import_factory",
    "install_environment",
    "load",
    "load_environment",
    "locate",
    "module_name_for",
    "parse_env_id",
    "register_installer",
    "resolve",
    "split_target",
    "unregister_installer",
]

logger = logging.getLogger(__name__)

#: Entry-point group of installers (``hub = "verifiers.hub_client.hook:install_for_loader"``).
INSTALLER_GROUP = "verifiers.installers"

#: ``installer(env_id)`` installs ``env_id.key`` at ``env_id.version`` (None: the latest) into the
#: running interpreter's environment, or raises EnvironmentNotFoundError saying why it could not.
Installer = Callable[[EnvId], None]

_INSTALLERS: list[Installer] = []


# ------------------------------------------------------------------------------------ installers
def register_installer(installer: Installer) -> Installer:
    """Let the loader install missing ``owner/name`` environments with ``installer`` (idempotent).

    Returns ``installer``, so it also works as a decorator.
    """
    if installer not in _INSTALLERS:
        _INSTALLERS.append(installer)
    return installer


def unregister_installer(installer: Installer) -> None:
    if installer in _INSTALLERS:
        _INSTALLERS.remove(installer)


def _installers() -> list[Installer]:
    found = list(_INSTALLERS)
    from importlib.metadata import entry_points

    for ep in entry_points(group=INSTALLER_GROUP):
        try:
            fn = ep.load()
        except Exception as exc:  # a broken plugin must not hide the others
            logger.warning("installer entry point %s = %s failed to load: %s", ep.name, ep.value, exc)
            continue
        if fn not in found:
            found.append(fn)
    return found


def install_environment(env_id: EnvId) -> None:
    """Install ``env_id`` with the first installer that can; EnvironmentNotFoundError if none can."""
    installers = _installers()
    if not installers:
        raise EnvironmentNotFoundError(
            f"cannot install {env_id}: no installer is registered. Install it with `vf install {env_id}`, "
            "or import verifiers.hub_client (it registers the hub's installer). The verifiers distribution "
            f"declares that installer as a {INSTALLER_GROUP} entry point: a source checkout installed "
            "before it existed needs `pip install -e .` again."
        )
    reasons = []
    for installer in installers:
        try:
            installer(env_id)
            return
        except EnvironmentNotFoundError as exc:
            reasons.append(str(exc))
    raise EnvironmentNotFoundError("; ".join(reasons))


def _auto_install_allowed(install: bool | None) -> bool:
    if install is not None:
        return install
    return os.environ.get("VF_AUTO_INSTALL", "").strip().lower() in ("1", "true", "yes", "on")


# -------------------------------------------------------------------------------------- finding
@dataclass
class EnvSource:
    """Where an environment's factory lives, found without importing it.

    ``kind``: ``entry_point`` (an installed package's entry point), ``module`` (the module named
    after the environment), ``folder`` (a package folder) or ``file`` (a ``.py`` file).
    """

    env_id: str  # the name set on ``env.env_id``
    kind: str
    module: str
    attr: str = "load_environment"
    path: Path | None = None  # the .py file, or the folder put on sys.path
    pyproject: Path | None = None  # the package's pyproject.toml when one is on disk
    version: str | None = None
    requested: EnvId | None = None  # the id asked for (None for paths)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.attr}"


def _entry_points() -> dict[str, list[Any]]:
    """Canonical entry-point name -> the entry points of the ``verifiers.environments`` group."""
    from importlib.metadata import entry_points

    table: dict[str, list[Any]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(canonical_name(ep.name), []).append(ep)
    return table


def _entry_point(table: dict[str, list[Any]], name: str) -> Any:
    """The entry point named ``name``; an error when installed packages disagree about it."""
    found = table.get(canonical_name(name)) or []
    targets = {ep.value.replace(" ", "") for ep in found}
    if len(targets) > 1:
        claims = ", ".join(f"{_dist_name(ep)} ({ep.value})" for ep in found)
        raise EnvironmentNotFoundError(f"installed packages disagree about the environment {name!r}: {claims}; uninstall one")
    return found[0] if found else None


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return (dist.metadata["Name"] if dist is not None else None) or "?"


def split_target(value: str) -> tuple[str, str]:
    """``"pkg.mod:attr"`` -> ``("pkg.mod", "attr")`` (attr defaults to ``load_environment``)."""
    module, _, attr = value.strip().partition(":")
    return module.strip(), (attr.strip() or "load_environment")


def locate(spec: str | EnvId | os.PathLike[str], *, search_dirs: Sequence[Path] = ()) -> EnvSource:
    """Find what ``spec`` names without importing it; EnvironmentNotFoundError when nothing does.

    ValueError when ``spec`` is neither an id nor a path.
    """
    parsed = _parse(spec)
    if isinstance(parsed, Path):
        return _locate_path(parsed)
    table = _entry_points()
    for name in entry_point_names(parsed.owner, parsed.name):
        ep = _entry_point(table, name)
        if ep is not None:
            module, attr = split_target(ep.value)
            dist = getattr(ep, "dist", None)
            return EnvSource(
                env_id=parsed.name,
                kind="entry_point",
                module=module,
                attr=attr,
                pyproject=_pyproject_near(module, {_dist_name(ep), parsed.name}, search_dirs),
                version=dist.version if dist is not None else None,
                requested=parsed,
            )
    module = parsed.module
    if _find_spec(module) is not None:
        return EnvSource(
            env_id=parsed.name,
            kind="module",
            module=module,
            pyproject=_pyproject_near(module, {parsed.name}, search_dirs),
            version=_installed_version(module, parsed.name),
            requested=parsed,
        )
    if parsed.owner is None:  # a hub id is never taken from a local folder of the same name
        for base in search_dirs:
            for folder in dict.fromkeys((parsed.name, module, parsed.name.replace("_", "-"))):
                if (base / folder / "pyproject.toml").is_file():
                    source = _locate_path(base / folder)
                    source.requested = parsed
                    return source
    raise EnvironmentNotFoundError(
        f"environment {str(parsed)!r} is not installed: no {ENTRY_POINT_GROUP} entry point named "
        f"{parsed.key!r} and no module named {module!r}. Install its package "
        f"(e.g. `vf install {parsed.key if parsed.owner else 'OWNER/' + parsed.name}` or "
        f"`pip install -e environments/{parsed.name}`)."
    )


def _parse(spec: str | EnvId | os.PathLike[str]) -> EnvId | Path:
    if isinstance(spec, EnvId | Path):
        return spec
    if isinstance(spec, os.PathLike):
        return Path(spec)
    return parse_env_spec(spec)


def _find_spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module.split(".", 1)[0])
    except (ImportError, ValueError):
        return None


def _locate_path(path: Path) -> EnvSource:
    path = path.expanduser()
    if not path.exists():
        raise EnvironmentNotFoundError(f"no environment at {path}: the path does not exist")
    path = path.resolve()
    if path.is_file():
        if path.suffix != ".py":
            raise EnvironmentNotFoundError(f"{path} is not a .py file or a package folder")
        pyproject = _matching_pyproject([path.parent], {path.stem})
        data = _read_pyproject(pyproject) if pyproject else {}
        return EnvSource(
            env_id=path.stem.replace("_", "-"),
            kind="file",
            module=path.stem,
            path=path,
            pyproject=pyproject,
            version=(data.get("project") or {}).get("version"),
        )
    pyproject_path = path / "pyproject.toml"
    data = _read_pyproject(pyproject_path) if pyproject_path.is_file() else {}
    project = data.get("project") or {}
    name = project.get("name") or path.name
    root = path / "src" if (path / "src").is_dir() else path
    declared = declared_entry_points(data)
    if declared:
        # The package says where its factory is: the entry point named after it, else its only one.
        chosen = next((v for k, v in declared.items() if canonical_name(k) == canonical_name(name)), None)
        if chosen is None and len(set(declared.values())) == 1:
            chosen = next(iter(declared.values()))
        if chosen is None:
            raise EnvironmentNotFoundError(
                f"{pyproject_path} declares {ENTRY_POINT_GROUP} entry points {sorted(declared)} but none named {name!r}"
            )
        module, attr = split_target(chosen)
    else:
        module, attr = module_name_for(name), "load_environment"
        if not ((root / f"{module}.py").is_file() or (root / module / "__init__.py").is_file()):
            if (path / "__init__.py").is_file():  # the folder is itself the package
                module, root = path.name, path.parent
            else:
                candidates = sorted(p.stem for p in path.glob("*.py") if p.stem not in ("setup", "conftest"))
                if len(candidates) != 1:
                    raise EnvironmentNotFoundError(
                        f"{path} has no module {module}.py (or {module}/__init__.py) and no "
                        f"{ENTRY_POINT_GROUP} entry point in its pyproject.toml"
                    )
                module = candidates[0]
    return EnvSource(
        env_id=canonical_name(name),
        kind="folder",
        module=module,
        attr=attr,
        path=root,
        pyproject=pyproject_path if pyproject_path.is_file() else None,
        version=project.get("version"),
    )


def declared_entry_points(pyproject: Mapping[str, Any]) -> dict[str, str]:
    """The ``verifiers.environments`` entry points a parsed pyproject.toml declares (name -> target)."""
    table = ((pyproject.get("project") or {}).get("entry-points") or {}).get(ENTRY_POINT_GROUP) or {}
    return {str(k): str(v) for k, v in table.items()} if isinstance(table, Mapping) else {}


def _read_pyproject(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None


def _matching_pyproject(folders: Iterable[Path], names: set[str]) -> Path | None:
    """The first ``pyproject.toml`` in ``folders`` whose project is one of ``names``."""
    wanted = {canonical_name(n) for n in names if n}
    for folder in folders:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                name = (_read_pyproject(candidate).get("project") or {}).get("name", "")
            except ValueError:
                continue
            if canonical_name(str(name)) in wanted:
                return candidate
    return None


def _pyproject_near(module: str, names: set[str], search_dirs: Sequence[Path]) -> Path | None:
    """The pyproject.toml of an installed module when it is on disk (editable installs, local
    folders): beside the module, above it (flat and ``src/`` layouts), or under ``search_dirs``."""
    folders: list[Path] = []
    spec = _find_spec(module)
    if spec is not None and spec.origin:
        origin = Path(spec.origin).resolve()
        folders = [origin.parent, origin.parent.parent, origin.parent.parent.parent]
    top = module.split(".", 1)[0]
    for base in search_dirs:
        for n in (*names, top, top.replace("_", "-")):
            folders.append(base / n)
    return _matching_pyproject(folders, {*names, top})


def _installed_version(module: str, name: str) -> str | None:
    from importlib import metadata

    # By convention the distribution is named after the environment (not packages_distributions():
    # it reads every installed RECORD, ~1 s here, on each load).
    for candidate in dict.fromkeys((name, module, module.replace("_", "-"))):
        try:
            return metadata.version(candidate)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return getattr(sys.modules.get(module), "__version__", None)


def _same_version(a: str | None, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if a is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def resolve(
    spec: str | EnvId | os.PathLike[str], *, install: bool | None = None, search_dirs: Sequence[Path] = ()
) -> EnvSource:
    """:func:`locate`, installing a missing or wrongly versioned ``owner/name[@version]`` first when
    the caller allows it (``install=True`` or ``VF_AUTO_INSTALL=1``)."""
    parsed = _parse(spec)
    if isinstance(parsed, Path):
        return _locate_path(parsed)
    try:
        source: EnvSource | None = locate(parsed, search_dirs=search_dirs)
        missing: EnvironmentNotFoundError | None = None
    except EnvironmentNotFoundError as exc:
        source, missing = None, exc
    pinned = parsed.pinned_version
    # A module importable without distribution metadata (a folder on sys.path) is taken as is.
    wrong_version = source is not None and pinned is not None and source.version is not None and not _same_version(
        source.version, pinned
    )
    if parsed.owner and (source is None or wrong_version):
        if not _auto_install_allowed(install):
            have = f"version {source.version} is installed" if source is not None else "it is not installed"
            raise EnvironmentNotFoundError(
                f"environment {str(parsed)!r} is not available: {have}. Install it with `vf install {parsed}`, "
                "or allow installing from the hub (load_environment(..., install=True) or VF_AUTO_INSTALL=1)."
            )
        install_environment(EnvId(parsed.owner, parsed.name, pinned))
        importlib.invalidate_caches()
        stale = {parsed.module} | ({source.module.split(".", 1)[0]} if source is not None else set())
        for name in [m for m in sys.modules if m.split(".", 1)[0] in stale]:
            del sys.modules[name]  # another version was imported before: load the new one
        source = locate(parsed)
        if pinned is not None and source.version is not None and not _same_version(source.version, pinned):
            raise EnvironmentNotFoundError(
                f"environment {str(parsed)!r} is not available: version {source.version} is installed after installing"
            )
    elif wrong_version:
        assert source is not None
        raise EnvironmentNotFoundError(
            f"environment {str(parsed)!r} is not available: version {source.version} is installed. Install "
            f"version {pinned} of its package (e.g. `pip install '{parsed.name}=={pinned}'`), or name it by "
            f"its hub id (`vf install OWNER/{parsed.name}@{pinned}`)."
        )
    if source is None:
        assert missing is not None
        raise missing
    return source


# -------------------------------------------------------------------------------------- loading
def import_factory(source: EnvSource) -> Callable[..., Any]:
    """Import the environment's module and return its ``load_environment`` (or the named attribute)."""
    return factory_of(source, import_source(source))


def factory_of(source: EnvSource, module: Any) -> Callable[..., Any]:
    """The factory ``source`` names in the imported ``module``: its ``load_environment`` (or the
    named attribute), or for a v1 package the v1 loader's; EnvironmentNotFoundError if none."""
    factory = declared_factory(source, module)
    if is_v1_package(source, module):
        # a v1 package (a Taskset in __all__, no load_environment; it imported verifiers.v1, so
        # a classic package never gets here with anything more loaded): the v1 loader builds it
        from verifiers.v1.env import v1_factory

        factory = v1_factory(module, source.module)
    if not callable(factory):
        unexported = _unexported_v1_tasksets(module)
        if unexported:
            raise EnvironmentNotFoundError(
                f"module {source.module!r} defines the v1 taskset {unexported[0]} but does not export it: a v1 "
                f"taskset package lists its Taskset subclass in __all__ (e.g. __all__ = [{unexported[0]!r}]); a "
                "classic environment defines load_environment()"
            )
        raise EnvironmentNotFoundError(
            f"module {source.module!r} ({getattr(module, '__file__', '?')}) has no {source.attr}() function"
        )
    return factory


def _unexported_v1_tasksets(module: Any) -> list[str]:
    """Names of the v1 ``Taskset`` subclasses ``module`` itself defines (when it imported v1 at all)."""
    taskset_module = sys.modules.get("verifiers.v1.taskset")
    base = getattr(taskset_module, "Taskset", None)
    if base is None:
        return []
    return [
        name for name, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, base) and obj is not base
        and getattr(obj, "__module__", None) == module.__name__
    ]  # fmt: skip


def declared_factory(source: EnvSource, module: Any) -> Any:
    """The attribute ``source`` names in ``module`` (``load_environment`` by default), or None."""
    factory: Any = module
    for part in source.attr.split("."):
        factory = getattr(factory, part, None)
    return factory


def is_v1_package(source: EnvSource, module: Any) -> bool:
    """Whether ``module`` is meant as a v1 package: it has no classic factory where ``source``
    looks and it imported ``verifiers.v1`` (whether its ``__all__`` is right is the v1 loader's
    question, answered with its own message)."""
    return source.attr == "load_environment" and not callable(declared_factory(source, module)) and (
        "verifiers.v1" in sys.modules
    )


def import_source(source: EnvSource) -> Any:
    """Import the module ``source`` names (a file, or a module on the path ``source`` adds)."""
    if source.kind == "file":
        assert source.path is not None
        module = _import_file(source.path, source.module)
    else:
        if source.path is not None and str(source.path) not in sys.path:
            sys.path.insert(0, str(source.path))
        try:
            module = importlib.import_module(source.module)
        except ModuleNotFoundError as exc:
            # Only "this module is missing" means not installed; a missing dependency inside the
            # environment's own code surfaces as it is.
            top = source.module.split(".", 1)[0]
            if exc.name and (source.module == exc.name or source.module.startswith(exc.name + ".") or exc.name == top):
                raise EnvironmentNotFoundError(f"environment {source.env_id!r}: no module named {source.module!r}") from None
            raise
    return module


def _import_file(path: Path, name: str) -> Any:
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # sibling modules of the file import as they would from there
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EnvironmentNotFoundError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def annotate(env: Any, source: EnvSource, env_args: Mapping[str, Any]) -> Any:
    """Record on ``env`` where it came from: ``env_id`` (unless it set its own), ``env_args`` and
    ``env_version``. Objects that are not our Environment are left alone."""
    try:
        env.env_id = getattr(env, "env_id", None) or source.env_id
        env.env_args = dict(env_args)
        env.env_version = source.version
    except AttributeError:
        pass
    return env


def load(source: EnvSource, env_args: Mapping[str, Any] | None = None) -> Any:
    """Import ``source`` and call its factory with ``env_args``."""
    args = dict(env_args or {})
    return annotate(import_factory(source)(**args), source, args)


def load_environment(env_id: str | EnvId | os.PathLike[str], *, install: bool | None = None, **env_args: Any) -> Any:
    """Load an environment by id or path and call its ``load_environment(**env_args)``.

    ``env_id`` is ``name``, ``owner/name``, ``owner/name@version``, a package folder or a ``.py``
    file. Installed packages are found by their ``verifiers.environments`` entry point, else by the
    module named after the environment (``my-env`` -> ``my_env``). The returned environment gets
    ``env_id``, ``env_args`` and ``env_version`` set. An ``owner/name[@version]`` that is missing (or
    installed at another version than the one pinned) is installed by the registered installer (the
    hub's) only when the caller allows it (``install=True`` or ``VF_AUTO_INSTALL=1``); otherwise
    EnvironmentNotFoundError says how.
    """
    return load(resolve(env_id, install=install), env_args)


def ensure_keys(keys: Iterable[str] | str) -> None:
    """Fail early with a clear message when any of the named environment variables is unset."""
    names = [keys] if isinstance(keys, str) else list(keys)
    missing = [k for k in names if not os.environ.get(k)]
    if missing:
        raise MissingKeyError(missing)
