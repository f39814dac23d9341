"""Warm sandboxes (``verifiers.sandbox.warm``).

Every attack of test_attacks.py and every session test of test_session.py runs again here on a
warm sandbox (the ``sandbox`` fixture below replaces the conftest one for them). Then what is particular to reuse: whatever a job does, the next
job on the *same* sandbox sees exactly what a job on a fresh one sees; a sandbox whose reset cannot
be trusted is replaced; the results of ``run_python_tests`` are those of a cold run; and nothing of
a pool is left once it is closed, the interpreter exits, or the host process is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from collections.abc import Iterator

import pytest

from verifiers.sandbox import Sandbox, run_python_tests

from .conftest import REPO, sandbox_root
from .support import wait_until_gone, wait_until_present
from .test_attacks import *  # noqa: F403  (every attack again, on a warm sandbox)
from .test_attacks import assert_next_run_ok
from .test_session import *  # noqa: F403  (and every session test, on warm sessions)

# that one starts its own cold sandbox in another process; the warm version is below
del test_killing_the_host_runner_kills_everything  # noqa: F821

pytestmark = pytest.mark.sandbox


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    sb = Sandbox("bwrap", timeout=10, warm=True, warm_size=2)
    yield sb
    sb.close()


@pytest.fixture
def single() -> Iterator[Sandbox]:
    """A pool of one: consecutive jobs land on the same sandbox unless it is replaced."""
    sb = Sandbox("bwrap", timeout=20, warm=True, warm_size=1)
    yield sb
    sb.close()


def warm_dirs() -> list[str]:
    return sorted(p.name for p in sandbox_root().glob("warm-*"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


# What a job can observe of the sandbox it runs in: run on a fresh sandbox and again after hostile
# jobs on the same one, it must report the same.
PROBE = r"""
import ctypes, json, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
tops = ("/workspace", "/tmp", "/dev/shm")
mtimes = {t: os.stat(t).st_mtime_ns for t in tops}
with open("/tmp/probe.bin", "wb") as f:  # the tmpfs has room again
    f.write(b"\0" * (8 << 20))
os.unlink("/tmp/probe.bin")
def ipc(kind):
    with open("/proc/sysvipc/" + kind) as f:
        return f.read().splitlines()[1:]
print(json.dumps({
    "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
    "files": {t: sorted(os.listdir(t)) for t in tops},
    "modes": {t: oct(os.stat(t).st_mode) for t in tops},
    "mtimes": mtimes,
    "xattrs": {t: os.listxattr(t) for t in tops},
    "env": sorted(os.environ.items()),
    "python": [json.dumps([1]), len(sys.modules["builtins"].__dict__), sys.path[0], sorted(sys.modules) == sorted(sys.modules)],
    "builtins_print": print.__module__,
    "ipc": [ipc(k) for k in ("shm", "msg", "sem")],
    "key": libc.syscall(249, b"user", b"left-by-a-job", None, 0),
    "limits": [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")],
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
}, sort_keys=True))
"""

HOSTILE = r"""
import builtins, ctypes, json, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
out = {}
# processes that try to outlive the job: a child, one in its own session, a double-forked daemon
subprocess.Popen(["sleep", "MARKER"])
subprocess.Popen(["setsid", "sleep", "MARKER"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "MARKER"])
    os._exit(0)
# files in every writable place, some hard to remove, and the tmpfs filled up
for top in ("/workspace", "/tmp", "/dev/shm"):
    with open(top + "/left.txt", "w") as f:
        f.write("from an earlier job")
    os.makedirs(top + "/locked/deeper")
    os.chmod(top + "/locked", 0)
    os.symlink("/etc/passwd", top + "/link")
    os.mkfifo(top + "/fifo")
    os.chmod(top, 0o777)
    os.utime(top, (1, 1))
    try:
        os.setxattr(top, "user.left", b"1")
    except OSError:
        pass
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 20))
except OSError as exc:
    out["tmp_full"] = exc.errno
# kernel objects shared by one IPC / user namespace
out["shmget"] = libc.shmget(0, 4096, 0o1000 | 0o600)
out["msgget"] = libc.msgget(0, 0o1000 | 0o600)
out["add_key"] = [libc.syscall(248, b"user", b"left-by-a-job", b"secret", 6, -4), ctypes.get_errno()]
rt = ctypes.CDLL("librt.so.1", use_errno=True)
out["mq_open"] = rt.mq_open(b"/left", os.O_CREAT | os.O_RDWR, 0o600, None)
# the supervisor: signals, ptrace, its memory
for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGINT):
    os.kill(1, sig)
