"""The ``sandbox`` runtime: every program of a rollout in real bubblewrap, on one work folder.

Hostile programs are run for real: they must not read a host file, open a network connection, or
outlive their wall clock; a PEP 723 script is prepared through the allow-listed egress proxy (to a
loopback index, no internet) and then runs with no network from the warm cache; and an eval on
the ``bash`` harness runs its tool commands in the sandbox.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import private_sandbox_root
from tests.sandbox.support import live_processes, wait_until_gone
from tests.v1.test_runtimes import _index, _wheel
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
from verifiers.v1.agents import AgentConfig
from verifiers.v1.env import load_environment
from verifiers.v1.errors import SandboxError
from verifiers.v1.plugins import PluginError
from verifiers.v1.rollout import run_v1
from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime, make_runtime, resolve_runtime_config


@pytest.fixture(scope="module", autouse=True)
def _sandbox_dir() -> Iterator[Path]:
    with private_sandbox_root("vf-sandboxrt-test-") as root:
        yield root


@pytest.fixture
async def rt():
    runtime = SandboxRuntime(SandboxConfig(env={"GREETING": "hi"}, timeout=20))
    await runtime.start()
    yield runtime
    await runtime.stop()


async def test_run_write_read_round_trip(rt: SandboxRuntime) -> None:
    await rt.write("sub/a.txt", "hello")
    assert await rt.read("sub/a.txt") == b"hello"
    assert await rt.read("/workspace/sub/a.txt") == b"hello"
    r = await rt.run('cat sub/a.txt; echo " $GREETING"; echo err >&2; exit 3')
    assert (r.returncode, r.stdout, r.stderr) == (3, "hello hi\n", "err\n") and not r.ok
    r = await rt.run_program(["/usr/bin/python3", "-c", "import os, sys; print(os.getcwd(), sys.stdin.read().upper())"],
                             stdin="abc", cwd="sub")  # fmt: skip
    assert r.ok and r.stdout.split() == ["/workspace/sub", "ABC"]
    # what the sandbox writes, the host reads back (files persist across calls, processes do not)
    await rt.run("printf 'from inside' > out.txt")
    assert await rt.read("out.txt") == b"from inside"
    assert (rt.workdir / "out.txt").read_text() == "from inside"
    assert rt.info["type"] == "sandbox" and rt.info["backend"] == "bwrap"


async def test_each_runtime_has_its_own_work_folder_removed_at_stop() -> None:
    a, b = SandboxRuntime(), SandboxRuntime()
    await a.start()
    await b.start()
    await a.write("mine.txt", "a")
    assert (await b.run("cat mine.txt")).returncode != 0  # b's folder does not hold a's file
    folder = a.workdir
    assert folder != b.workdir and folder.is_dir()
    await a.stop()
    await b.stop()
    assert not folder.exists()


async def test_a_hostile_program_cannot_read_host_files(rt: SandboxRuntime) -> None:
    secret = secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as host_dir:  # on the host, outside the work folder
        target = Path(host_dir) / "secret.txt"
        target.write_text(secret)
        os.chmod(host_dir, 0o755)
        target.chmod(0o644)  # world-readable: only the sandbox's mounts keep it out
        r = await rt.run(f"cat {target}; ls {host_dir}; cat /proc/1/root{target}; find / \\( -path /usr -o -path /proc \\) -prune -o -name secret.txt -print 2>/dev/null")
        assert secret not in r.stdout + r.stderr and "secret.txt" not in r.stdout
        # a link planted in the work folder is not followed by the host-side read or write
        await rt.run(f"ln -s {target} link.txt")
        with pytest.raises(OSError):
            await rt.read("link.txt")
        with pytest.raises(OSError):
            await rt.write("link.txt", "overwritten")
        assert target.read_text() == secret
        # and paths outside the work folder are refused outright
        for bad in ("../escape.txt", str(target), "/etc/passwd"):
            with pytest.raises(ValueError):
                await rt.write(bad, "x")
    r = await rt.run("cat /etc/shadow || cat /root/.bashrc || ls /work")
    assert r.returncode != 0 and r.stdout == ""


def _unblock_fifo_later(path: Path, seconds: float) -> None:
    """A watchdog for the old behaviour: a host open() stuck on a FIFO is released after
    ``seconds`` (a writer appears and closes), so the test fails instead of hanging."""
    import threading
    import time

    def release() -> None:
        deadline = time.monotonic() + seconds + 10
        time.sleep(seconds)
        while time.monotonic() < deadline:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # only succeeds with a reader
                return
            except OSError:
                time.sleep(0.05)

    threading.Thread(target=release, daemon=True).start()


async def test_a_planted_fifo_neither_blocks_the_host_read_nor_write(rt: SandboxRuntime) -> None:
    # the sandbox leaves a named pipe where the host will read its answer: opening it on the host
    # must not block the event loop (every rollout of the worker) waiting for a writer
    r = await rt.run("mkfifo answer.txt out.txt")
    assert r.ok, r.stderr
    _unblock_fifo_later(rt.workdir / "answer.txt", 3)
    with pytest.raises(OSError, match="not a regular file"):
        await rt.read("answer.txt")
    with pytest.raises(OSError):
        await rt.write("out.txt", "x")  # no reader: refused at once, never a wait
    r = await rt.run("mkdir adir")
    with pytest.raises(OSError):
        await rt.read("adir")


async def test_a_very_deep_folder_left_by_a_program_is_removed_at_stop() -> None:
    # folders nested deeper than the host's recursion limit: stop() must still remove the work
    # folder (a recursive rmtree raised RecursionError and left it, and the stop, behind)
    runtime = SandboxRuntime(SandboxConfig(timeout=20))
    await runtime.start()
    folder = runtime.workdir
    r = await runtime.run_program(["/usr/bin/python3", "-c", "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')"])
    assert r.ok, r.stderr
    assert (folder / "d" / "d" / "d").is_dir()
    await runtime.stop()
    assert not folder.exists()


async def test_a_hostile_program_cannot_open_a_network_connection(rt: SandboxRuntime) -> None:
    server = socket.create_server(("127.0.0.1", 0))  # a host service on loopback
    server.settimeout(0.2)
    port = server.getsockname()[1]
    program = f"""
