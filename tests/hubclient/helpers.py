"""Helpers for end-to-end tests of the hub commands: `vf` subprocesses, fresh virtual environments,
environment packages, users."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import httpx

from hub.testing import HubProcess


def create_user(hub: HubProcess, name: str) -> str:
    r = httpx.post(f"{hub.url}/api/v1/users", json={"name": name},
                   headers={"Authorization": f"Bearer {hub.admin_token}"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["token"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class VF:
    """Runs `vf` as a subprocess with its own config dir, hub URL and (optional) token."""

    python: str
    config_dir: Path
    hub_url: str
    cwd: Path
    token: str | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VF_HUB_", "VF_AUTO_INSTALL"))}
        env.update(VF_CONFIG_DIR=str(self.config_dir), VF_HUB_URL=self.hub_url, PYTHONUNBUFFERED="1",
                   COLUMNS="200")
        if self.token:
            env["VF_HUB_TOKEN"] = self.token
        env.update(extra)
        return env

    def __call__(self, *args: str, input: str | None = None, timeout: float = 300, **extra: str) -> Result:
        proc = subprocess.run([self.python, "-m", "verifiers.cli", *args], capture_output=True, text=True,
                              input=input, timeout=timeout, cwd=self.cwd, env=self.env(**extra))
        res = Result(proc.returncode, proc.stdout, proc.stderr)
        # Whatever happens, a user never sees a traceback.
        assert "Traceback" not in res.text, res.text
        return res

    def python_run(self, code: str, **extra: str) -> Result:
        proc = subprocess.run([self.python, "-c", code], capture_output=True, text=True, timeout=300,
                              cwd=self.cwd, env=self.env(**extra))
        return Result(proc.returncode, proc.stdout, proc.stderr)


def fresh_venv(path: Path, *, register_project: bool = False) -> str:
    """A new virtual environment that sees the project's packages (so `vf` and pip run in it) but
    installs into its own site-packages: fast, and isolated for what the tests install.

    ``register_project`` also installs this project (editable, no dependencies) into the new
    environment itself, for installers such as uv that only look at the target's own site-packages
    when deciding whether ``verifiers>=...`` is already satisfied.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    parent = site.getsitepackages()[0]
    own = next((path / "lib").glob("python3*/site-packages"))
    (own / "_project_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    python = str(path / "bin" / "python")
    if register_project:
        root = Path(__file__).resolve().parents[2]
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(root)],
                       check=True, capture_output=True)
    return python


def write_env_package(root: Path, name: str, version: str = "1.0.0", *, reward_body: str = "return 1.0",
                      extra_files: dict[str, str | bytes] | None = None, description: str = "") -> Path:
    """A real environment package (a vf.SingleTurnEnv with a list dataset) built by `vf push`."""
    mod = name.replace("-", "_")
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{name}"
        version = "{version}"
        description = "{description or f'The {name} test environment.'}"
        readme = "README.md"
        requires-python = ">=3.11"
        dependencies = ["verifiers>=0.1.9"]
        keywords = ["test", "single-turn"]

        [tool.verifiers.eval]
        num_examples = 2
        rollouts_per_example = 1

        [tool.hatch.build.targets.wheel]
        packages = ["{mod}"]
        """))
    (pkg / "README.md").write_text(f"# {name}\n\nA test environment: answer with the number.\n")
    (pkg / mod).mkdir()
    (pkg / mod / "__init__.py").write_text(textwrap.dedent(f'''\
        import verifiers as vf


        def load_environment(**kwargs):
            rows = [{{"question": f"say {{i}}", "answer": str(i)}} for i in range(4)]

            def correct(completion, answer) -> float:
                {reward_body}

            return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[correct]), **kwargs)
        '''))
    for rel, content in (extra_files or {}).items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return pkg
