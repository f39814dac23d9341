"""Agent programs as harnesses in the bubblewrap sandbox, no Docker: the real mini-swe-agent
(from PyPI, in a tool folder built once per machine) against a scripted model.

* it fixes the bug -> the hidden tests (run in the sandbox with the task's own environment, pytest
  from a second cached tool folder) pass: reward 1; its calls went through the interception proxy
  (trace, the agent's sampling, token ids and logprobs), and ``max_turns`` became its step limit;
* a hostile agent gets nothing outside its work folder: no host file, no network (not the host's
  model server, not the internet; only the proxy's port), no process left running; and, as it
  submits without fixing, reward 0;
* a task that needs a Docker image is refused on ``sandbox`` in one line.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import private_sandbox_root
from tests.sandbox.support import wait_until_gone
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer, tool_call, tool_calls
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1
from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture(scope="module", autouse=True)
def _sandbox_dir() -> Iterator[Path]:
    with private_sandbox_root("vf-agent-test-") as root:
        yield root


def _env(**agent: object) -> object:
    return load_environment({"taskset": {"id": "vf-bugfix"}, "agent": {
        "harness": {"id": "mini_swe_agent"}, "runtime": {"type": "sandbox", "timeout": 120}, **agent}})  # fmt: skip


def _observations(req) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "tool"]


async def _run(script, rollouts: int = 1, **agent):
    env = _env(**agent)
    env.check()
    async with ScriptedServer(script, token_ids=True, logprobs=True) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model", num_rollouts=rollouts, max_concurrent=rollouts)
        finally:
            await client.aclose()
    return out, out.state[0]["_episode"].traces[0], srv


async def test_mini_swe_agent_fixes_the_bug_through_the_proxy_and_earns_1(mini_tools) -> None:
    seen: list[dict] = []

    def script(req):
        seen.append({"temperature": req.get("temperature"), "tools": [t["function"]["name"] for t in req.tools]})
        done = _observations(req)
        if not done:
            return tool_calls(tool_call("bash", {"command": "sed -i 's/a - b/a + b/' calc.py && python -c 'import calc; print(calc.add(2, 3))'"}, id="c1"))
        return tool_calls(tool_call("bash", {"command": SUBMIT}, id="c2"))

    out, trace, _srv = await _run(script, sampling={"temperature": 0.25}, max_turns=7)
    assert trace.errors == [] and out.state[0]["reward"] == 1.0
    assert trace.info["mini_swe_agent"]["exit_status"] == "Submitted"
    # the program's two calls, recorded through the proxy with the agent's sampling applied
    assert len(trace.calls) == 2 and [s["temperature"] for s in seen] == [0.25, 0.25]
    assert seen[0]["tools"] == ["bash"]  # mini's own tool
    observation = json.loads(next(m for m in trace.messages if m.role == "tool").content)
    assert observation == {"returncode": 0, "output": "5\n"}  # the fixed code, run in the sandbox
    sampled = [n for n in trace.nodes if n.sampled]
    assert len(sampled) == 2 and all(n.token_ids and len(n.logprobs) == len(n.token_ids) for n in sampled)
    assert trace.agent.runtime["type"] == "sandbox"


async def test_max_turns_becomes_mini_swe_agents_step_limit_in_concurrent_rollouts(mini_tools) -> None:
    calls = 0

    def script(req):
        nonlocal calls
        calls += 1
        # never submits; each rollout sees only its own history through its own proxy route
        return tool_calls(tool_call("bash", {"command": f"echo step-{len(_observations(req))}"}, id=f"c{calls}"))

    out, _, _ = await _run(script, rollouts=2, max_turns=3)
    assert calls == 6 and [s["reward"] for s in out.state] == [0.0, 0.0]
    for state in out.state:  # mini stopped itself at step_limit = max_turns, in each sandbox
        trace = state["_episode"].traces[0]
        assert trace.info["mini_swe_agent"] == {"exit_status": "LimitsExceeded", "steps": 3, "returncode": 0, "timed_out": False}
        assert trace.errors == [] and len(trace.calls) == 3
        outputs = [json.loads(m.content)["output"] for m in trace.messages if m.role == "tool"]
        assert outputs == ["step-0\n", "step-1\n"]  # the third's output: after the last call


async def test_a_hostile_agent_gets_nothing_outside_its_work_folder_and_submitting_without_a_fix_earns_0(
    mini_tools, tmp_path, _sandbox_dir
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-ONLY")
    marker = f"vf-marker-{secrets.token_hex(6)}"
    probe = (  # the proxy's port: from mini's own command line, as an agent would find it
        "import glob, re, socket, sys\n"
        "cmds = [open(p, 'rb').read().decode(errors='replace') for p in glob.glob('/proc/[0-9]*/cmdline')]\n"
        "proxy_port = next(m.group(1) for c in cmds if (m := re.search(r'api_base=http://127.0.0.1:(\\d+)', c)))\n"
        "def reach(host, port):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2).close(); return 'open'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "print('model-server', reach('127.0.0.1', int(sys.argv[1])))\n"
        "print('internet', reach('pypi.org', 443))\n"
        "print('proxy', reach('127.0.0.1', int(proxy_port)))\n"
    )
    out_of_bounds: list[str] = []

    def script(req):
        done = _observations(req)
        if not done:
            cmds = (f"cat {secret}; ls /root /home; cat /etc/shadow; touch /usr/x /etc/x \"$VIRTUAL_ENV/pwned\"; id -u; "
                    f"(exec -a {marker} sleep 300 &) ; echo started")  # fmt: skip
            return tool_calls(tool_call("bash", {"command": cmds}, id="h1"))
        if len(done) == 1:
            out_of_bounds.append(done[0])
            return tool_calls(tool_call("bash", {"command": f"cat > p.py <<'EOF'\n{probe}EOF\npython3 p.py {srv_port[0]}"}, id="h2"))
        out_of_bounds.append(done[1])
        return tool_calls(tool_call("bash", {"command": SUBMIT}, id="h3"))

    srv_port: list[int] = []
    env = _env()
    async with ScriptedServer(script, token_ids=True) as srv:
        srv_port.append(int(srv.base_url.rsplit(":", 1)[1].split("/")[0]))
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
    trace = out.state[0]["_episode"].traces[0]
    assert trace.errors == [] and trace.info["mini_swe_agent"]["exit_status"] == "Submitted"
    assert out.state[0]["reward"] == 0.0  # it submitted without fixing calc.add
    files = json.loads(out_of_bounds[0])["output"]
    assert "HOST-ONLY" not in files and "No such file" in files and "65534" in files and "started" in files
    assert "Read-only file system" in files or "Permission denied" in files
    assert _host_untouched(secret)
    assert files.count("Read-only file system") >= 3 and "/opt/tools/" in files  # the task's environment too
    assert not any(Path(b).joinpath("pwned").exists() for b in _tool_folders())
    net = json.loads(out_of_bounds[1])["output"]
    assert "model-server ConnectionRefusedError" in net and "proxy open" in net
    assert "internet open" not in net and "internet " in net
    # the background sleep and the agent died with the run: the sandbox's PID namespace is torn down
    # by the kernel after its init is killed, which on a loaded machine can take a moment, so poll
    # (returns as soon as they are gone; the deadline is only a guard)
    assert await wait_until_gone(marker, timeout=30) == []
    assert await wait_until_gone("minisweagent", timeout=30) == []
    assert not list(_sandbox_dir.glob("run-*"))  # work folder gone


async def test_a_task_that_needs_a_docker_image_is_refused_on_sandbox_in_one_line() -> None:
    import verifiers.v1 as vf

    rt = SandboxRuntime(SandboxConfig())
    why = rt.refuse_task(vf.TaskData(name="needs-image", image="python:3.12-slim"))
    assert why is not None and "\n" not in why and "python:3.12-slim" in why and "Docker" in why
    assert rt.refuse_task(vf.TaskData(name="plain")) is None


def _host_untouched(secret: Path) -> bool:
    return secret.read_text() == "HOST-ONLY" and not any(Path(p).exists() for p in ("/usr/x", "/etc/x"))


def _tool_folders() -> list[Path]:
    from verifiers.sandbox.toolenv import toolenv_root

    return [p for p in toolenv_root().iterdir() if p.is_dir()]


def test_step_and_cost_limits_map_to_minis_agent_config() -> None:
    from verifiers.v1.harnesses.mini_swe_agent import MiniSWEAgentHarness, MiniSWEAgentHarnessConfig

    def sets(cfg: dict, max_turns: int | None) -> dict[str, str]:
        argv = MiniSWEAgentHarness(MiniSWEAgentHarnessConfig(**cfg)).argv("/py", "m", "task", "http://127.0.0.1:1/v1", "s", max_turns)
        return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-c" and "=" in argv[i + 1])

    assert sets({}, 7)["agent.step_limit"] == "7" and sets({}, None)["agent.step_limit"] == "0"
    assert sets({"step_limit": 3, "cost_limit": 1.5}, 7).items() >= {"agent.step_limit": "3", "agent.cost_limit": "1.5"}.items()
    assert sets({"command_timeout": 30}, None)["environment.timeout"] == "30"


def test_mini_swe_agent_is_refused_on_the_unisolated_subprocess_runtime_in_one_line() -> None:
    from verifiers.v1.plugins import PluginError

    env = load_environment({"taskset": {"id": "vf-bugfix"}, "agent": {"harness": {"id": "mini-swe-agent", "step_limit": 5}}})
    with pytest.raises(PluginError) as err:
        env.check()
    assert str(err.value).startswith("[env.agent.harness]") and "sandbox" in str(err.value) and "\n" not in str(err.value)
    _env().check()  # on sandbox: fine
