"""Fixtures for the SDK tests: scripted loopback model servers and small datasets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from verifiers.testing import ScriptedServer


@pytest.fixture
def server_factory() -> Iterator[Any]:
    """``server_factory(script, **opts)`` starts a ScriptedServer; all are stopped at teardown."""
    started: list[ScriptedServer] = []

    def make(script: Any = "ok", **opts: Any) -> ScriptedServer:
        srv = ScriptedServer(script, **opts).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def qa_rows() -> list[dict[str, Any]]:
    return [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]


def leftover_tasks() -> set[asyncio.Task[Any]]:
    """Tasks other than the current one still alive in the running loop."""
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}
