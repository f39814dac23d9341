"""The subprocess runtime (programs, files, PEP 723 scripts through the venv's uv) and the
container runtimes' configs (they load; starting one is refused with one line)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.server
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from verifiers.v1.agents import AgentConfig
from verifiers.v1.env import load_environment
from verifiers.v1.errors import SandboxError
from verifiers.v1.plugins import PluginError
from verifiers.v1.runtimes import (
    DockerConfig,
    SubprocessConfig,
    SubprocessRuntime,
    make_runtime,
    resolve_runtime_config,
)


async def test_the_originals_run_shape_an_argv_and_a_positional_env(tmp_path) -> None:
    rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path))
    await rt.start()
    r = await rt.run(["printf", "%s|", "a b", "$X"], {"X": "unused"})  # no shell: nothing expands
    assert (r.exit_code, r.stdout) == (0, "a b|$X|")
    r = await rt.run(["sh", "-c", 'printf "%s" "$X"; exit 4'], {"X": "from env"})
    assert (r.exit_code, r.returncode, r.stdout) == (4, 4, "from env")
    with pytest.raises(TypeError):
        await rt.run([])
    await rt.write("big.bin", b"x" * 100)
    assert await rt.read("big.bin", max_bytes=100) == b"x" * 100
    with pytest.raises(SandboxError, match="over the 99 byte limit"):
        await rt.read("big.bin", max_bytes=99)


async def test_run_write_read_and_a_killed_program(tmp_path) -> None:
    rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path, env={"GREETING": "hi"}))
    await rt.start()
    await rt.write("sub/a.txt", "hello")
    assert await rt.read("sub/a.txt") == b"hello"
    r = await rt.run("cat sub/a.txt; echo \" $GREETING\"; echo err >&2; exit 3")
    assert (r.returncode, r.stdout, r.stderr) == (3, "hello hi\n", "err\n") and not r.ok
    r = await rt.run_program([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], stdin="abc")
    assert r.stdout.strip() == "ABC" and r.ok
    slow = await rt.run("sleep 30 & wait", timeout=0.5)  # the whole group goes, the child too
    assert slow.timed_out and not slow.ok
    await rt.stop()


async def test_a_fresh_workdir_per_runtime_is_removed_at_stop() -> None:
    rt = SubprocessRuntime()
    await rt.start()
    folder = rt.workdir
    await rt.write("x", "1")
    assert folder.is_dir()
    await rt.stop()
    assert not folder.exists()


async def test_a_very_deep_folder_a_program_left_is_removed_at_stop() -> None:
    # a model-written program nests folders past Python's recursion limit: stop() still removes
    # the rollout's fresh folder (a recursive rmtree raised RecursionError and left it behind)
    rt = SubprocessRuntime()
    await rt.start()
    await rt.write("x", "1")
    folder = rt.workdir
    r = await rt.run_program([sys.executable, "-c", "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')"])
    assert r.ok, r.stderr
    await rt.stop()
    assert not folder.exists()


def _wheel(folder: Path) -> Path:
    """A one-module wheel built by hand (no build backend, no network)."""
    name = "vfprobe-1.0-py3-none-any.whl"
    files = {
        "vfprobe/__init__.py": b"VALUE = 42\n",
        "vfprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vfprobe\nVersion: 1.0\n",
        "vfprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("vfprobe-1.0.dist-info/RECORD,,")
    files["vfprobe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = folder / name
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return out


@contextlib.contextmanager
def _index(wheel: Path, delay: float = 0.0):
    """A PEP 503 package index on loopback serving ``wheel`` (a registry, without the network);
    ``delay``: seconds it waits before sending the wheel (a slow registry)."""
    pages = {"/simple/": b'<a href="/simple/vfprobe/">vfprobe</a>',
             "/simple/vfprobe/": f'<a href="/files/{wheel.name}">{wheel.name}</a>'.encode(),
             f"/files/{wheel.name}": wheel.read_bytes()}  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self, head: bool = False) -> None:
            body = pages.get(self.path)
            if delay and self.path.startswith("/files/"):
                time.sleep(delay)
            self.send_response(200 if body is not None else 404)
            self.send_header("content-type", "text/html" if self.path.startswith("/simple") else "application/octet-stream")
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            if not head:
                self.wfile.write(body or b"")

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple"
    finally:
        server.shutdown()
        server.server_close()


async def test_uv_script_runs_offline_from_a_warm_cache(tmp_path) -> None:
    wheel = _wheel(tmp_path)
    base_env = {"UV_PYTHON": sys.executable, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}
    script = """# /// script
