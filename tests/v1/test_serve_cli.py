"""``vf serve-env``: a pool from a config file, served until SIGTERM, with nothing left behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.v1.serve_helpers import PACKAGES, ROOT, echo_script, task_data
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.serve import EnvClient
from verifiers.v1.serve.cli import is_loopback, serve_settings


def _vf(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PACKAGES)])}
    return subprocess.Popen([sys.executable, "-m", "verifiers.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_serve_env_from_a_config_file_and_stop() -> None:
    folder = Path(tempfile.mkdtemp(prefix="vfs-cli-", dir="/tmp"))
    address = f"ipc://{folder}/env"
    (folder / "serve.toml").write_text(
        f'[env.taskset]\nid = "vf-serve-echo"\n\n[serve]\naddress = "{address}"\nmax_concurrent = 4\n\n'
        '[serve.pool]\ntype = "static"\nnum_workers = 2\n'
    )
    proc = await asyncio.to_thread(_vf, "serve-env", f"@{folder / 'serve.toml'}")
    try:
        async with ScriptedServer(echo_script) as srv, EnvClient(address) as client:
            await client.wait_for_server_startup(timeout=120)
            episode = await client.run(srv.base_url, "scripted-model", {}, task_data("cli"))
            status = await client.status()
        assert episode.ok and episode.traces[0].last_reply == "cli" and episode.traces[0].reward == 1.0
        assert len(status["workers"]) == 2
        workers = [w["pid"] for w in status["workers"] if w["pid"]]
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert f"serving vf-serve-echo (v1) on {address} (2 workers)" in out
        assert workers and not any(_alive(pid) for pid in workers)  # no worker outlives the pool
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


async def test_workers_stop_when_the_pool_is_killed() -> None:
    folder = Path(tempfile.mkdtemp(prefix="vfs-kill-", dir="/tmp"))
    address = f"ipc://{folder}/env"
    proc = await asyncio.to_thread(_vf, "serve-env", "vf-serve-echo", "--workers", "2", "--address", address)
    try:
        async with EnvClient(address) as client:
            await client.wait_for_server_startup(timeout=120)
            for _ in range(600):
                status = await client.status()
                if all(w["ready"] for w in status["workers"]):
                    break
                await asyncio.sleep(0.1)
        workers = [w["pid"] for w in status["workers"]]
        proc.kill()  # SIGKILL: no clean-up runs in the pool's process
        await asyncio.to_thread(proc.wait)
        for _ in range(300):
            if not any(_alive(pid) for pid in workers):
                break
            await asyncio.sleep(0.1)
        assert len(workers) == 2 and not any(_alive(pid) for pid in workers)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_serve_env_refuses_an_unknown_taskset_in_one_line() -> None:
    proc = _vf("serve-env", "no-such-taskset-here")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "no-such-taskset-here" in err and "Traceback" not in err


def test_settings_and_what_counts_as_exposed(tmp_path: Path) -> None:
    env, kwargs = serve_settings("vf-serve-echo", workers=3)
    assert env == {"taskset": {"id": "vf-serve-echo"}} and kwargs["allow_env"] == []
    assert kwargs["workers"] == 3 and kwargs["address"] == "tcp://127.0.0.1:5000"
    (tmp_path / "c.toml").write_text('[env.taskset]\nid = "x"\n[serve]\nmax_concurrent = 8\n[serve.pool]\ntype = "elastic"\nmax_workers = 5\n')
    (tmp_path / "c.toml").write_text((tmp_path / "c.toml").read_text().replace("max_concurrent = 8\n", 'max_concurrent = 8\nallow_env = ["VLLM_API_KEY"]\n'))
    env, kwargs = serve_settings(f"@{tmp_path / 'c.toml'}", address="tcp://127.0.0.1:0", allow_env=["OPENAI_API_KEY"])
    assert env == {"taskset": {"id": "x"}} and kwargs["max_concurrent"] == 8
    assert kwargs["allow_env"] == ["OPENAI_API_KEY", "VLLM_API_KEY"]  # the flag's and the file's
    with pytest.raises(Exception, match="allow_env"):
        serve_settings("vf-serve-echo", allow_env=["A,B"])
    assert (kwargs["min_workers"], kwargs["max_workers"], kwargs["workers"], kwargs["idle_timeout"]) == (1, 5, 1, 60.0)
    assert kwargs["address"] == "tcp://127.0.0.1:0"
    _, kwargs = serve_settings("vf-serve-echo", min_workers=2, max_workers=4)
    assert (kwargs["min_workers"], kwargs["max_workers"]) == (2, 4)
    with pytest.raises(Exception, match="min_workers <= max_workers"):
        serve_settings("vf-serve-echo", min_workers=3, max_workers=2)
    # an id that is no v1 taskset goes to the one loader (a classic environment), with its keywords
    env, _ = serve_settings("math-problems", env_args={"difficulty": "easy"})
    assert env == {"env_id": "math-problems", "env_args": {"difficulty": "easy"}}
    (tmp_path / "classic.toml").write_text('env_id = "math-problems"\n[env_args]\nseed = 3\n[serve.pool]\nnum_workers = 2\n')
    env, kwargs = serve_settings(f"@{tmp_path / 'classic.toml'}")
    assert env == {"env_id": "math-problems", "env_args": {"seed": 3}} and kwargs["workers"] == 2
    (tmp_path / "bad.toml").write_text("[serve]\naddress = 'tcp://127.0.0.1:1'\n")
    with pytest.raises(Exception, match=r"no \[env\] table"):
        serve_settings(f"@{tmp_path / 'bad.toml'}")
    for address in ("tcp://127.0.0.1:5000", "tcp://localhost:1", "tcp://[::1]:5", "ipc:///tmp/x"):
        assert is_loopback(address), address
    for address in ("tcp://0.0.0.0:5000", "tcp://*:5000", "tcp://10.1.2.3:5000", "tcp://eth0:1"):
        assert not is_loopback(address), address


def test_the_compose_env_server_runs_the_command_the_tests_run() -> None:
    """docker-compose.yml's env-server (no Docker engine here: checked by construction): the
    image's entry point is ``vf serve-env``, compose's command is the Dockerfile's default with its
    variables at their defaults, every flag exists, the port is published on loopback only, and
    the health check is Python that compiles and uses the client's ``health``."""
    import json

    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc = compose["services"]["env-server"]
    dockerfile = (ROOT / svc["build"]["dockerfile"]).read_text()
    line = {ln.split(" ", 1)[0]: json.loads(ln.split(" ", 1)[1]) for ln in dockerfile.splitlines() if ln.startswith(("CMD ", "ENTRYPOINT "))}
    assert line["ENTRYPOINT"] == ["vf", "serve-env"]
    defaults = [arg.replace("${VF_ENV:-sort-numbers}", "sort-numbers").replace("${VF_ENV_WORKERS:-2}", "2") for arg in svc["command"]]
    assert defaults == line["CMD"] and "tcp://0.0.0.0:5000" in defaults
    assert svc["ports"] == ["127.0.0.1:5000:5000"]
    helptext = subprocess.run([sys.executable, "-m", "verifiers.cli", "serve-env", "--help"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "COLUMNS": "200"}).stdout  # fmt: skip
    for flag in (a for a in defaults if a.startswith("--")):
        assert flag in helptext, flag
    check = svc["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"] and "client.health(" in check[3]
    compile(check[3], "healthcheck", "exec")
    env, kwargs = serve_settings("sort-numbers", address="tcp://0.0.0.0:5000", workers=2)
    assert env == {"taskset": {"id": "sort-numbers"}} and not is_loopback(kwargs["address"])  # the warning is printed


