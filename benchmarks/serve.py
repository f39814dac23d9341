"""Env-server throughput: our pool vs the original 0.4.0's ``serve_env`` pool, same work, same run.

    .venv/bin/python benchmarks/serve.py [--episodes 400] [--in-flight 64] [--workers 1 2]

Both servers serve the same v1 taskset (``tests/v1/packages/vf_serve_echo``: one model call, one
async reward, one metric) from its own process, with the same number of workers, against one
scripted OpenAI-compatible server (``verifiers.testing.scripted.ScriptedServer``, its own process;
it streams, as the original's interception needs). The driver is our ``EnvClient`` in this
process, so the figures compare the servers. Every episode is checked (ok, reward 1.0). The
original runs from the venv the compat tests install from the package index (cached).

What likely dominates the original's figure (not profiled): its ``null`` harness prepares a uv
script in each episode's harness setup and talks to the model through its interception proxy,
while ours plays the ``null`` harness's loop in the worker.
One run on this 2-core machine (100 episodes, 16 in flight, 2 workers): ours 239 episodes/s, the
original 1.0 episodes/s.

    .venv/bin/python benchmarks/serve.py --codecs [--rounds 5]

**The wire's codec, chosen by measurement.** The wire stays msgpack (the original's, both ways);
what is ours to choose is the library and how the client builds the episode. ``--codecs`` takes
one served 2-turn tool episode (the server's own ``trace_deltas`` over a real ``Trace``: two calls
of 400+ prompt and 64 completion token ids with logprobs; 4 frames, 11.8 KB), checks that every
library reads every other's bytes identically, and times each step, best of 5 interleaved rounds
of 300. One run (2026-12-06, 2 cores, load average 9 from other sessions; absolute times are
inflated by the load, the ratios hold):

| per episode | msgpack 1.2.4 | msgspec 0.22.0 | ormsgpack 1.13.1 |
|---|---|---|---|
| decode the frames | 229 us | **126 us** | 151 us |
| encode the frames | 106 us | **47 us** | 50 us |
| decode + assemble (raw dicts) | 244 us | **158 us** | 203 us |
| decode + assemble + ``WireEpisode.model_validate`` | 546 us | **457 us** | 470 us |

So ``verifiers.v1.wire`` unpacks with msgspec (1.8x msgpack, and strict: trailing bytes are an
error, where ormsgpack ignores them) and packs with ormsgpack (2.1x msgpack; msgspec is as fast but
writes datetimes as msgpack timestamps, where the original and ormsgpack write ISO text). Building
the pydantic ``WireEpisode`` is then about two thirds of the client's cost per episode:
``EnvClient.run(..., validate=False)`` returns the assembled record for a caller that does not
need the models. JSON (``orjson``) has no place on this wire: every frame is msgpack.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PACKAGES = REPO / "tests" / "v1" / "packages"
SCRIPTED = r'''
import asyncio, sys
from verifiers.testing.scripted import ScriptedServer

def answer(request):
    return (request.messages[-1]["content"] or "").split(": ", 1)[-1]

async def main():
    async with ScriptedServer(answer, port=int(sys.argv[1])):
        print("READY", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
'''
OURS = r'''
import sys
from verifiers.v1.serve import serve_env
serve_env({"taskset": {"id": "vf-serve-echo"}}, workers=int(sys.argv[2]), address=sys.argv[1], max_concurrent=1024, max_queued=100000)
'''
ORIGINAL = r'''
import sys
from verifiers.v1.serve import serve_env
from verifiers.v1.utils.loaders import resolve_env_config
if __name__ == "__main__":
    config = resolve_env_config({"taskset": {"id": "vf-serve-echo"},
                                 "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}})
    serve_env(max_workers=int(sys.argv[2]), elastic=False, address=sys.argv[1], config_data=config.model_dump(mode="json"))
'''


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(python: str, code: str, *args: str, paths: list[Path], log: Path | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    with open(log or os.devnull, "wb") as err:
        # cwd: not this checkout (`python -c` imports from the working directory first)
        return subprocess.Popen([python, "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                cwd=tempfile.gettempdir())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _drive(address: str, base_url: str, episodes: int, in_flight: int) -> tuple[float, float]:
    """Episodes per second over ``episodes`` runs (after a warm-up), and the driver's CPU seconds per episode."""
    from verifiers.v1.serve import EnvClient

    async with EnvClient(address) as client:
        await client.wait_for_server_startup(timeout=120)
        gate = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            word = f"w{i}"
            async with gate:
                ep = await client.run(base_url, "m", {}, {"prompt": f"Repeat: {word}", "word": word, "idx": i})
            if not (ep.ok and ep.traces and ep.traces[0].reward == 1.0):
                raise RuntimeError(f"episode {i} failed: {ep.errors or [t.errors for t in ep.traces]}")

        await asyncio.gather(*(one(i) for i in range(min(episodes, 4 * in_flight))))  # warm-up: every worker loaded
        cpu, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(episodes)))
        return episodes / (time.perf_counter() - t0), (time.process_time() - cpu) / episodes


