"""v1 packages on the hub, end to end: a plain package whose ``__all__`` lists one ``Taskset``
subclass (no entry point, no ``load_environment``) is pushed to a real hub (``python -m hub
serve``), listed by its index, installed by the real pip from that index, shown on its README and
source pages, and checked by a real check worker (``python -m hub worker``, the bubblewrap
sandbox, a fresh virtual environment) to ``passed``; broken v1 packages end ``failed`` with the
reason. A v1 run's ``metadata.json`` goes on the version's leaderboard like a classic one's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hub.test_checks import Hub, checked_hub, start_worker, wait_for
from tests.support.envpkg import build_project

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

TASKSET = '''
"""Doubling numbers: a v1 taskset."""

import verifiers.v1 as vf


class DoubleData(vf.TaskData):
    answer: str


class DoubleTask(vf.Task[DoubleData]):
    @vf.reward
    def correct(self, task: DoubleData, trace: vf.Trace) -> float:
        REWARD


class DoubleTaskset(vf.Taskset[DoubleTask]):
    def load(self):
        for i in range(4):
            yield DoubleTask(DoubleData(prompt=f"What is {i} doubled?", answer=str(2 * i), id=f"d{i}"))


__all__ = ALL
'''
GOOD_REWARD = "return float(task.answer in trace.last_reply)"

CASES = {  # name: (reward body, __all__, verdict, what the reason says)
    "v1-double": (GOOD_REWARD, '["DoubleTaskset"]', "passed", None),
    "v1-reward-raises": ('raise ZeroDivisionError("the reward divides by zero")', '["DoubleTaskset"]', "failed",
                         "ZeroDivisionError: the reward divides by zero"),
    "v1-no-taskset": (GOOD_REWARD, '["DoubleTask"]', "failed", "exports no Taskset subclass in __all__"),
    # dependencies from the real public index (PyPI), fetched in the sandbox's setup phase through
    # the egress proxy (the host's CA store must reach pip there: a TLS-inspecting proxy's CA): a
    # wheel (six) and an sdist-only one (sgmllib3k), built in the sandbox
    "v1-public-dep": ("import six, sgmllib\n        return float(task.answer in trace.last_reply and six.PY3)",
                      '["DoubleTaskset"]', "passed", None),
}  # fmt: skip
PUBLIC_DEPS = {"v1-public-dep": ["six>=1.16", "sgmllib3k==1.0.0"]}


def write_v1_project(root: Path, name: str, version: str, reward: str, all_: str, deps: tuple[str, ...] = ()) -> Path:
    """A v1 package project: no ``verifiers.environments`` entry point, no ``load_environment``."""
    mod = name.replace("-", "_")
    project = root / f"{name}-{version}"
    (project / mod).mkdir(parents=True)
    (project / mod / "__init__.py").write_text(textwrap.dedent(TASKSET.replace("REWARD", reward).replace("ALL", all_)))
    (project / "README.md").write_text(f"# {name}\n\nA **v1** taskset: numbers to double.\n")
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{name}"
            version = "{version}"
            description = "A v1 taskset"
            readme = "README.md"
            requires-python = ">=3.10"
            dependencies = {json.dumps(["verifiers", *deps])}

            [tool.hatch.build.targets.wheel]
            packages = ["{mod}"]

            [tool.hatch.build.targets.sdist]
            include = ["{mod}", "README.md", "pyproject.toml"]
            """
        )
    )
    return project


@pytest.fixture(scope="module")
def v1hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    yield from checked_hub(tmp_path_factory.mktemp("v1hub"), {"VF_HUB_CHECK_LEASE_SECONDS": "20"}, user="v1-checker")


@pytest.fixture(scope="module")
def pushed(v1hub: Hub) -> dict[str, dict[str, Path]]:
    """Every case pushed (wheel and sdist) through the upload API."""
    out = {}
    for name, (reward, all_, _status, _why) in CASES.items():
        project = write_v1_project(v1hub.root / "src" / uuid.uuid4().hex[:8], name, "0.1.0", reward, all_,
                                   tuple(PUBLIC_DEPS.get(name, ())))
        wheel, sdist = build_project(project, v1hub.root / "dist" / name)
        files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (wheel, sdist)]
        with v1hub.client() as c:
            r = c.post(f"/api/v1/environments/admin/{name}/versions", files=files)
        assert r.status_code == 201, r.text
        out[name] = {"wheel": wheel, "sdist": sdist}
    return out


@pytest.fixture(scope="module")
def verdicts(v1hub: Hub, pushed: dict[str, dict[str, Path]]) -> dict[str, dict]:
    start_worker(v1hub, "v1w")
    return {name: wait_for(v1hub, name, ("passed", "failed", "error")) for name in CASES}


