"""``vf.load_environment``: environment ids, importing an installed environment package, API keys.

An environment id has one grammar: ``[owner/]name[@version]``. The importable module is ``name``
with ``-`` replaced by ``_``. :func:`parse_env_id` and :func:`format_env_id` are inverse functions.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verifiers.errors import EnvironmentNotFoundError, MissingKeyError

__all__ = [
    "EnvId",
    "ensure_keys",
    "format_env_id",
    "load_environment",
    "module_name_for",
    "parse_env_id",
]

_ID = re.compile(r"^(?:(?P<owner>[A-Za-z0-9][A-Za-z0-9._-]*)/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<version>[A-Za-z0-9.+!_-]+))?$")


@dataclass(frozen=True, slots=True)
class EnvId:
    """A parsed environment id."""

    owner: str | None
    name: str
    version: str | None

    @property
    def module(self) -> str:
        return module_name_for(self.name)


def parse_env_id(env_id: str) -> EnvId:
    """Split ``owner/name@version`` (owner and version optional); raises ValueError when malformed."""
    m = _ID.match(env_id.strip())
    if not m:
        raise ValueError(f"invalid environment id {env_id!r}: expected [owner/]name[@version]")
    return EnvId(m.group("owner"), m.group("name"), m.group("version"))


def format_env_id(owner: str | None, name: str, version: str | None = None) -> str:
    """Inverse of :func:`parse_env_id`."""
    out = f"{owner}/{name}" if owner else name
    return f"{out}@{version}" if version else out


def module_name_for(name: str) -> str:
    """The importable module of an environment named ``name`` (``my-env`` -> ``my_env``)."""
    return name.replace("-", "_").replace(".", "_")


def _auto_install_allowed(install: bool | None) -> bool:
    if install is not None:
        return install
    return os.environ.get("VF_AUTO_INSTALL", "").strip().lower() in ("1", "true", "yes", "on")


def _install_from_hub(env_id: str, version: str | None = None) -> None:
    """Install environment ``env_id`` (``owner/name``) at ``version`` (None: latest) from the hub
    configured by ``vf login`` / ``VF_HUB_URL`` / ``VF_HUB_TOKEN``, pinned by sha256."""
    from verifiers.hub_client.api import EnvRef, HubClient, HubClientError
    from verifiers.hub_client.install import install

    owner, name = env_id.split("/", 1)
    try:
        with HubClient() as client:
            install(client, [EnvRef(owner, name, version)])
    except HubClientError as exc:
        raise EnvironmentNotFoundError(
            f"could not install {format_env_id(owner, name, version)} from the hub: {exc.message}"
        ) from None


def _import_env_module(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only "this module is missing" means not installed; a missing dependency inside the
        # environment's own code must surface as is.
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            return None
        raise


def load_environment(env_id: str, *, install: bool | None = None, **env_args: Any) -> Any:
    """Import an installed environment package and call its ``load_environment(**env_args)``.

    ``env_id`` is ``name``, ``owner/name`` or ``owner/name@version``; the module is the last path
    segment with ``-`` replaced by ``_``. The returned environment gets ``env_id`` and ``env_args``
    set. An ``owner/name[@version]`` environment that is missing (or installed at another version
    than the one pinned) is installed from the Environments Hub only when the caller allows it
    (``install=True`` or ``VF_AUTO_INSTALL=1``); otherwise EnvironmentNotFoundError says how.
    """
    parsed = parse_env_id(env_id)
    pinned = parsed.version if parsed.version and parsed.version != "latest" else None
    module = _import_env_module(parsed.module)
    installed = _package_version(parsed.module, parsed.name) if module is not None else None
    # A module importable without distribution metadata (a local folder on sys.path) is taken as is.
    wrong_version = module is not None and pinned is not None and installed is not None and not _same_version(
        installed, pinned
    )
    if parsed.owner and (module is None or wrong_version):
        if not _auto_install_allowed(install):
            have = f"version {installed} is installed" if wrong_version else "it is not installed"
            raise EnvironmentNotFoundError(
                f"environment {env_id!r} is not available: {have}. Install it with `vf install {env_id}`, "
                "or allow installing from the hub (load_environment(..., install=True) or VF_AUTO_INSTALL=1)."
            )
        _install_from_hub(format_env_id(parsed.owner, parsed.name), pinned)
        importlib.invalidate_caches()
        for mod_name in [m for m in sys.modules if m == parsed.module or m.startswith(parsed.module + ".")]:
            del sys.modules[mod_name]  # a different version was imported before: load the new one
        module = _import_env_module(parsed.module)
    elif wrong_version:
        raise EnvironmentNotFoundError(
            f"environment {env_id!r} is not available: version {installed} is installed"
        )
    if module is None:
        raise EnvironmentNotFoundError(
            f"environment {env_id!r} is not installed: no module named {parsed.module!r}. "
            f"Install its package (e.g. `vf install {env_id}` or `pip install -e environments/{parsed.name}`)."
        )
    factory = getattr(module, "load_environment", None)
    if not callable(factory):
        raise EnvironmentNotFoundError(
            f"module {parsed.module!r} ({getattr(module, '__file__', '?')}) has no load_environment() function"
        )
    env = factory(**env_args)
    try:
        env.env_id = env.env_id or parsed.name
        env.env_args = dict(env_args)
        env.env_version = _package_version(parsed.module, parsed.name)
    except AttributeError:  # an object that is not our Environment: leave it alone
        pass
    return env


def _same_version(a: str | None, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if a is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _package_version(module: str, name: str) -> str | None:
    from importlib import metadata

    for candidate in (name, module, module.replace("_", "-")):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    mod = sys.modules.get(module)
    return getattr(mod, "__version__", None)


def ensure_keys(keys: Iterable[str] | str) -> None:
    """Fail early with a clear message when any of the named environment variables is unset."""
    names = [keys] if isinstance(keys, str) else list(keys)
    missing = [k for k in names if not os.environ.get(k)]
    if missing:
        raise MissingKeyError(
            f"missing required environment variable(s): {', '.join(missing)}; set them before loading this environment"
        )