def sample_episode(turns: int = 2, prompt_tokens: int = 400, completion_tokens: int = 64) -> tuple[list[dict], dict]:
    """The deltas and reply of one served multi-turn tool episode (the server's own ``trace_deltas``
    over a real ``Trace``: every call with vLLM-shaped token ids and logprobs)."""
    import random

    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.task import WireTaskData
    from verifiers.v1.trace import Trace, TraceTask
    from verifiers.v1.types import (
        AssistantMessage,
        Response,
        SystemMessage,
        Tool,
        ToolCall,
        ToolMessage,
        TurnTokens,
        Usage,  # fmt: skip
        UserMessage,
    )
    from verifiers.v1.wire import RunResponse, TraceSummary, dump, trace_deltas

    rng = random.Random(0)
    data = WireTaskData(prompt="What is 2 + 3?", id="t1", idx=1)
    trace = Trace(task=TraceTask(type="AddTask", data=data))
    tools = [Tool(name="calc_add", description="Add two integers.", parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})]
    messages: list = [SystemMessage(content="Use the tools. " * 20), UserMessage(content="What is 2 + 3?")]
    cursors: dict = {}
    frames: list[dict] = []
    for turn in range(turns):
        last = turn == turns - 1
        message = AssistantMessage(content="5") if last else AssistantMessage(content=None, tool_calls=[ToolCall(id=f"c{turn}", name="calc_add", arguments='{"a": 2, "b": 3}')])
        n = prompt_tokens + turn * (completion_tokens + 20)
        tokens = TurnTokens(prompt_ids=[rng.randrange(150000) for _ in range(n)], completion_ids=[rng.randrange(150000) for _ in range(completion_tokens)],
                            completion_logprobs=[-rng.random() for _ in range(completion_tokens)])  # fmt: skip
        trace.commit_turn(messages, Response(id=f"r{turn}", created=0, model="m", message=message, finish_reason="stop",
                                             usage=Usage(prompt_tokens=n, completion_tokens=completion_tokens), tokens=tokens), tools=tools)  # fmt: skip
        if not last:
            messages = [*messages, message, ToolMessage(content="5", tool_call_id=f"c{turn}")]
        for _, delta, cursor in trace_deltas([trace], cursors):  # one flush per turn, as the server's streamer
            frames.append(delta)
            cursors[trace.id] = cursor
    trace.record_reward("correct", 1.0)
    trace.ok, trace.stop_condition = True, "agent_completed"
    for _, delta, cursor in trace_deltas([trace], cursors):
        frames.append(delta)
        cursors[trace.id] = cursor
    episode = Episode(env=EnvInfo(id="vf-bench-tools"), task=TraceTask(type="AddTask", data=data), traces=[trace], ok=True)
    reply = RunResponse(head=dump(episode, exclude={"traces"}), traces=[TraceSummary(id=trace.id, nodes=len(trace.nodes), calls=len(trace.calls))])
    return frames, reply.model_dump(mode="python")


