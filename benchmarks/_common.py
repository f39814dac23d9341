"""Shared plumbing for the benchmarks: the peer venv, the fast server, subprocess drivers, tables.

Every benchmark measures ours and the peer (the original ``verifiers==0.3.0`` from PyPI) in the same
run, each in its own subprocess, so that neither pays for the other's imports or garbage.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "benchmarks"
PEER_VERSION = "0.3.0"
V1_PEER_VERSION = "0.4.0"
"""The original's v1-only release: the peer of the v1 rows (``verifiers.v1``)."""


def peer_venv(version: str = PEER_VERSION) -> Path:
    """Where the original ``verifiers==<version>`` lives: a throwaway venv beside this checkout."""
    return REPO / f".venv-bench-verifiers-{version}"


PEER_VENV = peer_venv(PEER_VERSION)
OUR_PYTHON = Path(sys.executable)
# Niceness increment for every measured process (drivers and the fast server). On a shared machine a
# negative value (root only) shields all measured processes alike from unrelated load.
PRIORITY = {"nice": 0}


def set_priority(nice: int) -> None:
    PRIORITY["nice"] = nice


def _apply_priority() -> None:  # runs in the child between fork and exec
    if PRIORITY["nice"]:
        os.nice(PRIORITY["nice"])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_peer_venv(version: str = PEER_VERSION) -> Path:
    """Create ``.venv-bench-verifiers-<version>`` with the original library from PyPI (once)."""
    venv = peer_venv(version)
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if python.exists() and stamp.exists():
        return python
    log(f"installing verifiers=={version} into {venv.name} (first run only)")
    if not python.exists():
        base = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            f"verifiers=={version}",
        ],
        check=True,
    )
    stamp.write_text(version)
    return python


def is_ours(executable: str) -> bool:
    """True for our venv's python (or a script of that venv, such as ``vf``)."""
    return Path(executable).parent == OUR_PYTHON.parent


def clean_env(ours: bool = False) -> dict[str, str]:
    """Environment for driver subprocesses: no PYTHONPATH (the peer must not see this repo); ours
    gets this checkout on its path, so that a worktree measures its own code and not the one the
    shared venv's editable install points to."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if ours:
        env["PYTHONPATH"] = str(REPO)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TQDM_DISABLE"] = "1"
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["BENCH_API_KEY"] = "sk-bench"
    return env


def run_json(cmd: Sequence[str], *, timeout: float = 1800) -> dict[str, Any]:
    """Run a driver in a scratch working directory and return its last stdout line as JSON."""
    with tempfile.TemporaryDirectory(prefix="vf-bench-") as cwd:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=clean_env(is_ours(cmd[0])),
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_apply_priority,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"driver failed (rc={proc.returncode}): {' '.join(cmd)}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1])


class FastServer:
    """The fast scripted chat server (``verifiers.testing.fast_server``) in its own process."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> FastServer:
        self.proc = subprocess.Popen(
            [str(OUR_PYTHON), "-m", "verifiers.testing.fast_server", "--port", "0", *self.args],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            preexec_fn=_apply_priority,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"fast server did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        return self

    def requests(self) -> int:
        with urllib.request.urlopen(self.base_url + "/stats", timeout=10) as resp:
            return int(json.loads(resp.read())["requests"])

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@contextmanager
def fast_server(*args: str) -> Iterator[FastServer]:
    with FastServer(*args) as srv:
        yield srv


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (right-aligned numbers) that reads well in a terminal and in a README."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        out.append(
            "| "
            + " | ".join(
                c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            + " |"
        )
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if value != value:  # nan
            return "n/a"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    nice = f", measured at nice {PRIORITY['nice']:+d}" if PRIORITY["nice"] else ""
    return f"{os.cpu_count()} CPUs, load average {load:.2f}{nice}, Python {sys.version.split()[0]}"


def add_priority_argument(parser: Any) -> None:
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for all measured processes (e.g. -10 as root on a busy shared machine)",
    )
