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


def _install_from_hub(env_id: str, version: str | None = None) -> None:
    """Install environment ``env_id`` (``owner/name``) from the Environments Hub.

    The hook that ``load_environment`` calls when an ``owner/name`` environment is not installed.
    The hub client lives in ``verifiers.cli`` (``vf install``); until it is wired here, this raises
    a clear error telling the user how to install the package themselves.
    """
    hint = format_env_id(*env_id.split("/", 1), version) if "/" in env_id else env_id
    raise EnvironmentNotFoundError(
        f"environment {hint!r} is not installed. Install it first, e.g. `vf install {hint}` "
        f"or `pip install` its package (module {module_name_for(env_id.split('/')[-1])!r})."
    )


def _import_env_module(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only "this module is missing" means not installed; a missing dependency inside the
        # environment's own code must surface as is.
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            return None
        raise


def load_environment(env_id: str, **env_args: Any) -> Any:
    """Import an installed environment package and call its ``load_environment(**env_args)``.

    ``env_id`` is ``name``, ``owner/name`` or ``owner/name@version``; the module is the last path
    segment with ``-`` replaced by ``_``. The returned environment gets ``env_id`` and ``env_args``
    set. When an ``owner/name`` environment is missing, :func:`_install_from_hub` is asked to
    install it; otherwise (or if that fails) EnvironmentNotFoundError explains how to install it.
    """
    parsed = parse_env_id(env_id)
    module = _import_env_module(parsed.module)
    if module is None and parsed.owner:
        _install_from_hub(format_env_id(parsed.owner, parsed.name), parsed.version)
        importlib.invalidate_caches()
        module = _import_env_module(parsed.module)
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