def codecs(rounds: int, n: int) -> None:
    """Encode and decode one served episode's frames with each msgpack library, and build the
    client's episode from them three ways; the best of ``rounds`` interleaved rounds of ``n``."""
    import msgpack
    import msgspec
    import ormsgpack

    from verifiers.v1.episode import WireEpisode
    from verifiers.v1.wire import EpisodeAssembly, RunResponse, pack

    frames, reply = sample_episode()
    packed = [pack(f) for f in frames] + [pack(reply)]
    ms_decoder, ms_encoder = msgspec.msgpack.Decoder(), msgspec.msgpack.Encoder()
    decoders = {
        "msgpack": lambda b: msgpack.unpackb(b, raw=False, strict_map_key=False),
        "msgspec": ms_decoder.decode,
        "ormsgpack": lambda b: ormsgpack.unpackb(b, option=ormsgpack.OPT_NON_STR_KEYS),
    }
    encoders = {
        "msgpack": lambda o: msgpack.packb(o, use_bin_type=True),
        "msgspec": ms_encoder.encode,
        "ormsgpack": lambda o: ormsgpack.packb(o, option=ormsgpack.OPT_NON_STR_KEYS),
    }
    for name, dec in decoders.items():  # every library reads every other's bytes the same
        assert [dec(b) for b in packed] == [decoders["msgpack"](b) for b in packed], name
        assert [dec(encoders[name](frame)) for frame in [*frames, reply]] == [decoders["msgpack"](b) for b in packed], name

    def build(dec: Any, validate: bool) -> Any:
        def run() -> Any:
            assembly = EpisodeAssembly()
            for b in packed[:-1]:
                assembly.apply(dec(b))
            response = RunResponse.model_validate(dec(packed[-1]))
            record = assembly.finish(response.head, response.traces)
            return WireEpisode.model_validate(record) if validate else record

        return run

    cases: dict[str, Any] = {}
    for name, dec in decoders.items():
        cases[f"decode frames: {name}"] = lambda dec=dec: [dec(b) for b in packed]
    for name, enc in encoders.items():
        cases[f"encode frames: {name}"] = lambda enc=enc: [enc(f) for f in [*frames, reply]]
    for name, dec in decoders.items():
        cases[f"decode + assemble raw dicts: {name}"] = build(dec, False)
        cases[f"decode + assemble + WireEpisode.model_validate: {name}"] = build(dec, True)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for name, fn in cases.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n)
    print(f"one 2-turn tool episode: {len(packed)} frames, {sum(map(len, packed))} bytes; best of {rounds} rounds x {n} "
          f"(load average {os.getloadavg()[0]:.1f}, os.cpu_count() = {os.cpu_count()})")
    for name, seconds in best.items():
        print(f"{name:60s} {seconds * 1e6:9.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--codecs", action="store_true", help="only measure the msgpack libraries on one episode's frames")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.codecs:
        codecs(args.rounds, 300)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped benchmark still stops its servers
    from tests.v1.test_wire_compat import _original_python

    original = str(_original_python())
    port = _port()
    model = _start(sys.executable, SCRIPTED, str(port), paths=[REPO])
    assert model.stdout is not None and model.stdout.readline().strip() == "READY", "the scripted server did not start"
    base_url = f"http://127.0.0.1:{port}/v1"
    rows = []
    try:
        for workers in args.workers:
            figures = {}
            for name, python, code, paths in (("ours", sys.executable, OURS, [REPO, PACKAGES]),
                                              ("original 0.4.0", original, ORIGINAL, [PACKAGES])):  # fmt: skip
                folder = tempfile.mkdtemp(prefix="vfs-bench-", dir="/tmp")
                address = f"ipc://{folder}/env"
                server = _start(python, code, address, str(workers), paths=paths, log=Path(folder) / "server.log")
                try:
                    figures[name] = asyncio.run(_drive(address, base_url, args.episodes, args.in_flight))
                except Exception:
                    print((Path(folder) / "server.log").read_text()[-3000:], file=sys.stderr)
                    raise
                finally:
                    _stop(server)
                    shutil.rmtree(folder, ignore_errors=True)
                print(f"[{time.strftime('%H:%M:%S')}] {name}, {workers} workers: {figures[name][0]:.1f} episodes/s", file=sys.stderr)
            ours, theirs = figures["ours"], figures["original 0.4.0"]
            rows.append((workers, ours[0], theirs[0], ours[0] / theirs[0], ours[1] * 1e3, theirs[1] * 1e3))
    finally:
        _stop(model)
    print(f"\n{args.episodes} episodes, {args.in_flight} in flight, one model call each (os.cpu_count() = {os.cpu_count()})")
    print(f"{'workers':>7}  {'ours ep/s':>10}  {'original ep/s':>13}  {'ratio':>6}  {'client ms/ep ours':>17}  {'original':>8}")
    for w, o, t, r, oc, tc in rows:
        print(f"{w:>7}  {o:>10.1f}  {t:>13.1f}  {r:>5.2f}x  {oc:>17.2f}  {tc:>8.2f}")


if __name__ == "__main__":
    main()
