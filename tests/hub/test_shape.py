"""The hub's shape: the HTTP layer reads, the services write.

Route handlers (``hub/api/*.py``, ``hub/index.py``, ``hub/legacy.py``, ``hub/web.py``) never open a database session of
their own, never add, delete, flush or commit rows, never run an INSERT/UPDATE/DELETE, and never bump
the generation or clear a cache by hand: they read through the session they are given
(``hub.api.deps.SessionDep``) and write by calling a service (``hub.services``), whose unit of work
bumps the generation and drops the caches after the commit. A handler that writes on its own would
forget one of the two sooner or later (they were written by hand in 18 places once).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HUB = Path(__file__).resolve().parents[2] / "hub"
HTTP_LAYER = sorted([*(HUB / "api").glob("*.py"), HUB / "index.py", HUB / "legacy.py", HUB / "web.py"])
# Method calls that write through a session (or are a transaction of their own).
WRITE_METHODS = {"add", "add_all", "delete", "merge", "flush", "commit", "begin", "bulk_save_objects"}
# Names that bump the generation, clear caches, or open a transaction / a session by hand.
FORBIDDEN_NAMES = {"bump_generation", "invalidate", "after_commit", "sessionmaker", "write"}
SQL_WRITES = {"insert", "update", "delete"}
# ``deps.py`` is where the request's read session is made (``SessionDep``) and the addressed environment
# is read; the web pages (``web.py``) read in sessions of their own. They open sessions to read only:
# every other check holds for them too.
OPENS_READ_SESSIONS = {"deps.py", "web.py"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(HUB.parent)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sqlalchemy"):
            found += [f"{where}: imports sqlalchemy.{a.name}" for a in node.names if a.name in SQL_WRITES]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = node.value.lstrip().split(None, 1)
            if words and words[0].upper() in ("INSERT", "UPDATE", "DELETE") and len(words) > 1:
                found.append(f"{where}: SQL {words[0].upper()} in a string")
        if isinstance(node, ast.ImportFrom) and node.module == "hub.db":
            found += [f"{where}: imports hub.db.{a.name}" for a in node.names if a.name == "bump_generation"]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        opens_ok = path.name in OPENS_READ_SESSIONS
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES and not (opens_ok and func.id == "sessionmaker"):
            found.append(f"{where}: calls {func.id}()")
        if not isinstance(func, ast.Attribute):
            continue
        # ``hub.db.session()``, ``hub.db.engine.begin()`` and the like: a transaction of the handler's own.
        chain = ast.unparse(func)
        if chain.endswith((".db.session", ".engine.begin")) and not opens_ok:
            found.append(f"{where}: {chain}()")
        elif ".uow." in chain + ".":
            found.append(f"{where}: {chain}()")
        elif func.attr in FORBIDDEN_NAMES and not (opens_ok and func.attr == "sessionmaker"):
            found.append(f"{where}: {chain}()")
        elif func.attr in WRITE_METHODS and not chain.startswith(("router.", "response.headers", "form.")):
            found.append(f"{where}: {chain}()")
    return found


@pytest.mark.parametrize("path", HTTP_LAYER, ids=lambda p: p.name)
def test_route_handlers_never_write_or_bump_the_generation(path: Path) -> None:
    assert _violations(path) == []


def test_the_scan_finds_each_kind_of_hand_written_write(tmp_path: Path) -> None:
    """The scan is not vacuous: each pattern it exists for, written in a handler, is found."""
    bad = tmp_path / "hub" / "api" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "from sqlalchemy import update\n"
        "from hub.db import bump_generation\n"
        "def handler(hub, s, env):\n"
        "    with hub.db.session() as t:\n"
        "        t.add(env)\n"
        "        bump_generation(t)\n"
        "    s.delete(env)\n"
        "    s.commit()\n"
        "    hub.index_cache.invalidate()\n"
        "    with hub.uow.write() as u:\n"
        "        pass\n"
        "    with hub.db.engine.connect() as c:\n"
        "        c.execute(text('UPDATE environments SET downloads = 0'))\n"
    )
    global HUB
    saved, HUB = HUB, tmp_path / "hub"
    try:
        found = _violations(bad)
    finally:
        HUB = saved
    kinds = ["sqlalchemy.update", "hub.db.bump_generation", "hub.db.session()", "t.add()", "bump_generation()",
             "s.delete()", "s.commit()", "invalidate()", "hub.uow.write()", "SQL UPDATE"]  # fmt: skip
    for kind in kinds:
        assert any(kind in f for f in found), (kind, found)
