"""Persistent sessions: state across calls, limits per cell, and clean shutdown on every path."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil

import pytest

from verifiers.sandbox import Sandbox, SandboxSession

from .conftest import run_dirs
from .support import wait_until_gone, wait_until_present

pytestmark = pytest.mark.sandbox


async def test_state_persists_across_cells(sandbox: Sandbox) -> None:
    async with sandbox.session() as session:
        first = await session.run_python("import math\nx = 20\ndef double(v):\n    return 2 * v\n")
        assert first.ok and first.value is None, first
        second = await session.run_python("print('x is', x)\ndouble(x) + math.floor(1.5)")
        assert second.ok, second
        assert second.stdout == "x is 20\n"
        assert second.value == "41"
        assert session.cells == 2


async def test_errors_keep_the_session_alive(sandbox: Sandbox) -> None:
    async with sandbox.session() as session:
        await session.run_python("counter = 1")
        failed = await session.run_python("counter += 1\nraise ValueError('boom')")
        assert failed.exit_code == 1 and not failed.killed
        assert "ValueError: boom" in failed.stderr
        assert "<cell 2>" in failed.stderr  # the traceback names the cell, not the REPL's internals
        assert "_run_cell" not in failed.stderr
        syntax = await session.run_python("def broken(:")
        assert "SyntaxError" in syntax.stderr
        exited = await session.run_python("raise SystemExit(3)")
        assert exited.exit_code == 1
        after = await session.run_python("counter")
        assert after.value == "2"


async def test_output_of_child_processes_and_stderr_is_captured(sandbox: Sandbox) -> None:
    async with sandbox.session() as session:
        result = await session.run_python(
            "import os, sys\nprint('py out')\nprint('py err', file=sys.stderr)\n"
            "os.system('echo shell out; echo shell err >&2')"
        )
        assert result.stdout == "py out\nshell out\n"
        assert result.stderr == "py err\nshell err\n"
        assert result.value == "0"


async def test_cell_timeout_restarts_the_interpreter(sandbox: Sandbox) -> None:
    async with sandbox.session(timeout=1.0) as session:
        await session.run_python("keep = 'me'")
        slow = await session.run_python("while True:\n    pass\n")
        assert slow.killed and slow.kill_reason == "timeout"
        again = await session.run_python("print('alive')\n'keep' in globals()")
        assert again.stdout == "alive\n"
        assert again.value == "False"
        assert "restarted" in again.stderr
        assert session.restarts == 1


async def test_memory_and_output_limits_in_a_cell(sandbox: Sandbox) -> None:
    async with sandbox.session(limits={"output_bytes": 10_000, "memory_mb": 512}) as session:
        await session.run_python("survivor = 42")
        mem = await session.run_python("x = bytearray(2 << 30)")
        assert mem.killed and mem.kill_reason == "memory"
        assert "MemoryError" in mem.stderr
        out = await session.run_python("print('y' * 50_000)")
        assert out.killed and out.kill_reason == "output"
        assert len(out.stdout) == 10_000
        # neither limit cost the session its state
        assert (await session.run_python("survivor")).value == "42"


async def test_interpreter_death_is_reported_and_recovered(sandbox: Sandbox) -> None:
    async with sandbox.session() as session:
        await session.run_python("a = 1")
        died = await session.run_python("import os\nos._exit(9)")
        assert died.exit_code == 9
        back = await session.run_python("'a' in globals()")
        assert back.value == "False"


async def test_files_persist_between_commands_and_cells(sandbox: Sandbox) -> None:
    async with sandbox.session(files={"data/input.txt": "3 4\n"}) as session:
        made = await session.run("cat data/input.txt | awk '{print $1 * $2}' > product.txt")
        assert made.ok, made
        cell = await session.run_python("open('product.txt').read().strip()")
        assert cell.value == "'12'"
        await session.run_python("open('from_python.txt', 'w').write('hello')")
        assert await session.read_file("from_python.txt") == b"hello"
        await session.write_files({"more.txt": "more"})
        assert (await session.run("cat more.txt")).stdout == "more"


async def test_read_file_refuses_links_out_of_the_work_dir(sandbox: Sandbox) -> None:
    async with sandbox.session() as session:
        await session.run("ln -s /etc/shadow leak")
        with pytest.raises(OSError):
            await session.read_file("leak")
        with pytest.raises(ValueError):
            await session.read_file("../outside")
        # a planted directory link must not lead the host-side reader or writer out of the work dir
        await session.run("ln -s /etc etc_link && ln -s /usr usr_link")
        with pytest.raises(OSError):
            await session.read_file("etc_link/passwd")
        with pytest.raises(OSError):
            await session.write_files({"usr_link/vf-planted": "x"})
        assert "vf-planted" not in await asyncio.to_thread(os.listdir, "/usr")


async def test_close_kills_everything_and_removes_the_dir(sandbox: Sandbox) -> None:
    marker = f"8{secrets.randbelow(10**6)}.5"
    session = sandbox.session()
    await session.start()
    await session.run_python(f"import subprocess\np = subprocess.Popen(['sleep', '{marker}'])")
    assert await wait_until_present(marker)
    workdir = session.workdir
    assert workdir.exists()
    await session.close()
    await session.close()  # idempotent
    assert session.closed
    assert await wait_until_gone(marker) == []
    assert not workdir.exists()


async def test_cancelled_rollout_closes_its_session(sandbox: Sandbox) -> None:
    marker = f"9{secrets.randbelow(10**6)}.5"
    entered = asyncio.Event()
    holder: list[SandboxSession] = []

    async def rollout() -> None:
        async with sandbox.session() as session:
            holder.append(session)
            await session.run_python(f"import subprocess\np = subprocess.Popen(['sleep', '{marker}'])")
            entered.set()
            await session.run_python("import time\ntime.sleep(60)", timeout=120)

    task = asyncio.create_task(rollout())
    await asyncio.wait_for(entered.wait(), 20)
    assert await wait_until_present(marker)  # exec may finish a moment after Popen returns
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holder[0].closed
    assert await wait_until_gone(marker) == []
    assert run_dirs() == []


async def test_failure_inside_the_block_closes_the_session(sandbox: Sandbox) -> None:
    with pytest.raises(RuntimeError):
        async with sandbox.session() as session:
            await session.run_python("x = 1")
            raise RuntimeError("rollout failed")
    assert session.closed
    assert run_dirs() == []


async def test_many_sessions_at_once(sandbox: Sandbox) -> None:
    async def one(i: int) -> str | None:
        async with sandbox.session() as session:
            await session.run_python(f"n = {i}")
            return (await session.run_python("n * n")).value

    values = await asyncio.gather(*(one(i) for i in range(8)))
    assert values == [str(i * i) for i in range(8)]
    assert run_dirs() == []


async def test_a_writable_mount_is_for_its_call_only(sandbox: Sandbox) -> None:
    from verifiers.sandbox.backends import SANDBOX_UID, drop_to_sandbox_uid, sandbox_root

    cache = sandbox_root() / f"rw-{secrets.token_hex(4)}"  # reachable by the sandbox's uid
    cache.mkdir(mode=0o755)
    if drop_to_sandbox_uid():
        os.chown(cache, SANDBOX_UID, SANDBOX_UID)
    try:
        async with sandbox.session() as session:
            wrote = await session.run("echo filled > /opt/cache/a.txt", rw_binds={str(cache): "/opt/cache"})
            assert wrote.ok, wrote.stderr
            assert (cache / "a.txt").read_text() == "filled\n"
            # the next call sees neither the mount nor, through it, the host folder
            again = await session.run("ls /opt/cache; echo x > /opt/cache/b.txt")
            assert not again.ok and not (cache / "b.txt").exists()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
