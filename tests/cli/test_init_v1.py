"""`vf init NAME` / `vf-init NAME`: the v1 scaffold (the default, as in the original 0.4.0) loads as a
v1 package and passes `vf eval` against a scripted model out of the box, as real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.cli.helpers import REPO, run_vf
from verifiers.testing.scripted import ScriptedServer, tool_call, tool_calls


def _solve(req) -> str:
    a, b = map(int, re.findall(r"\d+", req.messages[-1]["content"] or ""))
    return f"The sum is {a + b}"


def _eval(pkg_parent: Path, name: str, srv: ScriptedServer, out: Path, *extra: str):
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{pkg_parent}"}  # as `pip install -e` would make it importable
    return run_vf("eval", name, "-m", srv.model, "-b", srv.base_url, "-n", "4", "-r", "2", "-o", str(out), *extra,
                  cwd=out.parent, env=env)  # fmt: skip


def _metadata(out: Path) -> dict:
    (run,) = out.iterdir()
    return json.loads((run / "metadata.json").read_text())


def test_v1_scaffold_is_a_v1_package_that_evaluates(tmp_path) -> None:
    proc = run_vf("init", "sum-tasks", "--path", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "sum_tasks"  # the original's layout: the folder named after the module
    for rel in ("pyproject.toml", "README.md", "sum_tasks/__init__.py", "sum_tasks/taskset.py"):
        assert (pkg / rel).is_file(), rel
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "sum-tasks" and meta["project"]["version"] == "0.1.0"
    assert "entry-points" not in meta["project"]  # a v1 package is found by its module, not an entry point
    assert meta["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["sum_tasks"]
    readme = (pkg / "README.md").read_text()
    assert "vf eval sum-tasks" in readme and "## Reward" in readme
    # __all__ lists exactly one Taskset subclass: what the v1 loader (and the classic one) take
    probe = subprocess.run(
        [sys.executable, "-c", "import sum_tasks, verifiers.v1 as vf\n"
         "from verifiers.v1.loading import v1_taskset_class\n"
         "print(sum_tasks.__all__, v1_taskset_class(sum_tasks).__name__)\n"
         "print(type(vf.load_environment({'taskset': {'id': 'sum-tasks', 'num_tasks': 3}})).__name__)"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{pkg}"}, capture_output=True, text=True,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split("\n")[:2] == ["['SumTasksTaskset'] SumTasksTaskset", "SingleAgentEnv"]

    with ScriptedServer(_solve) as srv:
        res = _eval(pkg, "sum-tasks", srv, tmp_path / "good")
        assert res.returncode == 0, res.stdout + res.stderr
        bodies = [r.body for r in srv.requests]
    md = _metadata(tmp_path / "good")
    assert (md["num_rollouts"], md["num_errors"], md["avg_reward"]) == (8, 0, 1.0)
    assert md["taskset_id"] == "sum-tasks" and "reply_length" in md["avg_metrics"]
    assert all(b["messages"][0] == {"role": "system", "content": "Reply with the final number only."} for b in bodies)
    assert "tools" not in bodies[0] or not bodies[0]["tools"]
    # a wrong answer runs as cleanly and scores 0
    with ScriptedServer(lambda req: "no idea") as srv:
        res = _eval(pkg, "sum-tasks", srv, tmp_path / "bad")
        assert res.returncode == 0, res.stdout + res.stderr
    md = _metadata(tmp_path / "bad")
    assert (md["num_errors"], md["avg_reward"]) == (0, 0.0)

    # it builds into a wheel holding the package
    from hatchling.builders.wheel import WheelBuilder

    (built,) = WheelBuilder(str(pkg)).build(directory=str(tmp_path / "dist"), versions=["standard"])
    names = zipfile.ZipFile(built).namelist()
    assert {"sum_tasks/__init__.py", "sum_tasks/taskset.py"} <= set(names)


def test_add_tool_offers_a_tool_the_model_calls(tmp_path) -> None:
    """-T: a tool server the model calls; -H: the package's own harness, which a role that names
    none runs (the shared chat program with a preamble of its own). Both run on the original too."""
    proc = run_vf("init", "tool-sums", "-T", "-H", "--path", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "tool_sums"

    def script(req):
        if req.messages[-1]["role"] == "tool":  # the tool's answer: say it
            return f"{req.messages[-1]['content']}"
        a, b = map(int, re.findall(r"\d+", req.messages[-1]["content"] or ""))
        return tool_calls(tool_call("calc_add", {"a": a, "b": b}))

    with ScriptedServer(script) as srv:
        res = _eval(pkg, "tool-sums", srv, tmp_path / "o", "--env.agent.max-turns", "3")
        assert res.returncode == 0, res.stdout + res.stderr
        first = srv.requests[0].body
    assert [t["function"]["name"] for t in first["tools"]] == ["calc_add"]
    assert first["messages"][0]["role"] == "system" and first["messages"][0]["content"].startswith("Work it out")
    md = _metadata(tmp_path / "o")
    assert (md["num_errors"], md["avg_reward"]) == (0, 1.0)
    assert (pkg / "tool_sums" / "servers" / "tool.py").is_file()  # a tool server of its own, as the original lays it out

    # the same package runs on the original 0.4.0 as written: its hooks are coroutines (the original
    # awaits them) and its toolset is a vf.Toolset server
    from tests.v1.test_wire_compat import _original_python

    python = _original_python()
    out = tmp_path / "theirs"
    with ScriptedServer(script) as srv:
        theirs = subprocess.run(
            [str(python), "-c", "import sys; from verifiers.v1.cli.eval.main import main; sys.exit(main())", "tool-sums",
             "-n", "1", "-r", "1", "-m", srv.model, "--client.base-url", srv.base_url, "--client.api-key-var", "VF_TEST_KEY",
             "-o", str(out), "--run.name", "probe", "-c", "1", "--env.agent.harness.id", "tool-sums",
             "--env.agent.runtime.type", "subprocess", "--env.agent.max-turns", "3", "--no-rich", "--no-push"],
            env={**os.environ, "PYTHONPATH": str(pkg), "VF_TEST_KEY": "sk-test"}, cwd=tmp_path, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-3000:]
        named = {t["function"]["name"] for r in srv.requests for t in (r.body.get("tools") or [])}
        assert srv.requests[0].body["messages"][0]["content"].startswith("Work it out")  # its harness ran
    rows = [json.loads(line) for line in (out / "probe" / "traces.jsonl").read_text().splitlines()]
    traces = [t for row in rows for t in row["traces"]]
    assert len(traces) == 1 and named == {"calc_add"}
    assert all(t["rewards"]["correct"]["score"] == 1.0 and not t["errors"] for t in traces), traces


def test_vf_init_script_is_v1_by_default_and_files_are_kept(tmp_path) -> None:
    proc = run_vf("my-sums", "-p", str(tmp_path / "envs"), script="vf-init")
    assert proc.returncode == 0, proc.stderr
    taskset = tmp_path / "envs" / "my_sums" / "my_sums" / "taskset.py"
    assert "import verifiers.v1 as vf" in taskset.read_text()
    taskset.write_text("# my edits\n")
    again = run_vf("my-sums", "-p", str(tmp_path / "envs"), script="vf-init")
    assert again.returncode == 0 and "kept existing my_sums/taskset.py" in again.stdout
    assert taskset.read_text() == "# my edits\n"
    assert run_vf("my-sums", "-p", str(tmp_path / "envs"), "--force", script="vf-init").returncode == 0
    assert "class MySumsTaskset" in taskset.read_text()
    # flags of the other layout are refused with one line
    res = run_vf("init", "x-sums", "--classic", "-T", "--path", str(tmp_path))
    assert res.returncode == 1 and "are for the v1 scaffold" in res.stderr
    res = run_vf("y-sums", "--rewrite-readme", "-p", str(tmp_path), script="vf-init")
    assert res.returncode == 1 and "--classic" in res.stderr


def test_the_original_console_scripts_exist(tmp_path) -> None:
    from tests.cli.helpers import declared_scripts

    ours = declared_scripts()
    # 0.4.0's [project.scripts]: vf-validate comes with `vf validate` (verifiers/cli/check_cmd.py)
    assert {"vf-eval", "vf-init", "vf-replay", "vf-debug", "vf-gepa"} <= set(ours)
    for script in ("vf-gepa",):
        res = run_vf("my-taskset", script=script, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        lines = res.stderr.strip().splitlines()
        assert lines[0].startswith(f"error: {script} is not available: in the original verifiers 0.4.0")
        assert lines[1].startswith("hint: ") and len(lines) == 2
