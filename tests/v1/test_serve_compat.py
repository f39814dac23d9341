"""Our env servers and the original 0.4.0's, on one wire, both ways (what prime-rl's orchestrator speaks).

The original ``verifiers==0.4.0`` runs from the venv ``test_wire_compat`` installs from the package
index (shared and cached). (a) its ``EnvClient`` drives our pool of workers serving a v1 taskset
(``vf-serve-echo``, written for these tests to load under both); (b) our ``EnvClient`` drives the
original's ``serve_env`` pool serving the same taskset from the same file. The model is our
scripted OpenAI-compatible server on loopback (it streams, as the original's interception needs).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.v1.serve_helpers import PACKAGES, Served, echo_script, task_data
from tests.v1.test_wire_compat import _original_python
from verifiers.testing.scripted import ScriptedServer

ORIGINAL_CLIENT = r'''
import asyncio, json, sys
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig

async def main():
    address, base_url, out = sys.argv[1:4]
    client = EnvClient(address)
    await client.wait_for_server_startup(timeout=240)
    endpoint = EvalClientConfig(base_url=base_url, api_key_var="NO_KEY_NEEDED")
    tasks = [{"prompt": f"Repeat: word{i}", "word": f"word{i}", "id": f"e{i}", "idx": i} for i in range(3)]
    episodes = await asyncio.gather(*(client.run(endpoint, "scripted-model", SamplingConfig(temperature=0.5), t) for t in tasks))
    try:
        await client.run(endpoint, "scripted-model", SamplingConfig(), {"prompt": "Repeat: x", "idx": 9})
        refused = None
    except RuntimeError as exc:
        refused = str(exc)
    facts = [{
        "ok": ep.ok, "errors": [e.model_dump() for e in ep.errors], "task_word": ep.task.data.model_extra["word"],
        "reward": ep.traces[0].reward, "last_reply": ep.traces[0].last_reply, "num_turns": ep.traces[0].num_turns,
        "rewards": {k: v.model_dump() for k, v in ep.traces[0].rewards.items()}, "metrics": ep.traces[0].metrics,
        "token_ids": [list(b.token_ids) for b in ep.traces[0].branches], "sampled": [n.sampled for n in ep.traces[0].nodes],
        "traces": len(ep.traces), "env": ep.env.id,
    } for ep in episodes]
    healthy = await client.health()
    await client.close()
    open(out, "w").write(json.dumps({"episodes": facts, "refused": refused, "healthy": healthy}))

asyncio.run(main())
'''

ORIGINAL_SERVER = r'''
import sys
from verifiers.v1.serve import serve_env
from verifiers.v1.utils.loaders import resolve_env_config

if __name__ == "__main__":
    config = resolve_env_config({"taskset": {"id": "vf-serve-echo"},
                                 "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}})
    serve_env(max_workers=2, elastic=False, address=sys.argv[1], config_data=config.model_dump(mode="json"))
'''


def _env(*paths: Path) -> dict[str, str]:
    """The original's environment: ours without our import path (its harness setup runs ``uv``,
    which needs the proxy and certificate settings and uses the uv cache)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"NO_KEY_NEEDED": "x"}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return env


@pytest.fixture(scope="module")
def original_python() -> Path:
    return _original_python()


async def test_the_original_client_drives_our_pool(original_python: Path, tmp_path: Path) -> None:
    served = Served(workers=2)
    try:
        async with ScriptedServer(echo_script, token_ids=True, logprobs=True) as srv:
            (tmp_path / "client.py").write_text(ORIGINAL_CLIENT)
            proc = await asyncio.create_subprocess_exec(
                str(original_python), str(tmp_path / "client.py"), served.address, srv.base_url, str(tmp_path / "out.json"),
                env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await asyncio.wait_for(proc.communicate(), 300)
            assert proc.returncode == 0, err.decode()[-4000:]
            seen = [r.body for r in srv.requests]
    finally:
        served.close()
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["healthy"] is True
    for i, ep in enumerate(out["episodes"]):
        assert ep["ok"] and ep["errors"] == [] and ep["traces"] == 1 and ep["env"] == "vf-serve-echo"
        assert ep["task_word"] == ep["last_reply"] == f"word{i}" and ep["num_turns"] == 1
        assert ep["reward"] == 1.0 and ep["rewards"] == {"echoed": {"score": 1.0, "weight": 1.0}}
        assert ep["metrics"] == {"length": float(len(f"word{i}"))}
        assert ep["sampled"] == [False, True] and ep["token_ids"][0]  # the model's token ids crossed the wire
    # the request's model and sampling reached the model server
    assert sorted(b["messages"][-1]["content"] for b in seen) == ["Repeat: word0", "Repeat: word1", "Repeat: word2"]
    assert {(b["model"], b["temperature"]) for b in seen} == {("scripted-model", 0.5)}
    # task data that does not validate as the taskset's type: an error reply naming the field
    assert out["refused"] and "EchoData" in out["refused"] and "word" in out["refused"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(python: Path, home: Path, address: str) -> subprocess.Popen:
    with open(home / "server.log", "wb") as log:
        return subprocess.Popen([str(python), str(home / "server.py"), address], env=_env(PACKAGES),
                                stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip


async def test_our_client_drives_the_original_pool(original_python: Path) -> None:
    from verifiers.v1.serve import EnvClient, EnvServerError

    home = Path(tempfile.mkdtemp(prefix="vfs-orig-"))
    (home / "server.py").write_text(ORIGINAL_SERVER)
    address = f"tcp://127.0.0.1:{_free_port()}"
    server = _start(original_python, home, address)
    try:
        async with ScriptedServer(echo_script) as srv, EnvClient(address) as client:
            try:
                await client.wait_for_server_startup(timeout=240)
            except TimeoutError:
                pytest.fail((home / "server.log").read_text()[-4000:])
            deltas: list[dict] = []
            episodes = await asyncio.gather(
                *(client.run(srv.base_url, "scripted-model", {"temperature": 0.5}, task_data(f"word{i}", i),
                             on_delta=deltas.append) for i in range(3))
            )
            with pytest.raises(EnvServerError, match="word"):
                await client.run(srv.base_url, "scripted-model", {}, {"prompt": "Repeat: x", "idx": 9})
            assert await client.health()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(home, ignore_errors=True)
    for i, ep in enumerate(episodes):
        assert ep.ok and not ep.errors and ep.env.id == "vf-serve-echo", (ep.errors, [t.errors for t in ep.traces], [c.error for t in ep.traces for c in t.calls])  # the original names the env by its taskset
        (trace,) = ep.traces
        assert trace.verifiers.version == "0.4.0"  # written by the original
        assert trace.task.data.model_extra["word"] == trace.last_reply == f"word{i}"
        assert trace.rewards["echoed"].score == 1.0 and trace.reward == 1.0 and trace.metrics["length"] == len(f"word{i}")
        assert [m.role for m in trace.messages] == ["user", "assistant"] and trace.stop_condition == "agent_completed"
    # the traces arrived as the original's deltas: each opened once, with its nodes
    assert sorted(d["trace"] for d in deltas if "open" in d) == sorted(ep.traces[0].id for ep in episodes)
    assert sum(len(d.get("nodes", [])) for d in deltas) == sum(len(ep.traces[0].nodes) for ep in episodes)
