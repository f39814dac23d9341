"""Find and load an environment for ``vf eval``: an installed id, a package folder, or a ``.py`` file.

Also reads an environment package's ``[tool.verifiers.eval]`` defaults (``num_examples``,
``rollouts_per_example``, ``max_tokens``, ``sampling_args``, ``env_args`` ...), which the command
line overrides.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.cli.errors import UserError

#: Keys ``[tool.verifiers.eval]`` may set; anything else is ignored (and named in a warning).
EVAL_DEFAULT_KEYS = (
    "num_examples",
    "rollouts_per_example",
    "max_concurrent",
    "max_concurrent_requests",
    "max_tokens",
    "temperature",
    "sampling_args",
    "env_args",
    "model",
    "base_url",
    "api_key_var",
    "timeout_per_rollout",
)


@dataclass
class ResolvedEnv:
    """Where an environment comes from and what its package says about evaluating it."""

    env_id: str
    module_name: str
    source: str  # "file" | "folder" | "installed"
    path: Path | None = None
    pyproject: Path | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    version: str | None = None


def module_name_for(env_id: str) -> str:
    """``owner/my-env@1.2`` -> ``my_env``: the last path segment, version dropped, ``-`` -> ``_``."""
    name = env_id.split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name.replace("-", "_")


def read_pyproject(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML: {exc}")


def eval_defaults(pyproject: dict[str, Any]) -> dict[str, Any]:
    table = pyproject.get("tool", {}).get("verifiers", {}).get("eval", {})
    if not isinstance(table, dict):
        return {}
    unknown = sorted(set(table) - set(EVAL_DEFAULT_KEYS))
    if unknown:
        print(f"warning: ignoring unknown [tool.verifiers.eval] keys: {', '.join(unknown)}", file=sys.stderr)
    return {k: v for k, v in table.items() if k in EVAL_DEFAULT_KEYS}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject_for_module(module_name: str, search: list[Path]) -> Path | None:
    """A pyproject.toml describing ``module_name`` in one of the ``search`` folders, if any."""
    for folder in search:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            name = read_pyproject(candidate).get("project", {}).get("name", "")
            if _normalise(name) == _normalise(module_name):
                return candidate
    return None


def resolve(spec: str, env_dir_path: Path | None = None) -> ResolvedEnv:
    """Work out what ``spec`` names, without importing it yet."""
    path = Path(spec).expanduser()
    looks_like_path = spec.endswith(".py") or ("/" in spec and path.exists()) or spec.startswith((".", "~"))
    if path.is_file() and path.suffix == ".py":
        pyproject = _pyproject_for_module(path.stem, [path.parent])
        data = read_pyproject(pyproject) if pyproject else {}
        return ResolvedEnv(
            env_id=path.stem.replace("_", "-"),
            module_name=path.stem,
            source="file",
            path=path.resolve(),
            pyproject=pyproject,
            defaults=eval_defaults(data),
            version=data.get("project", {}).get("version"),
        )
    if path.is_dir():
        return _resolve_folder(path)
    if looks_like_path:
        raise UserError(f"no environment at {spec}: the path does not exist")

    module_name = module_name_for(spec)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module_name):
        raise UserError(f"{spec!r} is not a valid environment id")
    # A folder under ./environments (or --env-dir-path) wins only when the module is not installed.
    local_dirs = [d for d in (env_dir_path, Path("environments")) if d is not None]
    try:
        spec_found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec_found = None
    # ``owner/name`` ids that are not installed are left to vf.load_environment (it can install them).
    if spec_found is None and "/" not in spec:
        for base in local_dirs:
            for name in (spec, module_name, spec.replace("_", "-")):
                if (base / name / "pyproject.toml").is_file():
                    return _resolve_folder(base / name)
        raise UserError(
            f"unknown environment {spec!r}: no installed module {module_name!r}"
            + _did_you_mean(spec, local_dirs),
            hint="install it (pip install -e PATH, or vf install owner/name) or pass a package folder / .py file",
        )
    search: list[Path] = []
    if spec_found is not None and spec_found.origin:
        origin = Path(spec_found.origin).resolve()
        search = [origin.parent, origin.parent.parent]
    name = spec.split("@", 1)[0].rsplit("/", 1)[-1]
    search += [base / n for base in local_dirs for n in (name, module_name, name.replace("_", "-"))]
    pyproject = _pyproject_for_module(module_name, search)
    data = read_pyproject(pyproject) if pyproject else {}
    return ResolvedEnv(
        env_id=spec.split("@", 1)[0],
        module_name=module_name,
        source="installed",
        pyproject=pyproject,
        defaults=eval_defaults(data),
        version=_installed_version(module_name) or data.get("project", {}).get("version"),
    )


def _resolve_folder(folder: Path) -> ResolvedEnv:
    folder = folder.resolve()
    pyproject = folder / "pyproject.toml"
    data = read_pyproject(pyproject) if pyproject.is_file() else {}
    name = data.get("project", {}).get("name") or folder.name
    module_name = name.replace("-", "_").replace(".", "_")
    if not ((folder / f"{module_name}.py").is_file() or (folder / module_name / "__init__.py").is_file()):
        modules = sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("setup", "conftest"))
        if len(modules) == 1:
            module_name = modules[0]
        else:
            raise UserError(f"{folder} has no module {module_name}.py (or {module_name}/__init__.py)")
    return ResolvedEnv(
        env_id=_normalise(name),
        module_name=module_name,
        source="folder",
        path=folder,
        pyproject=pyproject if pyproject.is_file() else None,
        defaults=eval_defaults(data),
        version=data.get("project", {}).get("version"),
    )


def _installed_version(module_name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    try:
        dists = packages_distributions().get(module_name) or [module_name.replace("_", "-")]
        return version(dists[0])
    except (PackageNotFoundError, ValueError):
        return None


def known_environment_ids(local_dirs: list[Path]) -> list[str]:
    """Ids we could suggest: local package folders and installed distributions needing verifiers."""
    ids: set[str] = set()
    for base in local_dirs:
        if base.is_dir():
            ids.update(p.parent.name for p in base.glob("*/pyproject.toml"))
    from importlib.metadata import distributions

    for dist in distributions():
        requires = dist.requires or []
        if any(re.match(r"verifiers\b", r) for r in requires):
            ids.add(_normalise(dist.metadata["Name"] or ""))
    return sorted(i for i in ids if i)


def _did_you_mean(spec: str, local_dirs: list[Path]) -> str:
    candidates = known_environment_ids(local_dirs)
    close = difflib.get_close_matches(_normalise(spec), candidates, n=3, cutoff=0.5)
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    return ""


def load(resolved: ResolvedEnv, env_args: dict[str, Any]) -> Any:
    """Import the environment's module and call its ``load_environment(**env_args)``."""
    if resolved.source == "installed":
        import verifiers as vf

        loader = getattr(vf, "load_environment", None)
        if loader is None:
            raise UserError("this verifiers build has no load_environment")
        return _call_loader(lambda: loader(resolved.env_id, **env_args), resolved)

    assert resolved.path is not None
    if resolved.source == "file":
        folder = resolved.path.parent
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        module_spec = importlib.util.spec_from_file_location(resolved.module_name, resolved.path)
        if module_spec is None or module_spec.loader is None:
            raise UserError(f"cannot import {resolved.path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[resolved.module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(resolved.module_name, None)
            raise UserError(f"importing {resolved.path} failed: {type(exc).__name__}: {exc}")
    else:
        if str(resolved.path) not in sys.path:
            sys.path.insert(0, str(resolved.path))
        try:
            module = importlib.import_module(resolved.module_name)
        except Exception as exc:
            raise UserError(
                f"importing {resolved.module_name} from {resolved.path} failed: {type(exc).__name__}: {exc}"
            )
    loader = getattr(module, "load_environment", None)
    if not callable(loader):
        raise UserError(f"{resolved.path} defines no load_environment(**kwargs)")
    env = _call_loader(lambda: loader(**env_args), resolved)
    for attr, value in (
        ("env_id", resolved.env_id),
        ("env_args", dict(env_args)),
        ("env_version", resolved.version),
    ):
        try:
            setattr(env, attr, value)
        except AttributeError:
            pass
    return env


def _call_loader(call: Any, resolved: ResolvedEnv) -> Any:
    try:
        return call()
    except UserError:
        raise
    except TypeError as exc:
        # Almost always an -a key that load_environment does not take.
        raise UserError(f"load_environment of {resolved.env_id!r} rejected its arguments: {exc}")
    except (ModuleNotFoundError, ImportError) as exc:
        raise UserError(f"loading {resolved.env_id!r} failed: {exc}")
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise UserError(f"loading {resolved.env_id!r} failed: {type(exc).__name__}: {exc}")
