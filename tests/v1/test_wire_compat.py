"""Our traces and episodes on the original 0.4.0 wire, both ways.

The original ``verifiers==0.4.0`` is installed from the package index, with its dependencies, into
a throwaway venv (cached under ``~/.cache/verifiers-tests``; the env-server compat tests,
``test_serve_compat.py``, run its server and client from the same venv). Its package ``__init__`` files would import its whole stack (MCP, sandboxes, agents), so
the child process registers those packages by path and imports the record modules
themselves: ``verifiers.v1.episode``, ``verifiers.v1.trace`` and ``verifiers.v1.serve.delta``
are the original code, unmodified. Frames are msgpack, as on the env-server wire.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import verifiers.v1 as vf
from tests.v1.test_trace import _reply, build_trace
from verifiers.v1.wire import DeltaStreamer, RunResponse, TraceSummary, dump, pack, unpack

RELEASE = "0.4.0"

CHILD = r'''
import pathlib, sys, types
site = next(p for p in sys.path if p.endswith("site-packages"))
for name in ("verifiers", "verifiers.v1", "verifiers.v1.serve"):
    module = types.ModuleType(name)
    module.__path__ = [str(pathlib.Path(site, *name.split(".")))]
    sys.modules[name] = module
sys.modules["verifiers"].__version__ = "0.4.0"
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve.delta import EpisodeAssembly, TraceSummary, dump, pack, unpack
from verifiers.v1.serve.types import RunResponse
from verifiers.v1.trace import WireTrace

payload = unpack(open(sys.argv[1], "rb").read())
ours = WireEpisode.model_validate(payload["episode"])
trace = ours.traces[0]
facts = {
    "answer": trace.task.data.model_extra["answer"],
    "reward": trace.reward,
    "branch_tokens": [b.token_ids for b in trace.branches],
    "logprobs": trace.branches[0].logprobs,
    "last_reply": trace.last_reply,
    "num_turns": trace.num_turns,
    "transcript": trace.transcript,
    # the transcript of the trace cut after each node: tool results, tool calls, every role
    "prefix_transcripts": [trace.model_copy(update={"nodes": trace.nodes[:k]}).transcript for k in range(1, len(trace.nodes) + 1)],
    "record_equal": WireTrace.model_validate(trace.to_record()).to_record() == trace.to_record(),
}
assembly = EpisodeAssembly()
for delta in payload["deltas"]:
    assembly.apply(delta)
assembled = WireEpisode.model_validate(
    assembly.finish(payload["head"], [TraceSummary(**s) for s in payload["summaries"]])
)
# the original's own episode, built by its own code, for our side to read
theirs = WireEpisode.model_validate(payload["template"])
theirs.traces[0].record_reward("theirs", 0.25, 4.0)
theirs.traces[0].record_metric("m", 2)
theirs.traces[0].stop("max_turns")
# and a trace their code makes from nothing (their defaults: version, a hosted runtime)
theirs.traces.append(WireTrace.model_validate({"task": payload["template"]["task"], "agent": {"config": {}}}))
reply = RunResponse.model_validate(payload["reply"])
out = {
    "reply": dump(reply),
    "facts": facts,
    "redumped": dump(ours),
    "assembled": dump(assembled),
    "theirs": dump(theirs),
    "theirs_record": theirs.to_record(),
}
open(sys.argv[2], "wb").write(pack(out))
'''


def _uv() -> list[str] | None:
    found = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return [found] if found else None


def _original_python() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verifiers-tests" / f"v1-{RELEASE}"
    python = cache / "venv" / "bin" / "python"
    if not (cache / "installed").exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".v1-wire-{RELEASE}-", dir=cache.parent))
        venv = staging / "venv"
        uv = _uv()
        if uv:
            subprocess.run([*uv, "venv", "-q", str(venv)], check=True, timeout=300)
            pip = [*uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
        else:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        proc = subprocess.run([*pip, f"verifiers=={RELEASE}"], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"installing verifiers=={RELEASE} from the package index failed:\n{proc.stderr[-3000:]}"
        (staging / "installed").write_text(RELEASE)
        shutil.rmtree(cache, ignore_errors=True)
        try:
            staging.rename(cache)
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
    assert python.exists(), f"no interpreter in {cache}"
    return python


@pytest.fixture(scope="module")
def original_python() -> Path:
    return _original_python()


def _keys(value: object, prefix: str = "", skip: str = "") -> set[str]:
    """Every key path in a dumped record (list items merged), leaving out the ``skip`` subtrees."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == skip:
                continue
            path = f"{prefix}.{k}"
            out.add(path)
            out |= _keys(v, path, skip)
    elif isinstance(value, list):
        for item in value:
            out |= _keys(item, prefix + "[]", skip)
    return out


