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


@pytest.fixture(scope="session")
def mini_tools() -> object:
    """mini-swe-agent's tool folder (the ``mini_swe_agent`` harness's): built from PyPI by uv in
    bubblewrap the first time on this machine (about 40 s), found by its hash afterwards
    (``VF_TOOLENV_DIR``, else ``/var/tmp/vf-toolenvs-<uid>``), so a suite builds it at most once."""
    import asyncio

    from verifiers.sandbox.toolenv import ensure_toolenv
    from verifiers.v1.harnesses.mini_swe_agent import MiniSWEAgentHarnessConfig

    return asyncio.run(ensure_toolenv(MiniSWEAgentHarnessConfig().requirements))
