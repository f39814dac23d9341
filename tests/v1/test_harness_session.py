"""``HarnessSession``: a harness written for the original's session contract keeps one session for
all the turns of a run.

The package below is what a harness author writes against the original: ``Harness.session``
returns a ``HarnessSession`` subclass whose program is a live process started on the first turn
and fed each later turn's new user message on its stdin, keeping its own conversation (as an agent
program with a native session does); ``close`` ends the process. A second harness overrides only
``resume``: the base session launches it on the first turn and resumes it on later ones with the
caller's new messages.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1

PACKAGE = '''
import json
import sys

import verifiers.v1 as vf
from verifiers.v1.harness import Harness, HarnessSession

# the live program: one model call per line on stdin, its own conversation kept across them
PROGRAM = r"""
import json, os, sys, urllib.request
endpoint, convo = sys.argv[1], []
for line in sys.stdin:
    convo.append({"role": "user", "content": json.loads(line)})
    body = json.dumps({"model": "any", "messages": convo}).encode()
    req = urllib.request.Request(endpoint + "/chat/completions", data=body, headers={
        "content-type": "application/json", "authorization": "Bearer " + os.environ["AGENT_API_KEY"]})
    with urllib.request.urlopen(req) as r:
        reply = json.load(r)["choices"][0]["message"]["content"]
    convo.append({"role": "assistant", "content": reply})
    print(json.dumps({"turns": len(convo) // 2, "pid": os.getpid()}), flush=True)
"""

EVENTS = []


class LiveSession(HarnessSession):
    proc = None
    pending = b""

    async def _line(self):
        while b"\\n" not in self.pending:
            self.pending += await anext(self.proc.stdout)
        line, _, self.pending = self.pending.partition(b"\\n")
        return json.loads(line)

    async def _run(self, messages):
        if self.proc is None:  # the runtime's live process (vf.RuntimeProcess), kept for every turn
            self.proc = await self.runtime.open_process([sys.executable, "-c", PROGRAM, self.endpoint],
                                                        {"AGENT_API_KEY": self.secret})
            text = self.data.prompt
        else:
            text = messages[-1].content
        await self.proc.write((json.dumps(text) + "\\n").encode())
        EVENTS.append(("turn", await self._line()))
        return None

    async def close(self):
        if self.proc is not None:
            EVENTS.append(("running at close", await self.proc.poll()))
            await self.proc.terminate()
            EVENTS.append(("closed", await self.proc.wait()))
        await super().close()


class LiveConfig(vf.HarnessConfig):
    id: str = "hs-live"


class LiveHarness(Harness[LiveConfig]):
    NEEDS_CONTAINER = False

    async def session(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        return LiveSession(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)


class TwoTurnEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as interaction:
            await interaction.turn()
            await interaction.turn("Now say it again.")


class EchoTask(vf.Task):
    @vf.reward
    def said(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == "again")


class EchoTaskset(vf.Taskset[EchoTask]):
    def load(self):
        yield EchoTask(vf.TaskData(prompt="Say hello."))


__all__ = ["EchoTaskset", "TwoTurnEnv", "LiveHarness"]
'''

RESUMING = '''
import verifiers.v1 as vf
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult

CALLS = []


class ResumeConfig(vf.HarnessConfig):
    id: str = "hs-resume"


class ResumingHarness(Harness[ResumeConfig]):
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        CALLS.append(("launch", data.prompt))
        return ProgramResult(0, "", "")

    async def resume(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, messages, tool_interception_url=None):
        CALLS.append(("resume", [m.content for m in messages]))
        return ProgramResult(0, "", "")


__all__ = ["ResumingHarness"]
'''


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("hs")
    for name, source in (("hs_live", PACKAGE), ("hs_resume", RESUMING)):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m.startswith(("hs_live", "hs_resume", "hs_edge"))]:
        del sys.modules[name]


def _reply(req) -> str:
    return "again" if len([m for m in req.messages if m["role"] == "user"]) == 2 else "hello"


async def _run(env):
    async with ScriptedServer(_reply) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            out = await run_v1(env, list(env.taskset), client, model="scripted-model")
        finally:
            await client.aclose()
        return out, srv.requests


async def test_one_live_session_serves_every_turn_and_is_closed_at_the_end(packages) -> None:
    import hs_live

    from verifiers.v1 import HarnessSession

    assert HarnessSession is hs_live.HarnessSession  # the original's two import paths
    env = load_environment({"taskset": {"id": "hs-live"}})
    assert type(env).__name__ == "TwoTurnEnv"
    out, requests = await _run(env)
    trace = out.state[0]["_episode"].traces[0]
    assert trace.errors == [] and out.state[0]["reward"] == 1.0
    turns = [e[1] for e in hs_live.EVENTS if e[0] == "turn"]
    # one process for both turns, its own conversation carried: the second request holds the first
    # exchange, through one endpoint that stayed served between the turns
    assert [t["turns"] for t in turns] == [1, 2] and turns[0]["pid"] == turns[1]["pid"]
    assert [m["content"] for m in requests[1].body["messages"]] == ["Say hello.", "hello", "Now say it again."]
    # closed once the run ended: the program still ran until then, and its end is the SIGTERM
    assert hs_live.EVENTS[-2:] == [("running at close", None), ("closed", -15)]
    assert [m.content for m in trace.messages][-2:] == ["Now say it again.", "again"]


async def test_a_harness_with_resume_is_launched_once_then_resumed_with_the_new_messages(packages) -> None:
    import hs_resume

    from verifiers.v1.harness import HarnessSession

    env = load_environment({"taskset": {"id": "hs-live"}, "agent": {"harness": {"id": "hs-resume"}}})
    harness = env._harnesses["agent"]
    assert harness.drives_sessions() and type(await harness.session(None, None, None, "", "", {}, None)) is HarnessSession
    out, _ = await _run(env)
    assert out.state[0]["_episode"].traces[0].errors == []
    assert hs_resume.CALLS == [("launch", "Say hello."), ("resume", ["Now say it again."])]
    session = HarnessSession(harness, None, None, None, "", "", {}, None)
    await session.close()
    with pytest.raises(Exception, match="already closed"):
        await session.turn()
    with pytest.raises(NotImplementedError, match="steering"):
        await session.steer("hi")



EDGES = '''
import verifiers.v1 as vf
from verifiers.v1.harness import Harness, HarnessSession
from verifiers.v1.runtimes import ProgramResult

SEEN = []


class EdgeHarness(Harness):
    """A stateless program: one model call on the prompt it is given; its session's close fails
    for the harness id ending in ``badclose``."""

    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        from verifiers.v1.interception import model_call

        prompt = data.prompt if isinstance(data.prompt, list) else [vf.UserMessage(content=data.prompt)]
        SEEN.append((self.config.id, "launch", [(m.role, m.content) for m in prompt]))
        system = [vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []
        await model_call(ctx, [*system, *prompt], None)
        return ProgramResult(0, "", "")

    async def session(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        return Closing(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)


class Closing(HarnessSession):
    async def close(self):
        await super().close()
        if self.harness.config.id.endswith("badclose"):
            raise RuntimeError("transport teardown failed")


class EdgeEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as interaction:
            if task.data.prompt is None:  # the env opens the exchange itself
                await interaction.turn("Hi, I open this exchange.")
                await interaction.turn("Second message.")
            else:
                await interaction.turn()
                await interaction.turn("Now say it again.")


class Said(vf.Task):
    @vf.reward
    def said(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == "again")


class SaidConfig(vf.TasksetConfig):
    opened: bool = False


class SaidSet(vf.Taskset[Said, SaidConfig]):
    def load(self):
        yield Said(vf.TaskData(prompt=None if self.config.opened else "Say hello.", system_prompt="SYS"))


__all__ = ["SaidSet", "EdgeEnv"]
'''

# one package per harness id (a harness id names its module), each exporting one Harness
HARNESSES = {
    "hs_edge_chat": "SUPPORTS_RESUME = True  # takes the conversation as its prompt",
    "hs_edge_noresume": "pass  # SUPPORTS_RESUME stays False: the base session cannot continue",
    "hs_edge_badclose": "SUPPORTS_RESUME = True",
}
RESUME_ONLY = '''
import verifiers.v1 as vf
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult
from hs_edge import SEEN


class ResumeOnlyConfig(vf.HarnessConfig):
    id: str = "hs-edge-resume"


class ResumeOnly(Harness[ResumeOnlyConfig]):
    NEEDS_CONTAINER = False

    async def resume(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, messages, tool_interception_url=None):
        SEEN.append(("hs-edge-resume", "resume", [(m.role, m.content) for m in messages]))
        return ProgramResult(0, "", "")


__all__ = ["ResumeOnly"]
'''


async def test_the_session_contracts_edges_as_the_original_keeps_them(packages, caplog) -> None:
    (packages / "hs_edge").mkdir(exist_ok=True)
    (packages / "hs_edge" / "__init__.py").write_text(textwrap.dedent(EDGES))
    for module, body in HARNESSES.items():
        ident = module.replace("_", "-")
        (packages / module).mkdir(exist_ok=True)
        (packages / module / "__init__.py").write_text(
            "import verifiers.v1 as vf\nfrom verifiers.v1.harness import Harness\nfrom hs_edge import EdgeHarness\n\n\n"
            f"class Config(vf.HarnessConfig):\n    id: str = {ident!r}\n\n\n"
            f"class H(EdgeHarness, Harness[Config]):\n    {body}\n\n\n__all__ = ['H']\n"
        )
    (packages / "hs_edge_resume").mkdir(exist_ok=True)
    (packages / "hs_edge_resume" / "__init__.py").write_text(textwrap.dedent(RESUME_ONLY))
    import hs_edge

    def env_with(harness: str, opened: bool = False):
        return load_environment({"taskset": {"id": "hs-edge", "opened": opened}, "agent": {"harness": {"id": harness}}})

    # the default resume relaunches on the conversation, the system prompt placed once (from the data)
    out, _ = await _run(env_with("hs-edge-chat"))
    assert out.state[0]["_episode"].traces[0].errors == [] and out.state[0]["reward"] == 1.0
    launches = [s[2] for s in hs_edge.SEEN if s[0] == "hs-edge-chat"]
    assert launches == [[("user", "Say hello.")], [("user", "Say hello."), ("assistant", "hello"), ("user", "Now say it again.")]]
    # a harness that cannot take the conversation (SUPPORTS_RESUME False) is refused on its second turn
    out, _ = await _run(env_with("hs-edge-noresume"))
    (err,) = out.state[0]["_episode"].traces[0].errors
    assert err.type == "HarnessError" and "cannot continue an exchange" in err.message
    # a session whose close fails: logged, and the finished run is scored all the same
    with caplog.at_level("WARNING", logger="verifiers.v1.agents"):
        out, _ = await _run(env_with("hs-edge-badclose"))
    assert out.state[0]["_episode"].traces[0].errors == [] and out.state[0]["reward"] == 1.0
    assert "transport teardown failed" in caplog.text
    # an exchange the env opens (no task prompt): resumed from its first turn with the env's messages
    out, _ = await _run(env_with("hs-edge-resume", opened=True))
    assert out.state[0]["_episode"].traces[0].errors == []
    assert [s[1:] for s in hs_edge.SEEN if s[0] == "hs-edge-resume"] == [
        ("resume", [("user", "Hi, I open this exchange.")]), ("resume", [("user", "Second message.")])]
