"""``vf debug`` / ``vf-debug`` on a v1 package: each task set up in a fresh runtime, one command or
host script run there, each task's trace (with its outcome in ``info.debug``) saved."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import run_vf
from tests.cli.test_validate import write_v1_package
from verifiers.cli import debug_cmd

SETUP = '''
    async def setup(self, runtime) -> None:
        await runtime.write("answer.txt", self.data.answer)
'''


@pytest.fixture(autouse=True)
def _here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)  # the default run folder is ./outputs/...
    before, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("v1chk_"):
            del sys.modules[name]
    sys.path[:] = path


def _traces(folder: Path) -> dict[int, dict]:
    episodes = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines()]
    assert all(len(e["traces"]) == 1 and e["ok"] == e["traces"][0]["ok"] for e in episodes)
    return {e["traces"][0]["task"]["data"]["idx"]: e["traces"][0] for e in episodes}


def test_a_command_runs_after_each_tasks_setup_and_each_trace_keeps_the_outcome(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-debug", validate=SETUP)
    # the setup wrote each task's answer into its work folder; task 1's is "2": its command fails
    code = debug_cmd.run([str(folder), "--command", 'cat answer.txt; test "$(cat answer.txt)" != 2', "-o", "out"])
    assert code == 1
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "idx=0 ok=True reason=pass", "idx=1 ok=False reason=nonzero_exit", "idx=2 ok=True reason=pass"
    ]  # fmt: skip
    traces = _traces(tmp_path / "out")
    assert sorted(traces) == [0, 1, 2]
    ok, bad = traces[0]["info"]["debug"], traces[1]["info"]["debug"]
    assert (ok["ok"], ok["reason"], ok["exit_code"], ok["stdout"], ok["action"]) == (True, "pass", 0, "0", "command")
    assert ok["task"] == {"idx": 0, "name": None}
    assert (bad["ok"], bad["reason"], bad["exit_code"], bad["stdout"]) == (False, "nonzero_exit", 1, "2")
    assert traces[1]["ok"] is False and traces[1]["errors"][0]["type"] == "DebugActionError"
    assert traces[1]["stop_condition"] == "nonzero_exit" and traces[0]["stop_condition"] == "pass"
    timing = traces[0]["timing"]
    assert timing["boot"]["end"] <= timing["setup"]["start"] <= timing["setup"]["end"] <= timing["agent"]["start"]
    assert traces[0]["agent"]["name"] == "debug" and traces[0]["agent"]["runtime"]["type"] == "subprocess"
    saved = json.loads((tmp_path / "out" / "configs" / "debug.json").read_text())
    assert saved["command"].startswith("cat answer.txt") and saved["taskset"]["id"] == str(folder)
    with pytest.raises(Exception, match="already holds a debug run"):
        debug_cmd.run([str(folder), "--command", "true", "-o", "out"])


def test_a_host_script_runs_outside_the_work_folder_and_failures_are_recorded(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-debug-script", validate=SETUP)
    script = tmp_path / "look.py"
    script.write_text("#!/usr/bin/env python3\nimport os, sys\nprint(sorted(os.listdir('.')), open('answer.txt').read())\n"
                      "print(os.path.abspath(sys.argv[0]).startswith(os.getcwd()), file=sys.stderr)\n")  # fmt: skip
    assert debug_cmd.run([str(folder), "--script-path", str(script), "-n", "1"]) == 0
    (run,) = (tmp_path / "outputs").iterdir()  # the original's default: outputs/<taskset>--debug/<uuid>
    assert run.name.endswith("--debug")
    (trace,) = _traces(next(run.iterdir())).values()
    info = trace["info"]["debug"]
    # the work folder holds what the setup wrote and nothing of ours; the script ran from elsewhere
    assert info["ok"] and info["stdout"].strip() == "['answer.txt'] 0" and info["stderr"].strip() == "False", info
    capsys.readouterr()

    slow = write_v1_package(tmp_path, "v1chk-debug-slow", validate=SETUP.replace(
        'await runtime.write("answer.txt", self.data.answer)', "import asyncio; await asyncio.sleep(30)"))  # fmt: skip
    code = debug_cmd.run([str(slow), "--command", "true", "-n", "1", "--timeout.setup", "0.5", "-o", "slow"])
    (trace,) = _traces(tmp_path / "slow").values()
    info = trace["info"]["debug"]
    assert code == 1 and (info["reason"], info["error_type"]) == ("timeout", "TimeoutError"), info
    assert "setup timed out after 0.5s" in info["error"] and trace["timing"]["agent"]["start"] in (None, 0, 0.0)
    code = debug_cmd.run([str(folder), "--command", "sleep 30", "-n", "1", "--timeout.total", "0.5", "-o", "hang"])
    (trace,) = _traces(tmp_path / "hang").values()
    assert code == 1 and trace["info"]["debug"]["error"] == "debug action timed out after 0.5s"


def test_options_are_checked_and_the_console_script_runs(tmp_path) -> None:
    folder = write_v1_package(tmp_path, "v1chk-debug-opts")
    endless = write_v1_package(tmp_path, "v1chk-debug-endless", endless=True)
    for argv, message in [
        ([str(folder)], "exactly one of --command or --script-path"),
        ([str(folder), "--command", "true", "--script-path", "x.sh"], "exactly one of"),
        ([str(folder), "--script-path", str(tmp_path / "none.sh")], "is not a file"),
        ([str(folder), "--command", "true", "--frobnicate", "1"], "frobnicate"),
        ([str(endless), "--command", "true"], "endless"),
        ([], "name the taskset"),
    ]:
        with pytest.raises(Exception, match=message):
            debug_cmd.run(argv)
    res = run_vf(str(folder), "--command", "echo hi", "-n", "2", "-o", "cs", script="vf-debug", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["idx=0 ok=True reason=pass", "idx=1 ok=True reason=pass"]
    assert all(t["info"]["debug"]["stdout"] == "hi\n" for t in _traces(tmp_path / "cs").values())
    res = run_vf("debug", str(folder), "--command", "exit 3", "-n", "1", "-o", "vf", cwd=tmp_path)
    assert res.returncode == 1 and "idx=0 ok=False reason=nonzero_exit" in res.stdout, res.stderr


def test_a_task_its_runtime_cannot_keep_is_refused_before_anything_runs(tmp_path, capsys) -> None:
    """A task with a network policy (no hosts) is placed as an agent's run places it: refused on
    the subprocess runtime (the host's network), run in the sandbox (no network at all)."""
    folder = write_v1_package(tmp_path, "v1chk-debug-policy", validate=SETUP)
    module = folder / "v1chk_debug_policy" / "__init__.py"
    module.write_text(module.read_text().replace('id=f"t{i}"', 'id=f"t{i}", network_allow=[]'))
    code = debug_cmd.run([str(folder), "--command", "cat answer.txt", "-n", "1", "-o", "host"])
    (trace,) = _traces(tmp_path / "host").values()
    info = trace["info"]["debug"]
    assert code == 1 and info["reason"] == "error" and info["error_type"] == "SandboxError"
    assert "requires a network policy" in info["error"] and info["stdout"] == ""
    code = debug_cmd.run([str(folder), "--command", "cat answer.txt", "-n", "1", "-o", "box", "--runtime.type", "sandbox"])
    (trace,) = _traces(tmp_path / "box").values()
    assert code == 0 and trace["info"]["debug"]["stdout"] == "0", trace["info"]["debug"]
