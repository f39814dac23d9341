"""Elastic env-server pools, and shared toolsets that live per worker (not per rollout).

One elastic pool (1 to 2 workers, 2 runs each, idle after 4 s) serves ``vf-mcp-tools`` with its
shared ``ledger`` MCP server (``Taskset.toolsets``). A burst of four episodes (their first model
replies all come 25 s after the burst) queues past what one worker takes, so the pool grows to two and each worker
plays two; each worker runs one ledger server (a child of that worker), however many rollouts
used it; once idle, the pool shrinks back to one worker, and the stopped worker's ledger server
is gone with it; closing the pool ends the rest.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from tests.v1.serve_helpers import Served
from tests.v1.test_toolsets import _alive, _last_tool, _numbers
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.serve import EnvClient

pytest.importorskip("mcp", reason="the toolset tests need the mcp package (verifiers[compat])")

CONFIG = {"taskset": {"id": "vf-mcp-tools", "n": 4, "shared": True}}
ELASTIC = {"min_workers": 1, "max_workers": 2, "max_concurrent": 2, "idle_timeout": 4.0, "health_interval": 0.2}
RELEASE = threading.Event()  # set by the test once both workers hold two runs each


def _tool_servers_of(pids: set[int]) -> dict[int, list[int]]:
    """Live toolset-server processes, by the worker (in ``pids``) they are children of."""
    out: dict[int, list[int]] = {pid: [] for pid in pids}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid in pids and b"verifiers.v1.mcp" in cmdline and _alive(int(entry.name)):
            out[ppid].append(int(entry.name))
    return out


async def _script(req):
    tool = _last_tool(req)
    a, b = _numbers(req)
    if tool is None:  # every first reply waits for the release: runs wait in the broker's queue until the
        # second worker is up, and both workers finish together (neither idles while the other plays)
        deadline = time.monotonic() + 120.0
        while not RELEASE.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return tool_calls(tool_call("ledger_record", {"item": f"{a}-first"}, id="r1"))
    if tool["tool_call_id"] == "r1":
        return tool_calls(tool_call("ledger_record", {"item": f"{a}-second"}, id="r2"))
    if tool["tool_call_id"] == "r2":
        return tool_calls(tool_call("calc_add", {"a": a, "b": b}, id="add"))
    return reply(tool["content"])


async def _until(client: EnvClient, check, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = await client.status()
        if check(status):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pool never reached the state: last {status}")


async def test_an_elastic_pool_grows_with_queued_runs_and_shrinks_when_idle() -> None:
    served = Served(CONFIG, **ELASTIC)
    try:
        async with ScriptedServer(_script) as srv, EnvClient(served.address) as client:
            await client.wait_for_server_startup(timeout=180)
            first = await _until(client, lambda s: s["workers"] and all(w["ready"] for w in s["workers"]))
            assert first["elastic"] and len(first["workers"]) == 1 and first["grown"] == 0
            tasks = [{"prompt": f"What is {i} + {i + 10}?", "a": i, "b": i + 10, "id": f"m{i}", "idx": i} for i in range(4)]
            RELEASE.clear()
            runs = [asyncio.ensure_future(client.run(srv.base_url, "scripted-model", {}, t)) for t in tasks]
            grown = await _until(client, lambda s: len(s["workers"]) == 2)
            assert grown["grown"] == 1 and grown["queued"] > 0  # it grew because runs waited
            both = await _until(client, lambda s: all(w["running"] == 2 for w in s["workers"]) and len(s["workers"]) == 2)
            assert both["queued"] == 0
            RELEASE.set()
            episodes = await asyncio.wait_for(asyncio.gather(*runs), 180)
            busy = await client.status()
            assert [w["served"] for w in busy["workers"]] == [2, 2]
            for ep, task in zip(episodes, tasks, strict=True):
                (trace,) = ep.traces
                assert ep.ok and trace.reward == 1.0 and trace.metrics["ledger"] == 2.0
                a = task["a"]  # each rollout saw only its own ledger, on a server shared with the others
                assert [m.content for m in trace.tool_messages[:2]] == [f"1 items: {a}-first", f"2 items: {a}-first,{a}-second"]
            pids = {w["pid"] for w in busy["workers"]}
            servers = _tool_servers_of(pids)
            # one shared ledger server per worker (4 rollouts used 2 servers)
            assert all(len(s) == 1 for s in servers.values()), servers
            # idle: the pool goes back to its minimum, stopping the worker and its toolset server
            shrunk = await _until(client, lambda s: len(s["workers"]) == 1 and s["shrunk"] == 1 and not s["retiring"], timeout=60)
            (kept,) = [w["pid"] for w in shrunk["workers"]]
            (gone,) = pids - {kept}
            assert not _alive(gone) and not any(_alive(p) for p in servers[gone])
            assert all(_alive(p) for p in servers[kept])  # the kept worker's shared server still serves
            again = await client.run(srv.base_url, "scripted-model", {}, tasks[0])
            assert again.ok and again.traces[0].reward == 1.0
    finally:
        served.close()
    leftover = [p for p in servers[kept] if _alive(p)] + ([kept] if _alive(kept) else [])
    assert leftover == []  # closing the pool ended the last worker and its server
