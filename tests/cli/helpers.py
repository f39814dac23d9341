"""Helpers for the CLI tests: run ``vf`` as a real subprocess, write small environments."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def vf_command(script: str = "vf") -> list[str]:
    """The installed console script when present (what users run), else ``python -m``."""
    installed = Path(sys.executable).parent / script
    if installed.exists():
        return [str(installed)]
    if script == "vf":
        return [sys.executable, "-m", "verifiers.cli"]
    module = "verifiers.cli.compat"
    entry = {"vf-eval": "vf_eval_main", "vf-init": "vf_init_main", "vf-validate": "vf_validate_main"}[script]
    return [sys.executable, "-c", f"import sys; from {module} import {entry}; {entry}(sys.argv[1:])"]


def run_vf(
    *args: str,
    script: str = "vf",
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("VF_DEBUG", None)
    return subprocess.run(
        [*vf_command(script), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def write_env_file(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


#: A single-turn environment whose reward is 1.0 when the reply contains the answer.
ECHO_ENV = """
import verifiers as vf


def contains_answer(completion, answer, **kwargs) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return 1.0 if answer in (text or "") else 0.0


def load_environment(num_rows: int = 6, **kwargs):
    rows = [{"question": f"Repeat the number {i}", "answer": str(i)} for i in range(num_rows)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[contains_answer]), **kwargs)
"""