async def test_serve_env_serves_a_classic_environment_by_id() -> None:
    import verifiers as vf

    folder = Path(tempfile.mkdtemp(prefix="vfs-classic-", dir="/tmp"))
    address = f"ipc://{folder}/env"
    args = '{"difficulty": "easy", "num_train_examples": 2, "num_eval_examples": 2}'
    proc = await asyncio.to_thread(_vf, "serve-env", "math-problems", "--env-args", args, "--address", address,
                                   "--min-workers", "1", "--max-workers", "2")  # fmt: skip
    try:
        row = vf.load_environment("math-problems", difficulty="easy", num_train_examples=2, num_eval_examples=2).get_dataset().to_list()[0]
        async with ScriptedServer(lambda req: f"\\boxed{{{row['answer']}}}") as srv, EnvClient(address) as client:
            await client.wait_for_server_startup(timeout=120)
            episode = await client.run(srv.base_url, "scripted-model", {}, row)
            status = await client.status()
        assert episode.ok and episode.env.id == "math-problems" and episode.traces[0].reward == 1.0
        assert status["elastic"] and status["max_workers"] == 2
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert f"serving math-problems (classic) on {address} (1-2 workers)" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_request_cannot_have_the_servers_secrets_sent_to_the_endpoint_it_names(monkeypatch) -> None:
    """A run request names its own endpoint, so the variables its client config names
    (``api_key_var``, ``headers_from_env``) are read only when the server was told to hand them
    out; an unset one holds no secret and changes nothing (the original's clients name one by
    default)."""
    from verifiers.v1.serve.server import ALLOW_ENV_VAR, model_client_fields

    monkeypatch.setenv("VF_TEST_SERVER_SECRET", "s3cr3t")
    monkeypatch.delenv("VF_TEST_UNSET_VAR", raising=False)
    monkeypatch.delenv(ALLOW_ENV_VAR, raising=False)
    evil = "http://attacker.example/v1"
    with pytest.raises(ValueError, match="--allow-env VF_TEST_SERVER_SECRET"):
        model_client_fields({"base_url": evil, "api_key_var": "VF_TEST_SERVER_SECRET"})
    with pytest.raises(ValueError, match=r"headers_from_env\['X-Leak'\]"):
        model_client_fields({"base_url": evil, "headers_from_env": {"X-Leak": "VF_TEST_SERVER_SECRET"}})
    unset = model_client_fields({"base_url": evil, "api_key_var": "VF_TEST_UNSET_VAR", "headers_from_env": {"X": "VF_TEST_UNSET_VAR"}})
    assert unset == {"base_url": evil, "api_key_var": "VF_TEST_UNSET_VAR"}
    monkeypatch.setenv(ALLOW_ENV_VAR, "OTHER, VF_TEST_SERVER_SECRET")
    allowed = model_client_fields({"base_url": "http://vllm:8000/v1", "api_key_var": "VF_TEST_SERVER_SECRET", "headers_from_env": {"X-Key": "VF_TEST_SERVER_SECRET"}})
    assert allowed["api_key_var"] == "VF_TEST_SERVER_SECRET" and allowed["headers"] == {"X-Key": "s3cr3t"}


