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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
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
