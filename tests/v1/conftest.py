from __future__ import annotations

import sys
from pathlib import Path

import pytest

PACKAGES = Path(__file__).parent / "packages"


@pytest.fixture(autouse=True)
def v1_packages(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tests' own v1 packages, importable by id (``vf-arith`` -> ``vf_arith``)."""
    monkeypatch.syspath_prepend(str(PACKAGES))
    yield PACKAGES
    for name in [m for m in sys.modules if m.split(".")[0] in {p.name for p in PACKAGES.iterdir()}]:
        sys.modules.pop(name, None)