async def test_the_servers_model_clients_make_room_for_new_endpoints(monkeypatch, tmp_path: Path) -> None:
    """A stream of distinct endpoints never locks the server out of new ones: past MAX_CLIENTS the
    least recently used client no run is using is closed and replaced; only when every client is
    in use is a new endpoint refused (until one is free)."""
    from verifiers.v1.serve import server as server_module

    monkeypatch.setattr(server_module, "MAX_CLIENTS", 2)
    server = server_module.EnvServer({"taskset": {"id": "vf-serve-echo"}}, f"ipc://{tmp_path}/s")
    try:
        a, _ = server._model_client({"base_url": "http://a.local/v1"})
        b, client_b = server._model_client({"base_url": "http://b.local/v1"})
        server._in_use[b] = 1  # a run is using b
        c, _ = server._model_client({"base_url": "http://c.local/v1"})  # a is idle: it makes room
        assert list(server._clients) == [b, c] and a not in server._clients
        assert server._model_client({"base_url": "http://b.local/v1"})[1] is client_b  # kept, and now the newest
        server._in_use[c] = 1
        with pytest.raises(ValueError, match="all in use"):
            server._model_client({"base_url": "http://d.local/v1"})
        del server._in_use[c]
        d, _ = server._model_client({"base_url": "http://d.local/v1"})  # c is free again: it goes
        assert list(server._clients) == [b, d]
        await asyncio.gather(*server._tasks)  # the evicted clients were closed
    finally:
        server.socket.close(0)
        server.ctx.term()