import socket
for host, port in (("127.0.0.1", {port}), ("1.1.1.1", 80), ("8.8.8.8", 53)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("CONNECTED", host)
    except OSError as exc:
        print("refused", host, type(exc).__name__)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("RESOLVED")
except OSError:
    print("no dns")
"""
    try:
        r = await rt.run_program(["/usr/bin/python3", "-c", program])
        assert r.ok, r.stderr
        assert "CONNECTED" not in r.stdout and "RESOLVED" not in r.stdout
        assert r.stdout.count("refused") == 3
        with pytest.raises(TimeoutError):  # nothing reached the host's service
            server.accept()
    finally:
        server.close()


async def test_a_program_past_its_wall_clock_is_killed_with_everything_it_started(rt: SandboxRuntime) -> None:
    marker = f"vf-marker-{secrets.token_hex(6)}"
    # a background child in its own session, ignoring SIGTERM/SIGHUP, plus a foreground sleeper
    command = f"(trap '' TERM HUP; setsid bash -c 'exec -a {marker}-bg sleep 300' &) ; exec -a {marker}-fg sleep 300"
    task = asyncio.create_task(rt.run(command, timeout=3))
    for _ in range(200):  # the processes exist (so the check below can fail)
        if len(live_processes(marker)) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(live_processes(marker)) >= 2
    r = await task
    assert r.timed_out and not r.ok
    assert await wait_until_gone(marker, timeout=10) == []


async def test_a_cancelled_program_leaves_nothing_running(rt: SandboxRuntime) -> None:
    marker = f"vf-marker-{secrets.token_hex(6)}"
    task = asyncio.create_task(rt.run(f"exec -a {marker} sleep 300", timeout=60))
    for _ in range(200):
        if live_processes(marker):
            break
        await asyncio.sleep(0.05)
    assert live_processes(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(marker, timeout=10) == []


async def test_limits_come_from_the_config() -> None:
    runtime = SandboxRuntime(SandboxConfig(limits={"memory_mb": 64, "processes": 16.0, "cpu_seconds": 1, "output_bytes": 4096}))
    await runtime.start()
    try:
        r = await runtime.run_program(["/usr/bin/python3", "-c", "b = bytearray(256 * 1024 * 1024); print('ALLOCATED')"])
        assert not r.ok and "ALLOCATED" not in r.stdout and "MemoryError" in r.stderr
        r = await runtime.run("ulimit -v; ulimit -u; ulimit -t")
        assert r.stdout.split() == [str(64 * 1024), "16", "1"]
        flood = await runtime.run("yes flood")
        assert not flood.ok and "output limit" in flood.stderr and len(flood.stdout) <= 4096
        spin = await runtime.run_program(["/usr/bin/python3", "-c", "while True: pass"], timeout=30)
        assert not spin.ok and spin.returncode == 128 + 24  # SIGXCPU at 1 CPU second, long before 30 s
    finally:
        await runtime.stop()
    with pytest.raises(ValueError, match="unknown sandbox limits"):
        SandboxConfig(limits={"memroy_mb": 64})
    for bad in ({"memory_mb": 0}, {"processes": 1.5}, {"disk_mb": None}):
        with pytest.raises(ValueError, match="limits"):
            SandboxConfig(limits=bad)


_SCRIPT = """# /// script
# requires-python = ">=3.11"
# dependencies = ["vfprobe==1.0"]
# ///
import sys, vfprobe
print(vfprobe.VALUE, sys.argv[1:])
"""


async def test_uv_script_prepared_through_the_egress_proxy_then_run_offline(tmp_path, _sandbox_dir) -> None:
    wheel = _wheel(tmp_path)
    cache = _sandbox_dir / "shared-uv-cache"  # shared by the runtimes naming it (a warm cache)
    with _index(wheel) as index:
        cfg = SandboxConfig(env={"UV_INDEX_URL": index}, registries=[index], uv_cache_dir=cache, timeout=60)
        rt = SandboxRuntime(cfg)
        await rt.start()
        await rt.write("probe.py", _SCRIPT)
        with pytest.raises(SandboxError, match="not prepared"):
            await rt.run_uv_script("probe.py")
        # programs have no network even while the index is up; only the setup phase reached it
        fetch = await rt.run_program(["/usr/bin/python3", "-c", f"import urllib.request; urllib.request.urlopen({index!r}, timeout=3)"])
        assert not fetch.ok
        await rt.prepare_uv_script("probe.py")
        # an index that is not allow-listed is refused by the proxy, and said so
        other = SandboxRuntime(SandboxConfig(env={"UV_INDEX_URL": index}, registries=["https://pypi.org"]))
        await other.start()
        await other.write("probe.py", _SCRIPT)
        with pytest.raises(SandboxError, match=r"refused: 127\.0\.0\.1"):
            await other.prepare_uv_script("probe.py")
        await other.stop()
    # the registry is gone: the prepared environment serves the script, with no network
    warm = await rt.run_uv_script("probe.py", ["a", "b"], offline=True)
    assert warm.ok, warm.stderr
    assert warm.stdout.strip() == "42 ['a', 'b']"
    await rt.stop()
    # other rollouts on the warm cache, at once, prepare offline (no registries) and run the script
    async def rollout(i: int) -> tuple[SandboxRuntime, str]:
        other = SandboxRuntime(SandboxConfig(env={"UV_INDEX_URL": index}, uv_cache_dir=cache, registries=[], timeout=60))
        await other.start()
        await other.write("probe.py", _SCRIPT)
        await other.prepare_uv_script("probe.py")
        r = await other.run_uv_script("probe.py", [str(i)])
        assert r.ok, r.stderr
        return other, r.stdout.strip()

    done = await asyncio.gather(*(rollout(i) for i in range(3)))
    assert [out for _, out in done] == [f"42 ['{i}']" for i in range(3)]
    for other, _ in done[1:]:
        await other.stop()
    again = done[0][0]
    # the script's environment is read-only to the programs: they cannot poison the shared cache
    r = await again.run_program(["/bin/sh", "-c", "touch /opt/vf/uv-cache/poisoned"])
    assert not r.ok and not (cache / "poisoned").exists()
    await again.stop()
    # a cold cache with no registry has nothing to prepare from: one SandboxError
    cold = SandboxRuntime(SandboxConfig(env={"UV_INDEX_URL": index}, registries=[]))
    await cold.start()
    await cold.write("probe.py", _SCRIPT)
    with pytest.raises(SandboxError, match="vfprobe"):
        await cold.prepare_uv_script("probe.py")
    await cold.stop()


def test_the_sandbox_type_loads_and_the_default_stays_subprocess() -> None:
    cfg = resolve_runtime_config({"type": "sandbox", "id": "box", "limits": {"memory_mb": 512}, "timeout": 30})
    assert isinstance(cfg, SandboxConfig) and cfg.id == "box" and cfg.limits == {"memory_mb": 512}
    assert AgentConfig().runtime.type == "subprocess"
    assert isinstance(AgentConfig(runtime={"type": "sandbox"}).runtime, SandboxConfig)
    with pytest.raises(ValueError):
        AgentConfig(runtime={"type": "sandbox", "backend": "subprocess"})  # never the unisolated backend
    assert isinstance(make_runtime(cfg), SandboxRuntime)


def test_missing_bubblewrap_is_refused_at_start_in_one_line(monkeypatch) -> None:
    from verifiers.sandbox import backends

    monkeypatch.setattr(backends._ProbedBackend, "_probed", {})
    monkeypatch.setattr(backends.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(backends.os.path, "exists", lambda p: False if p == "/usr/bin/bwrap" else os.path.lexists(p))
    with pytest.raises(SandboxError) as err:
        make_runtime(SandboxConfig())
    msg = str(err.value)
    assert "\n" not in msg and "bubblewrap" in msg and "setup-system.sh" in msg
    env = load_environment({"taskset": {"id": "vf-sums"}, "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox"}}})
    with pytest.raises(PluginError) as err:
        env.check()
    assert str(err.value).startswith("[env.agent.runtime]") and "bubblewrap" in str(err.value) and "\n" not in str(err.value)


async def test_an_eval_on_the_bash_harness_runs_its_commands_in_the_sandbox(tmp_path, _sandbox_dir) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-ONLY")
    seen: list[str] = []

    def script(req):
        last = req.messages[-1]
        if last["role"] == "user":
            return tool_calls(tool_call("bash", {"command": "printf 1 > note.txt"}, id="c1"))
        if last["role"] == "tool":
            seen.append(last["content"])
            if last["tool_call_id"] == "c1":  # now an edit of a host file, outside the work folder
                return tool_calls(tool_call("edit", {"path": str(secret), "old_str": "HOST", "new_str": "overwritten"}, id="c2"))
            if last["tool_call_id"] == "c2":
                return tool_calls(tool_call("bash", {"command": f"cat /etc/hostname; id -u; cat note.txt; echo; cat {secret}"}, id="c3"))
            return reply(last["content"].splitlines()[2])  # what note.txt holds
        return "?"

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1},
                            "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox", "timeout": 30}}})  # fmt: skip
    env.check()
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
    trace = out.state[0]["_episode"].traces[0]
    assert trace.agent.runtime["type"] == "sandbox"
    assert seen[1].startswith("error:") and secret.read_text() == "HOST-ONLY"
    bash_output = seen[-1]
    # the commands ran as the sandbox's user on its host name; the host file was not there
    assert re.match(r"sandbox\n65534\n1\ncat: .*host-secret.txt: No such file", bash_output)
    assert "HOST-ONLY" not in bash_output
    assert trace.last_reply == "1" and out.state[0]["reward"] == 1.0
    assert not list(_sandbox_dir.glob("run-*"))  # the rollout's work folder and cache are gone


async def test_a_timed_out_rollout_leaves_no_sandboxed_process_and_no_folder(tmp_path, _sandbox_dir) -> None:
    marker = f"vf-marker-{secrets.token_hex(6)}"

    def script(req):
        if req.messages[-1]["role"] == "user":
            return tool_calls(tool_call("bash", {"command": f"exec -a {marker} sleep 300"}, id="c1"))
        return reply("done")

    env = load_environment({"taskset": {"id": "vf-sums", "n": 1},
                            "agent": {"harness": {"id": "bash"}, "runtime": {"type": "sandbox"}}})  # fmt: skip
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            run = asyncio.create_task(run_v1(env, list(env.taskset), client, model="scripted-model", timeout=4, folder=tmp_path))
            for _ in range(200):  # the model's command is running in the sandbox
                if live_processes(marker):
                    break
                await asyncio.sleep(0.05)
            assert live_processes(marker)
            out = await run
        finally:
            await client.aclose()
    assert out["metadata"]["num_errors"] == 1  # the rollout's timeout, not the command's 120 s
    assert await wait_until_gone(marker, timeout=10) == []
    assert not list(_sandbox_dir.glob("run-*"))


async def test_warm_rollouts_reuse_one_box_and_never_see_each_others_state(_sandbox_dir: Path) -> None:
    """``warm = true``: the runtimes of one config share one pool; a hostile rollout (files in its
    work folder and /tmp, a background process, a changed environment) leaves nothing for the next
    rollout on the same box; tool folders are refused in one line; closing stops every box."""
    from verifiers.v1.runtimes import close_warm_sandboxes

    marker = f"vf-warm-{secrets.token_hex(4)}"
    config = SandboxConfig(warm=True, timeout=20)
    first = SandboxRuntime(config)
    await first.start()
    await first.write("secret.txt", "one")
    r = await first.run(f"echo leak > /tmp/left.txt; export LEAK=1; (exec -a {marker} sleep 300 &) ; cat secret.txt")
    assert r.ok and r.stdout == "one"
    boxes = first._sandbox.pool.pids()
    assert len(boxes) == 1  # the rollout holds a pre-started box
    with pytest.raises(SandboxError, match="warm = false"):
        await first.prepare_tools(["pytest"])
    await first.stop()
    assert not live_processes(marker), "the rollout's background process outlived it"

    second = SandboxRuntime(config)
    assert second._sandbox is first._sandbox  # one pool for the config
    await second.start()
    r = await second.run("ls -A; ls -A /tmp; echo leak=${LEAK:-none}")
    assert r.ok and r.stdout.split() == ["leak=none"], r.stdout
    assert second._sandbox.pool.pids() == boxes  # the same pre-started box served the second rollout
    await second.stop()
    close_warm_sandboxes()
    assert not await wait_until_gone(marker, timeout=10)
    assert not _warm_leftovers(_sandbox_dir, boxes)


def _warm_leftovers(root: Path, boxes: list[int]) -> list[str]:
    """Warm boxes still alive (not zombies) and warm work folders or shared caches still on disk."""
    alive = []
    for pid in boxes:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(f"pid {pid}")
    return alive + [p.name for p in [*root.glob("warm-*"), *root.glob("run-*")]]


async def test_a_tasks_declared_resources_set_the_sandbox_limits_unless_the_config_sets_them(caplog, monkeypatch) -> None:
    """``TaskData.resources`` (GB) become the box's ``memory_mb`` / ``disk_mb``; a limit the runtime
    config sets wins; what the runtime cannot enforce (``cpu``, ``gpu``; everything on
    ``subprocess``) is ignored with one warning per runtime type and resource, never silently."""
    import logging

    import verifiers.v1 as vf
    from verifiers.v1 import runtimes
    from verifiers.v1.agents import RunContext, make_agent
    from verifiers.v1.runtimes import SubprocessConfig, task_runtime_config

    monkeypatch.setattr(runtimes, "_IGNORED_RESOURCES", set())  # warned once per process: start this test's count at none
    task = vf.Task(vf.TaskData(prompt="hi", resources={"memory": 0.125, "disk": 0.25, "cpu": 2}))
    plain = make_agent(AgentConfig(runtime={"type": "sandbox", "timeout": 20}), run_ctx=RunContext(client=None, model="m"))
    with caplog.at_level(logging.WARNING, logger="verifiers.v1.runtimes"):
        async with plain.provision(task) as box:
            r = await box.run_program(["/usr/bin/python3", "-c", "b = bytearray(256 * 1024 * 1024); print('ALLOCATED')"])
            assert not r.ok and "ALLOCATED" not in r.stdout and "MemoryError" in r.stderr  # 128 MB, not the 1 GB default
            assert (await box.run("ulimit -v")).stdout.split() == [str(128 * 1024)]
        async with plain.provision(vf.Task(vf.TaskData(prompt="hi"))) as box:  # nothing declared: the defaults
            assert (await box.run("ulimit -v")).stdout.split() == [str(1024 * 1024)]
        async with plain.provision(task) as box:
            pass
    warned = [rec.getMessage() for rec in caplog.records if "does not enforce" in rec.getMessage()]
    assert warned == ["the sandbox runtime does not enforce the task resource 'cpu' (2.0); ignoring it"]  # once, not per box

    configured = make_agent(AgentConfig(runtime={"type": "sandbox", "timeout": 20, "limits": {"memory_mb": 512}}),
                            run_ctx=RunContext(client=None, model="m"))  # fmt: skip
    async with configured.provision(task) as box:
        assert (await box.run("ulimit -v")).stdout.split() == [str(512 * 1024)]  # the config's limit wins
    assert task_runtime_config(SandboxConfig(), task.data.resources).limits == {"memory_mb": 128, "disk_mb": 256}
    sub = SubprocessConfig()
    assert task_runtime_config(sub, task.data.resources) is sub  # nothing it can enforce: unchanged
    # a hostile task cannot lift the box's limits past the host, nor pass a value that is no size
    huge = task_runtime_config(SandboxConfig(), vf.TaskData(prompt="hi", resources={"memory": 1e12, "disk": 1e12}).resources)
    assert huge.limits["memory_mb"] == runtimes._HOST_MB["memory_mb"]() and huge.limits["disk_mb"] == runtimes._HOST_MB["disk_mb"]()
    for bad in (float("nan"), float("inf"), -1.0, 0.0):
        with pytest.raises(SandboxError, match=r"resources\.memory must be a positive number"):
            task_runtime_config(SandboxConfig(), vf.TaskData(prompt="hi", resources={"memory": bad}).resources)