# requires-python = ">=3.11"
# dependencies = ["vfprobe==1.0"]
# ///
import sys, vfprobe
print(vfprobe.VALUE, sys.argv[1:])
"""
    with _index(wheel) as index:
        env = {**base_env, "UV_INDEX_URL": index}
        rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path / "work", uv_cache_dir=tmp_path / "uv-cache", env=env))
        await rt.start()
        await rt.write("probe.py", script)
        await rt.prepare_uv_script("probe.py")
    # the registry is gone: only the warm cache can serve the script now
    warm = await rt.run_uv_script("probe.py", ["a", "b"], offline=True)
    assert warm.ok, warm.stderr
    assert warm.stdout.strip() == "42 ['a', 'b']"
    # the same script with a cold cache has nothing to run from
    cold_rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path / "work", uv_cache_dir=tmp_path / "cold", env=env))
    await cold_rt.start()
    cold = await cold_rt.run_uv_script("probe.py", ["a"], offline=True)
    assert not cold.ok and "vfprobe" in cold.stderr
    await rt.stop()


async def test_prepare_failure_is_one_sandbox_error(tmp_path) -> None:
    rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path, uv_cache_dir=tmp_path / "c", env={"UV_OFFLINE": "1", "UV_PYTHON": sys.executable}))
    await rt.start()
    await rt.write("bad.py", '# /// script\n# dependencies = ["no-such-package-vf-test==9.9"]\n# ///\n')
    with pytest.raises(SandboxError, match="could not prepare"):
        await rt.prepare_uv_script("bad.py")


@pytest.mark.parametrize("kind", ["docker", "podman", "apptainer", "prime", "modal", "e2b"])
def test_container_runtime_configs_load_and_are_refused_at_start(kind) -> None:
    cfg = resolve_runtime_config({"type": kind, "id": "box-1", "image": "python:3.12"})
    assert cfg.type == kind and cfg.id == "box-1"
    with pytest.raises(SandboxError) as err:
        make_runtime(cfg)
    assert "\n" not in str(err.value) and kind in str(err.value)
    # through an env: refused before any episode, one line naming the role
    env = load_environment({"taskset": {"id": "vf-sums"}, "agent": {"runtime": {"type": kind}}})
    with pytest.raises(PluginError) as err:
        env.check()
    assert str(err.value).startswith("[env.agent.runtime]") and "\n" not in str(err.value)


def test_the_default_runtime_is_subprocess_and_unknown_types_are_refused() -> None:
    assert isinstance(AgentConfig().runtime, SubprocessConfig)
    assert isinstance(AgentConfig(runtime={"type": "docker"}).runtime, DockerConfig)
    with pytest.raises(ValueError, match="unknown runtime type 'dockr'"):
        AgentConfig(runtime={"type": "dockr"})
    with pytest.raises(ValueError):
        AgentConfig(runtime={"type": "subprocess", "imgae": "x"})  # a typo is not ignored


@pytest.mark.parametrize("harness", ["claude_code", "codex", "terminus_2", "openclaw", "pi", "kimi_code",
                                     "hermes_agent", "prime_agent", "browser_use", "rlm"])  # fmt: skip
def test_external_agent_programs_load_and_are_refused_at_start(harness) -> None:
    env = load_environment({"taskset": {"id": "vf-sums"}, "agent": {"harness": {"id": harness, "version": "1.2"}}})
    with pytest.raises(PluginError) as err:
        env.check()
    msg = str(err.value)
    assert msg.startswith("[env.agent.harness]") and "external agent program" in msg and "\n" not in msg


async def test_a_fresh_workdir_is_made_only_when_used() -> None:
    """A rollout whose harness runs nothing in its runtime (the null harness) touches no disk;
    the first use makes the folder (0700), and stop removes it, read-only entries included."""
    import stat

    def exists(path: object) -> bool:
        return Path(str(path)).exists()

    idle = SubprocessRuntime()
    await idle.start()
    planned = idle.info["workdir"]
    assert not exists(planned)
    await idle.stop()
    assert not exists(planned)

    rt = SubprocessRuntime()
    await rt.start()
    await rt.write("sub/x", "1")
    folder = rt.workdir
    assert folder == Path(rt.info["workdir"]) and stat.S_IMODE(folder.stat().st_mode) == 0o700
    (folder / "sub" / "x").chmod(0o400)
    (folder / "sub").chmod(0o500)
    await rt.stop()
    assert not folder.exists()


async def test_a_configured_workdir_is_made_recorded_and_kept(tmp_path) -> None:
    from verifiers.v1.runtimes import SubprocessConfig

    box = tmp_path / "box"
    rt = SubprocessRuntime(SubprocessConfig(workdir=f"{tmp_path}//box/"))
    assert rt.info == {"type": "subprocess", "workdir": str(box)}
    await rt.start()
    assert rt.workdir == box and box.is_dir() and rt.info["workdir"] == str(box)
    await rt.stop()
    assert box.is_dir()  # a configured folder is the user's: kept


def _gone(pid: int) -> bool:
    """Whether ``pid`` ends within 5 s (a zombie counts as ended: its reaping is its parent's)."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


async def test_a_live_process_talks_over_its_stdio_and_ends_with_the_runtime(monkeypatch) -> None:
    """``open_process``: a program that runs while its caller writes to its stdin and reads its
    output, in the work folder with the runtime's environment (no host ``*API_KEY*``); one still
    running when the runtime stops is killed, its whole process group with it."""
    import signal

    from verifiers.v1 import RuntimeProcess
    from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime
    from verifiers.v1.runtimes.subprocess import SubprocessProcess

    monkeypatch.setenv("HOST_API_KEY", "sk-host")
    rt = SubprocessRuntime(SubprocessConfig(env={"GIVEN": "yes"}))
    await rt.start()
    echo = ("import os, sys\nprint(os.getcwd(), os.environ.get('GIVEN'), os.environ.get('HOST_API_KEY'), flush=True)\n"
            "for line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n")  # fmt: skip
    proc = await rt.open_process([sys.executable, "-c", echo])
    assert isinstance(proc, RuntimeProcess) and isinstance(proc, SubprocessProcess)
    out = b""
    await proc.write(b"hello\n")
    while out.count(b"\n") < 2:
        out += await anext(proc.stdout)
    assert out.decode().splitlines() == [f"{rt.workdir} yes None", "HELLO"]
    assert await proc.poll() is None
    await proc.terminate()
    assert await proc.wait() == -signal.SIGTERM and await proc.poll() == -signal.SIGTERM
    # one left running (with a child of its own) is killed with its group when the runtime stops
    stuck = await rt.open_process([sys.executable, "-c", "import subprocess, sys, time\n"
                                   "c = subprocess.Popen(['sleep', '300']); print(c.pid, flush=True); time.sleep(300)"])  # fmt: skip
    child = int((await anext(stuck.stdout)).split()[0])
    await rt.stop()
    assert await stuck.poll() == -signal.SIGKILL
    assert await asyncio.to_thread(_gone, child), "the process group's child outlived the runtime"
    with pytest.raises(NotImplementedError, match="does not support live processes"):
        await SandboxRuntime(SandboxConfig()).open_process(["true"])