async def test_a_server_on_an_ipc_socket_leaves_no_socket_file(tmp_path: Path) -> None:
    from verifiers.v1.serve.server import EnvServer

    path = tmp_path / "s"
    server = EnvServer({"taskset": {"id": "vf-serve-echo"}}, f"ipc://{path}")
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve(stop))
    for _ in range(100):
        if path.exists():
            break
        await asyncio.sleep(0.05)
    assert path.exists()
    stop.set()
    await asyncio.wait_for(serving, 30)
    assert not path.exists()


def test_a_client_that_names_no_key_variable_asks_for_none(monkeypatch) -> None:
    """Our env client sends the key variable its model client names, and none when it names none:
    a trainer's keyless vLLM client never has the server's OPENAI_API_KEY read (and refused, or
    sent to the trainer's endpoint)."""
    from verifiers.clients import ClientConfig, ModelClient
    from verifiers.v1.serve.client import client_config_data
    from verifiers.v1.serve.server import ALLOW_ENV_VAR, model_client_fields

    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-servers-own")
    monkeypatch.delenv(ALLOW_ENV_VAR, raising=False)
    keyless = client_config_data(ModelClient(ClientConfig(base_url="http://127.0.0.1:8000/v1")))
    assert keyless["api_key_var"] == "" and keyless["type"] == "eval"
    fields = model_client_fields(keyless)  # no variable read, nothing refused
    assert fields["base_url"] == "http://127.0.0.1:8000/v1" and "api_key_var" not in fields and "headers" not in fields
    named = client_config_data({"base_url": "http://127.0.0.1:8000/v1", "api_key_var": "VLLM_KEY"})
    assert named["api_key_var"] == "VLLM_KEY"


async def test_a_lone_servers_runs_are_keyed_by_client_and_request_id(tmp_path: Path) -> None:
    """Without a pool in front: one client cannot cancel another's run by its id, and a second run
    under an id still running is refused (the first is neither lost nor doubled)."""
    import zmq
    import zmq.asyncio

    from verifiers.v1.serve import EnvServerError
    from verifiers.v1.serve.server import EnvServer
    from verifiers.v1.wire import pack, unpack

    server = EnvServer({"taskset": {"id": "vf-serve-echo"}}, f"ipc://{tmp_path}/s")
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve(stop))
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    try:
        async with ScriptedServer(echo_script) as model, EnvClient(server.address) as owner, EnvClient(server.address) as other:
            await owner.wait_for_server_startup(timeout=60)
            mine = asyncio.ensure_future(owner.run(model.base_url, "scripted-model", {}, task_data("slow-mine"), request_id="same"))
            for _ in range(200):
                if (await owner.status())["running"] == 1:
                    break
                await asyncio.sleep(0.05)
            assert await other.cancel("same") is False  # not its run
            with pytest.raises(ValueError, match="already in flight on this client"):  # refused before it is sent
                await owner.run(model.base_url, "scripted-model", {}, task_data("again"), request_id="same")
            assert not mine.done() and await owner.cancel("same") is True
            with pytest.raises(EnvServerError, match="Cancelled"):
                await asyncio.wait_for(mine, 30)
            # a client that sends a run id twice anyway: the second is refused, the first runs on
            raw.connect(server.address)
            run = {"task_data": task_data("slow-raw"), "client": {"base_url": model.base_url}, "model": "m", "sampling": {}}
            await raw.send_multipart([b"dup", b"run", pack(run)])
            await raw.send_multipart([b"dup", b"run", pack(run)])
            rid, kind, data = await asyncio.wait_for(raw.recv_multipart(), 30)
            while kind != b"reply":  # the first run's streamed trace
                rid, kind, data = await asyncio.wait_for(raw.recv_multipart(), 30)
            assert rid == b"dup" and "already running" in unpack(data)["error"]
            await raw.send_multipart([b"c1", b"cancel", pack({"request_id": "dup"})])
            replies = {}
            while len(replies) < 2:
                rid, kind, data = await asyncio.wait_for(raw.recv_multipart(), 30)
                if kind == b"reply":
                    replies[rid] = unpack(data)
            assert replies[b"c1"]["cancelled"] is True and "Cancelled" in replies[b"dup"]["error"]
    finally:
        raw.close(0)
        ctx.term()
        stop.set()
        await asyncio.wait_for(serving, 30)
