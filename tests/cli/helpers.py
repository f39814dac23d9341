"""Helpers for the CLI tests: run ``vf`` as a real subprocess, write small environments."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def declared_scripts() -> dict[str, str]:
    """The console scripts pyproject.toml declares (name -> ``module:function``)."""
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def vf_command(script: str = "vf") -> list[str]:
    """The installed console script when present and pointing where pyproject.toml says (what
    users run), else the declared target run by the interpreter (a script added since the
    environment was installed)."""
    target = declared_scripts()[script]
    installed = Path(sys.executable).parent / script
    if installed.exists() and target.split(":")[0] in installed.read_text(errors="replace"):
        return [str(installed)]
    module, entry = target.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {entry}; sys.argv[0] = {script!r}; {entry}()"]


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
