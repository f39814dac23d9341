"""Environment ids: the one grammar for naming an environment.

An environment is named in one of four ways::

    name                 wordle               an installed environment
    owner/name           alice/wordle         one published by ``alice`` on a hub
    owner/name@version   alice/wordle@1.2.0   exactly that version (``@latest``: the newest)
    a path               ./wordle, env.py     a package folder or a module file

:func:`parse_env_id` and :func:`format_env_id` are inverses on ids; :func:`parse_env_spec` also
recognises paths. Every part of the project that reads an id goes through this module, so the rules
below hold everywhere:

* owner and name start with a letter or digit and hold letters, digits, ``.``, ``_`` and ``-``;
* the importable module of ``name`` is ``name`` with ``-`` and ``.`` replaced by ``_``;
* two names are the same environment when their PEP 503 forms are equal (``My_Env`` == ``my-env``).

This module is a leaf: it imports only the standard library and nothing else of ``verifiers``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvId",
    "canonical_name",
    "entry_point_names",
    "format_env_id",
    "looks_like_path",
    "module_name_for",
    "parse_env_id",
    "parse_env_spec",
]

#: The entry-point group under which installed packages name their ``load_environment``.
ENTRY_POINT_GROUP = "verifiers.environments"

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_ID = re.compile(rf"^(?:(?P<owner>{_PART})/)?(?P<name>{_PART})(?:@(?P<version>[A-Za-z0-9.+!_-]+))?\Z")


@dataclass(frozen=True, slots=True)
class EnvId:
    """A parsed environment id: ``owner`` and ``version`` are None when absent.

    >>> env = parse_env_id("alice/my-env@1.2.0")
    >>> env.owner, env.name, env.version, env.module, env.key
    ('alice', 'my-env', '1.2.0', 'my_env', 'alice/my-env')
    >>> str(env)
    'alice/my-env@1.2.0'
    """

    owner: str | None
    name: str
    version: str | None = None

    @property
    def module(self) -> str:
        """The importable module the classic lookup tries: ``my-env`` -> ``my_env``."""
        return module_name_for(self.name)

    @property
    def key(self) -> str:
        """``owner/name`` (or ``name``), the version left out."""
        return format_env_id(self.owner, self.name)

    @property
    def pinned_version(self) -> str | None:
        """The version asked for, or None for none or ``latest``."""
        return self.version if self.version and self.version != "latest" else None

    def with_version(self, version: str | None) -> EnvId:
        return replace(self, version=version)

    def __str__(self) -> str:
        return format_env_id(self.owner, self.name, self.version)


def parse_env_id(text: str) -> EnvId:
    """Split ``[owner/]name[@version]``; raise ValueError when ``text`` is not an id.

    >>> parse_env_id("wordle")
    EnvId(owner=None, name='wordle', version=None)
    >>> parse_env_id("a/b/c")
    Traceback (most recent call last):
    ...
    ValueError: invalid environment id 'a/b/c': expected name, owner/name or owner/name@version
    """
    if not isinstance(text, str):
        raise ValueError(f"an environment id is a string, not {type(text).__name__}")
    m = _ID.match(text.strip())
    if not m:
        raise ValueError(f"invalid environment id {text!r}: expected name, owner/name or owner/name@version")
    return EnvId(m.group("owner"), m.group("name"), m.group("version"))


def format_env_id(owner: str | None, name: str, version: str | None = None) -> str:
    """The inverse of :func:`parse_env_id`.

    >>> format_env_id("alice", "wordle", "1.0")
    'alice/wordle@1.0'
    >>> format_env_id(None, "wordle")
    'wordle'
    """
    out = f"{owner}/{name}" if owner else name
    return f"{out}@{version}" if version else out


def module_name_for(name: str) -> str:
    """The module an environment named ``name`` lives in when its package names no entry point.

    ``-`` and ``.`` cannot appear in a module name; both become ``_`` (``my.env`` and ``my-env``
    are the same distribution under PEP 503, so they must also be the same module).

    >>> module_name_for("my-env"), module_name_for("my.env"), module_name_for("My_Env")
    ('my_env', 'my_env', 'My_Env')
    """
    return name.replace("-", "_").replace(".", "_")


def canonical_name(name: str) -> str:
    """PEP 503 form of a name (also of each part of ``owner/name``): how names are compared.

    >>> canonical_name("Alice/My_Env")
    'alice/my-env'
    """
    return "/".join(re.sub(r"[-_.]+", "-", part).lower() for part in name.split("/"))


def entry_point_names(owner: str | None, name: str) -> list[str]:
    """The ``verifiers.environments`` entry-point names a package declares for ``[owner/]name``.

    >>> entry_point_names("alice", "my-env")
    ['alice/my-env', 'my-env']
    """
    return [format_env_id(owner, name), name] if owner else [name]


def looks_like_path(text: str) -> bool:
    """True when ``text`` can only be a path (``.py`` file, ``./x``, ``/x``, ``~/x``, ``a/b/c``).

    Without touching the file system; :func:`parse_env_spec` also treats existing paths as paths.

    >>> [looks_like_path(t) for t in ("env.py", "./wordle", "environments/x/y", "alice/wordle")]
    [True, True, True, False]
    """
    text = text.strip()
    return (
        text.endswith(".py")
        or text.startswith((".", "/", "~"))
        or "\\" in text
        or text.count("/") > 1
        or text.endswith("/")
    )


def parse_env_spec(text: str) -> EnvId | Path:
    """An id, or a :class:`~pathlib.Path` when ``text`` names a file or folder.

    A path-shaped ``text`` is a path; an id that also exists on disk (``vf eval wordle`` run next to
    a ``wordle/`` package folder) is the local path, as a user standing in that folder expects.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("an environment id or path is required")
    if looks_like_path(text):
        return Path(text.strip()).expanduser()
    path = Path(text.strip())
    if path.is_dir() and _is_package_folder(path):
        return path
    return parse_env_id(text)


def _is_package_folder(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() or any(path.glob("*.py"))