out["ptrace"] = [libc.ptrace(16, 1, 0, 0), ctypes.get_errno()]
try:
    open("/proc/1/mem", "rb").read(1)
    out["mem"] = "read"
except OSError as exc:
    out["mem"] = type(exc).__name__
# environment and interpreter state
os.environ["LEFT"] = "1"
os.putenv("LEFT2", "1")
sys.path.insert(0, "/tmp/evil")
json.dumps = None
print(json.JSONEncoder().encode(out))
builtins.print = None
time.sleep(0.2)  # let the background processes start
"""


async def probe(sb: Sandbox) -> dict:
    result = await sb.run(python=PROBE)
    assert result.ok, result
    return json.loads(result.stdout)


async def test_a_hostile_job_leaves_nothing_for_the_next_one(single: Sandbox) -> None:
    clean = await probe(single)
    assert clean["pids"] == 2  # the supervisor and the probe itself
    marker = f"8{secrets.randbelow(10**6)}.5"
    hostile = await single.run(python=HOSTILE.replace("MARKER", marker))
    assert hostile.ok, hostile
    seen = json.loads(hostile.stdout)
    assert seen["tmp_full"] == 28  # ENOSPC: it did fill /tmp
    assert seen["shmget"] >= 0 and seen["msgget"] >= 0  # it did create System V objects
    assert seen["add_key"] == [-1, 1]  # keyrings (shared by a user namespace) are refused: EPERM
    assert seen["mq_open"] == -1  # no POSIX queue may outlive the job
    assert seen["ptrace"][0] == -1 and seen["mem"] == "PermissionError"
    # a second job kills whatever it can signal
    killer = await single.run("kill -9 -1; echo survived")
    assert killer.stdout == "survived\n"  # kill(-1) spares the caller, and PID 1 ignores it
    assert await wait_until_gone(marker) == []
    after = await probe(single)
    assert after == clean
    assert (single.pool.started, single.pool.discarded) == (1, 0)  # one sandbox all along


async def test_a_job_that_lowers_the_supervisors_limits_gets_the_sandbox_replaced(single: Sandbox) -> None:
    clean = await probe(single)
    result = await single.run("prlimit --pid 1 --nofile=16:16 --as=100000000 && renice -n 10 -p 1 >/dev/null && echo lowered")
    assert result.stdout == "lowered\n", result
    assert (single.pool.started, single.pool.discarded) == (1, 1)
    fresh = await probe(single)  # on a new sandbox: only its folders' times differ
    assert {**fresh, "mtimes": None} == {**clean, "mtimes": None}
    assert single.pool.started == 2


async def test_run_python_tests_gives_the_same_report_warm_and_cold() -> None:
    cold, warm = Sandbox("bwrap", warm=False), Sandbox("bwrap", warm=True, warm_size=2)
    cases = [
        ("def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3", "assert add(0, 0) == 1", "assert add('a', 'b') == 'ab'"], {}),
        ("def add(a, b)\n    return a + b\n", ["assert add(1, 2) == 3"], {}),
        ("import os\nos._exit(0)\n", ["assert True"], {}),
        ("import sys\nprint('x' * 5000)\nsys.stderr.write('noise')\ndef f():\n    while True:\n        pass\n", ["f()", "assert 1"], {"test_timeout": 0.5}),
        ("def f(x):\n    return x * 2\n", ["def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 6\n"], {"entry_point": "f"}),
        ("import os\nos.environ['X'] = '1'\nraise SystemExit(3)\n", ["assert 1"], {}),
    ]
    try:
        for program, tests, kwargs in cases:
            a = await run_python_tests(cold, program, tests, timeout=10, **kwargs)
            b = await run_python_tests(warm, program, tests, timeout=10, **kwargs)
            assert a.to_dict() == b.to_dict(), program
            assert (a.run.exit_code, a.run.killed) == (b.run.exit_code, b.run.killed)
        assert warm.pool.started >= 1  # the warm reports did come from warm sandboxes
    finally:
        warm.close()


async def test_close_leaves_no_sandbox_process_and_no_folder() -> None:
    sb = Sandbox("bwrap", warm=True, warm_size=3)
    results = await asyncio.gather(*(sb.run("sleep 0.3; echo ok") for _ in range(3)))
    assert [r.stdout for r in results] == ["ok\n"] * 3
    pids, dirs = sb.pool.pids(), [ws.workdir for ws in sb.pool._live]
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    assert len(dirs) == 3 and all(d.name in warm_dirs() for d in dirs)
    sb.close()
    assert not any(alive(pid) for pid in pids)
    assert not any(d.exists() for d in dirs)
    await assert_next_run_ok(sb)  # a closed pool is replaced on the next warm run
    sb.close()


async def test_cancelling_a_run_kills_it_and_removes_its_dir(sandbox: Sandbox) -> None:
    marker = f"7{secrets.randbelow(10**6)}.5"
    task = asyncio.create_task(sandbox.run(f"sleep {marker}", timeout=60))
    assert await wait_until_present(marker)
    pids, dirs = sandbox.pool.pids(), [ws.workdir for ws in sandbox.pool._live]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(marker) == []
    assert not any(alive(pid) for pid in pids)  # the cancelled job's sandbox was thrown away
    assert not any(d.exists() for d in dirs) and sandbox.pool.discarded == 1
    await assert_next_run_ok(sandbox)


_RUNNER = """
import asyncio, sys
from verifiers.sandbox import Sandbox
sb = Sandbox("bwrap", warm=True, warm_size=2)
async def main():
    await asyncio.gather(sb.run("echo ok"), sb.run("echo ok"))
    print(*sb.pool.pids(), flush=True)
    if sys.argv[1] == "wait":
        await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
