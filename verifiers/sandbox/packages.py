"""Make host-installed Python packages importable inside the sandbox, read-only.

The sandbox has no network, so ``pip install`` cannot run in it. Instead, packages already installed
for the host interpreter (numpy, sympy, ...) are mounted read-only under ``/opt/python/site-packages``
and put on ``PYTHONPATH``. Only the packages named (and what they require) are mounted, not the
environment they live in. The sandbox interpreter must have the same ``major.minor`` version as the
host one for compiled extensions to load.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

__all__ = ["PACKAGES_DIR", "host_package_binds", "missing_in_sandbox_python"]

# "site-packages" in the path: tools that tell installed libraries from user code by it (dill, so
# datasets' fingerprinting) treat the mounted packages as what they are on the host
PACKAGES_DIR = "/opt/python/site-packages"
logger = logging.getLogger(__name__)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_in_sandbox_python(names: Iterable[str], python: str = "/usr/bin/python3") -> list[str]:
    """Which of ``names`` (import names) the sandbox's own interpreter cannot import.

    The sandbox sees the host's ``/usr`` unchanged, so asking the same interpreter on the host
    answers for the inside too (a Debian ``python3-numpy`` counts; nothing needs mounting then).
    """
    wanted = [n.replace("-", "_") for n in names if n.strip()]
    if not wanted or not Path(python).is_file():
        return wanted
    probe = "import importlib.util, json, sys; print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n) is None]))"
    try:
        out = subprocess.run(
            [python, "-c", probe, *wanted],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
        )
        return list(json.loads(out.stdout))
    except (OSError, ValueError, subprocess.SubprocessError):
        return wanted


def host_package_binds(names: Iterable[str], python: str = "/usr/bin/python3") -> dict[str, str]:
    """``{host_path: sandbox_path}`` read-only mounts for ``names`` and their requirements.

    Names may be distribution or import names. Those the sandbox interpreter can already import
    (system packages under ``/usr``) need no mount; those installed nowhere are skipped with a
    warning (code importing them in the sandbox then fails like any missing import).
    """
    names = missing_in_sandbox_python(names, python)
    tops_by_dist: dict[str, list[str]] = {}
    for top, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            tops_by_dist.setdefault(_canonical(dist), []).append(top)
    binds: dict[str, str] = {}
    seen: set[str] = set()
    todo = [n for n in names if n.strip()]
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        seen.add(key)
        found = False
        for top in tops_by_dist.get(key) or [name.replace("-", "_")]:
            if top.startswith("_") and top != name:
                continue
            spec = importlib.util.find_spec(top)
            if spec is None:
                continue
            if spec.submodule_search_locations:
                path = Path(next(iter(spec.submodule_search_locations)))
            elif spec.origin and spec.origin not in ("built-in", "frozen"):
                path = Path(spec.origin)
            else:
                continue  # part of the standard library: already there
            found = True
            binds[str(path)] = f"{PACKAGES_DIR}/{path.name}"
            vendored = path.parent / f"{top}.libs"  # manylinux wheels keep shared libraries here
            if vendored.is_dir():
                binds[str(vendored)] = f"{PACKAGES_DIR}/{vendored.name}"
        if not found:
            logger.warning(
                "python package %r is not installed on the host; the sandbox cannot import it", name
            )
            continue
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            requirements = []
        for req in requirements:
            if "extra ==" in req or "extra==" in req:
                continue
            match = _NAME.match(req)
            if match:
                todo.append(match.group(1))
    return binds