def test_upload_accepts_v1_packages_and_still_refuses_bad_archives(v1hub: Hub, pushed) -> None:
    with v1hub.client() as c:
        info = c.get("/api/v1/environments/admin/v1-double/versions/0.1.0").json()
        assert {f["kind"] for f in info["files"]} == {"wheel", "sdist"}
        # a wheel whose name and version disagree with its metadata is refused, v1 or not
        wheel = pushed["v1-double"]["wheel"]
        renamed = wheel.name.replace("0.1.0", "0.2.0")
        r = c.post("/api/v1/environments/admin/v1-double/versions",
                   files=[("files", (renamed, wheel.read_bytes(), "application/octet-stream"))])  # fmt: skip
        assert r.status_code == 400, r.text


def test_index_readme_and_source_pages(v1hub: Hub, pushed) -> None:
    with v1hub.client() as c:
        index = c.get("/admin/simple/v1-double/")
        assert index.status_code == 200 and pushed["v1-double"]["wheel"].name in index.text
        page = c.get("/admin/v1-double")
        assert page.status_code == 200 and "<strong>v1</strong> taskset" in page.text  # the rendered README
        listing = c.get("/admin/v1-double/source/0.1.0")
        assert listing.status_code == 200 and "v1_double/__init__.py" in listing.text
        source = c.get("/admin/v1-double/source/0.1.0/v1_double/__init__.py")
        assert source.status_code == 200 and "DoubleTaskset" in source.text


def test_pip_installs_it_from_the_index_and_it_validates_there(v1hub: Hub, pushed, tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VF_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    # --no-deps: its one dependency, verifiers, is the library under test (on PYTHONPATH below)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--no-deps", "--target", str(target),
         "--index-url", f"{v1hub.proc.url}/admin/simple/", "v1-double==0.1.0"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (target / "v1_double" / "__init__.py").is_file()
    env["PYTHONPATH"] = f"{target}{os.pathsep}{ROOT}"
    checked = subprocess.run(
        [sys.executable, "-m", "verifiers.cli", "validate", "v1-double", "-n", "2", "-r", "1", "--json"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = json.loads(checked.stdout)
    assert verdict["ok"] is True and verdict["env_id"] == "v1-double"
    assert "v1 package v1_double 0.1.0" in verdict["checks"][0]["detail"]  # the installed distribution


@pytest.mark.parametrize("name", list(CASES))
def test_the_check_worker_gives_the_verdict(v1hub: Hub, verdicts: dict[str, dict], name: str) -> None:
    _reward, _all, status, why = CASES[name]
    run = verdicts[name]
    with v1hub.client() as c:
        detail = c.get(f"/api/v1/environments/admin/{name}/versions/0.1.0/checks").json()[0]
    assert run["status"] == status, (run, (detail.get("log_tail") or "")[-3000:])
    if why:
        assert why in (run["reason"] or ""), run
    checks = {ch["name"]: ch for ch in detail["report"]["checks"]}
    if status == "passed":
        from verifiers.v1.check import CHECKS

        assert list(checks) == list(CHECKS)  # the v1 checker ran in the sandbox, every check reported
        assert checks["rollouts"]["ok"] and checks["traces"]["ok"] and checks["teardown"]["ok"]
        assert detail["report"]["num_rollouts"] == 4 and detail["report"]["rewards"] == [1.0] * 4


def test_a_v1_runs_metadata_goes_on_the_leaderboard(v1hub: Hub, pushed, tmp_path: Path) -> None:
    import asyncio

    from verifiers.clients import ModelClient
    from verifiers.testing.scripted import ScriptedServer
    from verifiers.v1.env import load_environment
    from verifiers.v1.rollout import run_v1

    project = next((v1hub.root / "src").glob("*/v1-double-0.1.0"))
    sys.path.insert(0, str(project))
    try:
        env = load_environment({"taskset": {"id": "v1-double"}})

        async def run(url: str):
            client = ModelClient.from_any(url)
            try:
                return await run_v1(env, list(env.taskset), client, model="scripted", num_rollouts=2, folder=tmp_path / "run")
            finally:
                await client.aclose()

        with ScriptedServer(lambda req: "0") as srv:  # right for the first task only
            asyncio.run(run(srv.base_url))
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("v1_double", None)
    metadata = json.loads((tmp_path / "run" / "metadata.json").read_text())
    assert metadata["api"] == "v1"
    with v1hub.client() as c:
        r = c.post("/api/v1/environments/admin/v1-double/versions/0.1.0/evals", json={"metadata": metadata, "summary": {}})
        assert r.status_code == 201, r.text
        board = c.get("/api/v1/environments/admin/v1-double/leaderboard").json()
    assert [(row["model"], row["avg_reward"], row["num_rollouts"]) for row in board] == [("scripted", 0.25, 8)]
    with httpx.Client(base_url=v1hub.proc.url) as anon:
        assert "scripted" in anon.get("/admin/v1-double").text  # on the page's leaderboard too
