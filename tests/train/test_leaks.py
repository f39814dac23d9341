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
    import gc, sys
    from verifiers.testing.scripted import ScriptedServer
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.trl_bridge import make_rollout_func, trl_dataset

    env = load_env(EnvSection(id=sys.argv[1], args={"num_examples": 8}))
    with ScriptedServer("7") as srv:
        fn = make_rollout_func(env, srv.base_url, model=srv.model, sampling_args={"max_tokens": 2})
        prompts = [r["prompt"] for r in trl_dataset(env).to_list()[:2] for _ in range(2)]
        out = fn(prompts, None)
        assert len(out["completion_ids"]) == 4, out
        if sys.argv[2] == "close":
            fn.close()
            fn.close()  # idempotent
    del fn
    gc.collect()
    print("done", flush=True)
""")


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", code, *args],
                          capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)


def test_the_trl_bridge_closes_its_http_session():
    """``benchmarks/train.py --only agentic`` left an aiohttp session unclosed at exit: the bridge's
    model client. ``rollout_func.close()`` closes it (the benchmark calls it on every path)."""
    digit_copy = str(ROOT / "examples" / "envs" / "digit_copy.py")
    closed = _run(BRIDGE, digit_copy, "close")
    assert closed.returncode == 0 and "done" in closed.stdout, closed.stderr[-3000:]
    assert "Unclosed" not in closed.stderr and "ResourceWarning" not in closed.stderr, closed.stderr[-3000:]
    # the same script without close() shows the leak: the check above can fail
    leaked = _run(BRIDGE, digit_copy, "leave")
    assert "done" in leaked.stdout, leaked.stderr[-3000:]
    assert "Unclosed client session" in leaked.stderr, leaked.stderr[-3000:]
