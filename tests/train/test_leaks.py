"""Nothing a training run opens outlives it: HTTP sessions, sockets, child processes.

Each check runs in a fresh interpreter with ``-W error::ResourceWarning`` so that
an unclosed aiohttp session or socket (a ``ResourceWarning`` raised in its finaliser, reported as
"Exception ignored ... Unclosed ...") shows in the process's stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BRIDGE = textwrap.dedent("""
    import gc, glob, json, sys, tempfile, threading
    from verifiers.testing.scripted import ScriptedServer
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.trl_bridge import make_rollout_func, trl_dataset

    env = load_env(EnvSection(id=sys.argv[1], args={"num_examples": 8}))
    with ScriptedServer("7") as srv:
        def ours():  # the engine's process-wide pool for sync reward functions (vf-sync-*) is no leak
            return {t.name for t in threading.enumerate() if not t.name.startswith("vf-sync")}
        threads = ours()
        dirs = set(glob.glob(tempfile.gettempdir() + "/vf-trl-weights-*"))
        fn = make_rollout_func(env, srv.base_url, model=srv.model, sampling_args={"max_tokens": 2})
        prompts = [r["prompt"] for r in trl_dataset(env).to_list()[:2] for _ in range(2)]
        out = fn(prompts, None)
        assert len(out["completion_ids"]) == 4, out
        if sys.argv[2] == "close":
            fn.close()
            fn.close()  # idempotent
        left = {"threads": sorted(ours() - threads),
                "dirs": sorted(set(glob.glob(tempfile.gettempdir() + "/vf-trl-weights-*")) - dirs)}
    del fn
    gc.collect()
    print(json.dumps(left), flush=True)
    for d in left["dirs"]:
        import shutil; shutil.rmtree(d, ignore_errors=True)
""")


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code, *args],
                          capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)


def test_the_trl_bridge_closes_what_it_opened():
    """``benchmarks/train.py --only agentic`` left the bridge's model client (an aiohttp session
    then) unclosed at exit. ``rollout_func.close()`` closes the client it made, stops its event-loop
    thread and removes its weights folder (the benchmark calls it on every path): no unclosed
    session or socket warning, no thread, no folder left."""
    import json

    digit_copy = str(ROOT / "examples" / "envs" / "digit_copy.py")
    closed = _run(BRIDGE, digit_copy, "close")
    assert closed.returncode == 0, closed.stderr[-3000:]
    assert "Unclosed" not in closed.stderr and "ResourceWarning" not in closed.stderr, closed.stderr[-3000:]
    assert json.loads(closed.stdout.splitlines()[-1]) == {"threads": [], "dirs": []}
    # the same script without close() leaves them: the check above can fail
    leaked = _run(BRIDGE, digit_copy, "leave")
    assert leaked.returncode == 0, leaked.stderr[-3000:]
    left = json.loads(leaked.stdout.splitlines()[-1])
    assert len(left["threads"]) == 1 and len(left["dirs"]) == 1  # the bridge's loop thread, its folder


def _session_processes(sid: int) -> list[str]:
    """Live processes of session ``sid`` (zombies excluded): what a run left running."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(f"{pid} {name}")
    return out


def _left_after_exit(sid: int) -> list[str]:
    """What of session ``sid`` still runs 10 s after its leader exited (a process stopping right
    then, such as multiprocessing's resource tracker reading its pipe's end, gets that long)."""
    import time

    for _ in range(100):
        if not _session_processes(sid):
            return []
        time.sleep(0.1)
    return [f"{p}: {Path(f'/proc/{p.split()[0]}/cmdline').read_bytes().replace(bytes(1), b' ')[:300]!r}"
            for p in _session_processes(sid)]


def test_vf_train_through_env_servers_closes_everything_on_every_path(tiny_model_dir, tmp_path):
    """``vf train`` on a classic environment through the embedded env-server pool (the default)
    against a scripted model server, in its own session under ``-W error::ResourceWarning``: after a
    normal end and after Ctrl-C in the middle of a run, no unclosed session, socket or ZMQ socket was
    reported, and no process of the run (the pool, its workers) is left running."""
    import asyncio
    import signal
    import time

    from verifiers.testing.scripted import ScriptedServer

    cfg = tmp_path / "leak.toml"
    cfg.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[[env]]\nid = "{ROOT / "examples" / "envs" / "digit_copy.py"}"\n'
        'args = { num_examples = 64 }\n'
        '[inference]\nweight_update = "none"\n[sampling]\nmax_tokens = 2\n'
        '[orchestrator]\nbatch_groups = 2\ngroup_size = 4\nmax_in_flight = 4\nmax_seq_len = 64\ndrop_no_signal = false\n'
        '[trainer]\nseq_len = 64\n[run]\nsteps = STEPS\neval_every = 1\neval_groups = 2\n'
        '[logging]\nsample_rollouts = 2\n')
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1"}

    def start(steps: int, out: str, url: str, model: str) -> subprocess.Popen:
        (tmp_path / f"{out}.toml").write_text(cfg.read_text().replace("STEPS", str(steps)))
        return subprocess.Popen([sys.executable, "-W", "error::ResourceWarning", "-m", "verifiers.cli.main", "train",
                                 str(tmp_path / f"{out}.toml"), "--output", str(tmp_path / out), "--url", url,
                                 "--set", f"inference.model={model}"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                                start_new_session=True)

    async def slow(req):  # slow enough that Ctrl-C lands with groups in flight on the pool
        await asyncio.sleep(0.2)
        return "7"

    with ScriptedServer(slow) as srv:
        done = start(2, "done", srv.base_url, srv.model)
        out, _ = done.communicate(timeout=300)
        assert done.returncode == 0, out[-4000:]
        assert "env server for digit_copy" in out and (tmp_path / "done" / "rollouts").is_dir(), out[-4000:]
        assert "Unclosed" not in out and "ResourceWarning" not in out, out[-4000:]
        assert _left_after_exit(done.pid) == []

        before = len(srv.requests)  # the finished run's requests: the stopped one's are counted from here
        stopped = start(200, "stopped", srv.base_url, srv.model)
        seen = []
        deadline = time.monotonic() + 240
        for line in stopped.stdout:  # wait until the run is playing groups on its pool
            seen.append(line)
            if "env server for digit_copy" in line or time.monotonic() > deadline:
                break
        for _ in range(100):
            if len(srv.requests) >= before + 4:
                break
            time.sleep(0.1)
        assert len(srv.requests) >= before + 4, "".join(seen)[-4000:]
        pool = _session_processes(stopped.pid)
        assert len(pool) >= 3, pool  # the run, its pool and the pool's worker (at least)
        stopped.send_signal(signal.SIGINT)
        out, _ = stopped.communicate(timeout=120)
        out = "".join(seen) + out
        assert stopped.returncode == 130, out[-4000:]
        assert "Unclosed" not in out and "ResourceWarning" not in out and "ZMQError" not in out, out[-4000:]
        assert _left_after_exit(stopped.pid) == []  # the pool and its workers stop with the run
