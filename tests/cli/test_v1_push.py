"""``vf eval <v1 taskset> --push`` (and ``push = true`` in ``vf eval @ config.toml``): a v1 run on
the hub's leaderboard, end to end: a real hub process, the package published and installed from it
into a fresh virtual environment, ``vf`` as subprocesses, a scripted model on loopback."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import httpx

from tests.hubclient.conftest import hub, make_vf  # noqa: F401  (the push tests' fixtures)
from tests.hubclient.helpers import create_user
from verifiers.testing import ScriptedServer, reply

TASKSET = '''
import verifiers.v1 as vf


class SumData(vf.TaskData):
    a: int
    b: int


class SumTask(vf.Task[SumData]):
    @vf.reward
    def correct(self, task: SumData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(task.a + task.b))


class SumConfig(vf.TasksetConfig):
    n: int = 4


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            yield SumTask(SumData(prompt=f"What is {i} + {i}?", a=i, b=i))


__all__ = ["SumTaskset"]
'''


def _v1_package(root: Path, name: str, version: str) -> Path:
    mod = name.replace("-", "_")
    pkg = root / name
    (pkg / mod).mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{name}"
        version = "{version}"
        description = "A v1 taskset: add a number to itself."
        readme = "README.md"
        requires-python = ">=3.11"
        dependencies = ["verifiers>=0.1.9"]

        [tool.hatch.build.targets.wheel]
        packages = ["{mod}"]
        """))
    (pkg / "README.md").write_text(f"# {name}\n\nA v1 taskset for the push test.\n")
    (pkg / mod / "__init__.py").write_text(textwrap.dedent(TASKSET))
    return pkg


def _sum(request) -> object:
    a, b = map(int, re.findall(r"\d+", request.messages[-1]["content"] or ""))
    return reply(str(a + b) if a != 3 else "no idea")  # the 4th task is answered wrong


def test_v1_eval_push_reaches_the_leaderboard(hub, make_vf, tmp_path: Path) -> None:  # noqa: F811
    vf = make_vf(create_user(hub, "vera"), venv=True)
    pkg = _v1_package(tmp_path, "vera-sums", "1.3.0")
    res = vf("push", str(pkg), "--no-check")  # vf check (the conformance check) runs classic environments only
    assert res.code == 0, res.text
    assert "published vera/vera-sums@1.3.0" in res.out
    res = vf("install", "vera/vera-sums@1.3.0")
    assert res.code == 0, res.text

    with ScriptedServer(_sum) as srv:
        res = vf("eval", "vera/vera-sums@1.3.0", "-m", "scripted-model", "-b", srv.base_url, "-n", "4", "-r", "2",
                 "--push", "--push-samples", "-o", str(tmp_path / "runs"))  # fmt: skip
        assert res.code == 0, res.text
        assert "pushed to the hub: vera/vera-sums@1.3.0" in res.out, res.text
        board = httpx.get(f"{hub.url}/api/v1/environments/vera/vera-sums/leaderboard", timeout=30).json()
        assert len(board) == 1
        row = board[0]
        assert (row["version"], row["model"], row["num_rollouts"]) == ("1.3.0", "scripted-model", 8)
        assert row["avg_reward"] == 0.75 and (row["num_errors"], row["num_infra_errors"]) == (0, 0)
        (posted,) = httpx.get(f"{hub.url}/api/v1/environments/vera/vera-sums/evals", timeout=30).json()
        samples = posted["summary"]["samples"]
        assert len(samples) == 8
        assert sorted(s["reward"] for s in samples) == [0.0, 0.0] + [1.0] * 6
        wrong = [s for s in samples if s["reward"] == 0.0]
        assert all(s["prompt"] == "What is 3 + 3?" and s["completion"] == ["no idea"] for s in wrong)
        assert all(s["rewards"][0]["rewards"]["correct"]["score"] == s["reward"] for s in samples)

        # the same from a config file: push = true, with the sampling the hub records
        config = tmp_path / "eval.toml"
        config.write_text(textwrap.dedent(f"""\
            model = "other-model"
            num_rollouts = 1
            push = true
            output_dir = "{tmp_path / 'runs2'}"

            [client]
            base_url = "{srv.base_url}"

            [sampling]
            temperature = 0.25

            [select]
            limit = 2

            [env.taskset]
            id = "vera/vera-sums@1.3.0"
            """))
        res = vf("eval", "@", str(config))
        assert res.code == 0, res.text
        assert "pushed to the hub: vera/vera-sums@1.3.0" in res.out
    board = httpx.get(f"{hub.url}/api/v1/environments/vera/vera-sums/leaderboard", timeout=30).json()
    other = next(r for r in board if r["model"] == "other-model")
    assert other["num_rollouts"] == 2 and other["avg_reward"] == 1.0
    assert other["sampling_args"] == {"temperature": 0.25}

    # a version that is not the one installed is refused before anything runs on the hub
    res = vf("eval", "vera/vera-sums@9.9.9", "-m", "m", "-b", "http://127.0.0.1:9/v1", "-n", "1", "--push",
             "-o", str(tmp_path / "runs3"))  # fmt: skip
    assert res.code == 1 and "version 1.3.0 is installed" in res.err, res.text
    assert len(httpx.get(f"{hub.url}/api/v1/environments/vera/vera-sums/evals", timeout=30).json()) == 2
    # a hub id that is not installed: refused, or installed from the hub with VF_AUTO_INSTALL=1
    fresh = make_vf(None, venv=True)
    with ScriptedServer(_sum) as srv:
        args = ("eval", "vera/vera-sums@1.3.0", "-m", "m", "-b", srv.base_url, "-n", "2", "-o", str(tmp_path / "runs4"))
        res = fresh(*args)
        assert res.code == 1 and "VF_AUTO_INSTALL=1" in res.err, res.text
        res = fresh(*args, VF_AUTO_INSTALL="1")
        assert res.code == 0, res.text
    assert fresh.python_run("import importlib.metadata as m; print(m.version('vera-sums'))").out.strip() == "1.3.0"
    # push needs a saved run
    res = vf("eval", "vera/vera-sums@1.3.0", "--no-save", "--push", "-m", "m", "-b", "http://127.0.0.1:9/v1")
    assert res.code == 1 and "push uploads the saved run" in res.err