async def test_no_sandbox_survives_its_host_process(ending: str) -> None:
    runner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RUNNER, "wait" if ending == "sigkill" else "exit",
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert runner.stdout is not None
        line = await asyncio.wait_for(runner.stdout.readline(), 60)
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2
        if ending == "sigkill":
            runner.send_signal(signal.SIGKILL)  # no cleanup code of ours runs
        await asyncio.wait_for(runner.wait(), 60)
    finally:
        if runner.returncode is None:
            runner.kill()
    deadline = asyncio.get_running_loop().time() + 30  # a guard: it returns as soon as they are gone
    while any(alive(pid) for pid in pids) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


def test_run_sync_callers_share_one_pool() -> None:
    sb = Sandbox("bwrap", warm=True, warm_size=1)
    try:
        assert [sb.run_sync(python=f"print({i})").stdout for i in range(3)] == ["0\n", "1\n", "2\n"]
        assert (sb.pool.started, sb.pool.discarded) == (1, 0)  # each call ran in a fresh event loop
    finally:
        sb.close()


async def test_sessions_never_wait_for_a_busy_pool_and_the_surplus_stops() -> None:
    sb = Sandbox("bwrap", warm=True, warm_size=1)
    try:
        sessions = [sb.session() for _ in range(3)]  # three rollouts at once, a pool of one
        cells = asyncio.gather(*(s.run_python(f"{i} * 2") for i, s in enumerate(sessions)))
        assert [r.value for r in await asyncio.wait_for(cells, 60)] == ["0", "2", "4"]
        assert len(sb.pool.pids()) == 3
        for s in sessions:
            await s.close()
        assert len(sb.pool.pids()) == 1 and sb.pool.discarded == 0  # one kept warm, reset
    finally:
        sb.close()


async def test_a_warm_sessions_commands_run_in_its_sandbox_keeping_files_not_processes(single: Sandbox) -> None:
    where = "tr '\\0' '\\n' < /proc/1/cmdline | sed -n 2p"  # PID 1: our supervisor (-I), or bwrap's reaper
    async with single.session() as session:
        first = await session.run(f"{where}; echo kept > f.txt; echo gone > /tmp/t; sleep 1000 & echo started")
        assert first.stdout == "-I\nstarted\n", first
        second = await session.run(f"{where}; cat f.txt; ls /tmp; ps -e -o comm= | grep -c sleep")
        assert second.stdout == "-I\nkept\n0\n", second
        assert (await session.run_python("x = open('f.txt').read()\nx")).value == "'kept\\n'"
        # while the interpreter holds the sandbox, a command runs cold on the same work folder
        third = await session.run(f"{where}; cat f.txt")
        assert third.stdout == "--unshare-all\nkept\n", third
        assert (await session.run_python("x")).value == "'kept\\n'"  # the interpreter lived on
    assert (single.pool.started, single.pool.discarded) == (1, 0)
    async with single.session() as session:  # the next rollout: same sandbox, nothing left
        assert (await session.run("ls -A /workspace /tmp")).stdout == "/tmp:\n\n/workspace:\n"
    assert single.pool.started == 1
