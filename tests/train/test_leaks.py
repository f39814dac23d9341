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
