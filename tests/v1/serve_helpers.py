"""Shared pieces of the env-server tests: the scripted model, a served pool in its own process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from verifiers.testing.scripted import reply

PACKAGES = Path(__file__).parent / "packages"
ROOT = Path(__file__).resolve().parents[2]
ECHO = {"taskset": {"id": "vf-serve-echo"}}


_seen: set[str] = set()


def echo_script(request):
    """Repeat the prompt's word; a word starting ``slow`` is answered after 30 s, one starting
    ``once`` only the first time it is asked."""
    text = request.messages[-1]["content"] or ""
    word = text.split(": ", 1)[-1]
    slow = word.startswith("slow") or (word.startswith("once") and word not in _seen)
    _seen.add(word)
    return reply(word, delay=30.0 if slow else 0.0)


def task_data(word: str, idx: int = 0) -> dict:
    return {"prompt": f"Repeat: {word}", "word": word, "id": f"e{idx}", "idx": idx}


class Served:
    """``serve_env`` in a child process on an ipc socket in a fresh temporary folder."""

    def __init__(self, config: dict = ECHO, **kwargs) -> None:
        self.dir = tempfile.mkdtemp(prefix="vfs-", dir="/tmp")
        self.address = f"ipc://{self.dir}/pool"
        code = (
            "import json, sys; from verifiers.v1.serve import serve_env; "
            "serve_env(json.loads(sys.argv[1]), address=sys.argv[2], **json.loads(sys.argv[3]))"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PACKAGES)])}
        self.proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(config), self.address, json.dumps(kwargs)], env=env)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