def _streamed(trace: vf.Trace) -> list[dict]:
    """Our deltas of ``trace`` growing by one turn, as they leave the worker."""
    sent: list[dict] = []

    async def send(delta: dict) -> None:
        sent.append(unpack(pack(delta)))

    async def go() -> None:
        async with DeltaStreamer(lambda: [trace], send) as streamer:
            streamer.watch(trace)
            await streamer.flush()
            trace.commit_turn([vf.UserMessage(content="more")], _reply("5", [40], [41, 42]))
            trace.record_reward("late", 1.0)

    asyncio.run(go())
    return sent


def test_our_records_load_in_the_original_and_theirs_here(original_python: Path, tmp_path: Path) -> None:
    trace = build_trace()
    episode = vf.Episode(task=trace.task, traces=[trace], ok=True, env={"id": "single-agent"})
    live = build_trace()
    deltas = _streamed(live)
    head = dump(vf.Episode(task=live.task), exclude={"traces"})
    template = vf.Episode(task=trace.task, traces=[build_trace()])
    payload = {
        "episode": dump(episode),
        "deltas": deltas,
        "head": head,
        "summaries": [TraceSummary(id=live.id, nodes=len(live.nodes), calls=len(live.calls)).model_dump()],
        "template": dump(template),
        "reply": dump(RunResponse(head=head, traces=[TraceSummary(id=live.id, nodes=len(live.nodes), calls=len(live.calls))])),
    }
    (tmp_path / "in.msgpack").write_bytes(pack(payload))
    (tmp_path / "child.py").write_text(CHILD)
    proc = subprocess.run(
        [str(original_python), str(tmp_path / "child.py"), str(tmp_path / "in.msgpack"), str(tmp_path / "out.msgpack")],
        capture_output=True, text=True, timeout=300, env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = unpack((tmp_path / "out.msgpack").read_bytes())

    # the original read our trace as we meant it
    facts = out["facts"]
    assert facts["answer"] == "4" and facts["reward"] == trace.reward == 2.0
    assert facts["branch_tokens"] == [b.token_ids for b in trace.branches]
    assert facts["logprobs"] == trace.branches[0].logprobs
    assert (facts["last_reply"], facts["num_turns"], facts["transcript"]) == (trace.last_reply, trace.num_turns, trace.transcript)
    assert facts["record_equal"]
    ours_prefixes = [vf.Trace(task=trace.task, nodes=trace.nodes[:k]).transcript for k in range(1, len(trace.nodes) + 1)]
    assert facts["prefix_transcripts"] == ours_prefixes and any("[tool calc]\n4" in t for t in ours_prefixes)

    # ... and what it writes back reads here as the same record, field for field
    redumped = vf.WireEpisode.model_validate(out["redumped"])
    ours_record = vf.WireEpisode.model_validate(dump(episode)).to_record()
    theirs_view = redumped.to_record()
    # the original fills defaults of the agent config it knows (runtime allow/block ...): compare the rest
    for record in (ours_record, theirs_view):
        for t in record["traces"]:
            t["agent"]["config"] = {k: v for k, v in t["agent"]["config"].items() if k in ("model", "max_turns")}
    assert theirs_view == ours_record
    assert out["redumped"]["traces"][0]["agent"]["config"]["runtime"]["type"] == "subprocess"
    # field for field: the original writes exactly the keys we write (its agent config adds its defaults)
    assert _keys(out["redumped"], skip="agent") == _keys(dump(episode), skip="agent")

    # our deltas assembled by the original's client rebuild the trace we hold
    assembled = vf.WireEpisode.model_validate(out["assembled"]).traces[0]
    assert [n.token_ids for n in assembled.nodes] == [n.token_ids for n in live.nodes]
    assert assembled.rewards == live.rewards and assembled.stop_condition == live.stop_condition

    # the run's closing reply means the same on both sides
    assert RunResponse.model_validate(out["reply"]).traces[0].nodes == len(live.nodes)
    assert out["reply"]["head"]["id"] == head["id"]

    # the original's own writes (msgpack wire and JSON record) load here
    theirs = vf.WireEpisode.model_validate(out["theirs"]).traces[0]
    assert theirs.rewards["theirs"] == vf.Reward(score=0.25, weight=4.0) and theirs.metrics["m"] == 2.0
    assert theirs.stop_condition == "agent_completed" and theirs.is_truncated is False  # the first stop stays
    assert theirs.branches[0].token_ids == trace.branches[0].token_ids
    fresh = vf.WireEpisode.model_validate(out["theirs"]).traces[1]
    assert fresh.verifiers.version == "0.4.0" and fresh.agent.config.runtime["type"] == "prime"
    record = vf.WireEpisode.model_validate(out["theirs_record"])
    assert record.traces[0].task.data.model_extra == {"answer": "4"}
