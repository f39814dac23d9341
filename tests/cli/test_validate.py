"""``vf validate`` / ``vf-validate`` / ``vf check`` on v1 packages (and classic ones): the verdict a
person reads and the JSON one the hub reads."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import ECHO_ENV, run_vf, write_env_file
from verifiers import checking
from verifiers.check import CHECKS as CLASSIC_CHECKS
from verifiers.cli import validate_cmd
from verifiers.v1.check import CHECKS as V1_CHECKS

VERDICT_KEYS = {"ok", "target", "env_id", "checks", "rollouts", "replies"}
ROLLOUT_KEYS = {"example_id", "rollout_index", "reward", "metrics", "error", "stop_condition"}

GOOD = '''
import verifiers.v1 as vf


class AddData(vf.TaskData):
    answer: str


class AddTask(vf.Task[AddData]):
    @vf.reward
    def correct(self, task: AddData, trace: vf.Trace) -> float:
        return float(task.answer in trace.last_reply)

    @vf.metric
    def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)
VALIDATE


class AddConfig(vf.TasksetConfig):
    n: int = 3


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    INFINITE = ENDLESS

    def load(self):
        LOAD
        i = 0
        while ENDLESS or i < self.config.n:
            yield AddTask(AddData(prompt=f"What is {i} + {i}?", answer=str(2 * i), id=f"t{i}"))
            i += 1


__all__ = ALL
'''


def write_v1_package(root: Path, name: str, *, all_: str = '["AddTaskset"]', load: str = "pass",
                     endless: bool = False, validate: str = "", reward: str | None = None) -> Path:  # fmt: skip
    """A plain v1 package folder (pyproject without entry points, a module whose ``__all__``
    names the taskset)."""
    module = name.replace("-", "_")
    body = (
        GOOD.replace("ALL", all_).replace("LOAD", load).replace("ENDLESS", str(endless)).replace("VALIDATE", validate)
    )
    if reward is not None:
        body = body.replace("return float(task.answer in trace.last_reply)", reward)
    folder = root / name
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(textwrap.dedent(body))
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.2.0"\ndependencies = ["verifiers"]\n'
        f'[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    )
    return folder


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(checking, "LEFTOVER_GRACE_S", 2.0)
    monkeypatch.chdir(tmp_path)  # every validation writes its run folder under ./outputs


@pytest.fixture(autouse=True)
def _forget_packages():
    before = set(sys.modules)
    path = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("v1chk_"):
            del sys.modules[name]
    sys.path[:] = path


def validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """``vf validate ... --json`` in this process: the exit code and the verdict."""
    code = validate_cmd.run([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def by_name(verdict: dict) -> dict[str, dict]:
    return {c["name"]: c for c in verdict["checks"]}


def test_a_v1_package_passes_with_the_verdict_schema_of_vf_check(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-good")
    code, verdict = validate(capsys, str(folder), "-n", "2", "-r", "2")
    assert code == 0, verdict
    assert set(verdict) == VERDICT_KEYS and verdict["ok"] is True
    assert [c["name"] for c in verdict["checks"]] == list(V1_CHECKS)
    assert all(set(c) == {"name", "ok", "detail", "skipped"} for c in verdict["checks"])
    checks = by_name(verdict)
    assert all(checks[n]["ok"] and not checks[n]["skipped"] for n in
               ("load", "taskset", "tasks", "rollouts", "traces", "rewards", "errors", "teardown", "leftovers"))  # fmt: skip
    assert checks["gold"]["skipped"]  # no task defines validate()
    assert len(verdict["rollouts"]) == 4 and all(set(r) == ROLLOUT_KEYS for r in verdict["rollouts"])
    # the scripted model put each task's answer in its reply, so the reward reads it
    assert [r["reward"] for r in verdict["rollouts"]] == [1.0] * 4
    assert verdict["env_id"] == "v1chk-good"


def test_an_endless_taskset_is_sampled_not_exhausted(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-endless", endless=True)
    code, verdict = validate(capsys, str(folder), "-n", "3", "-r", "1")
    assert code == 0, verdict
    assert "3 task(s)" in by_name(verdict)["taskset"]["detail"] and "endless" in by_name(verdict)["taskset"]["detail"]
    assert len(verdict["rollouts"]) == 3
    # without -n vf validate checks every task: an endless taskset is refused, as the original
    # refuses it, never sampled as if it were the whole set (and nothing is checked)
    code, verdict = validate(capsys, str(folder))
    assert code == 1
    assert by_name(verdict)["taskset"] == {"name": "taskset", "ok": False, "skipped": False,
                                           "detail": "AddTaskset is infinite - bound the run with -n"}  # fmt: skip
    assert verdict["rollouts"] == []


def test_a_task_class_that_needs_a_container_is_refused_on_the_host(tmp_path, capsys) -> None:
    """A task class that declares ``NEEDS_CONTAINER`` is refused on the subprocess runtime (the
    host) in each model-free check, with one line that names the way out, as the original refuses
    it; nothing of the task runs."""
    marker = tmp_path / "setup-ran"
    needs = f"""
    NEEDS_CONTAINER = True

    async def setup(self, runtime) -> None:
        open({str(marker)!r}, "w").close()
"""
    folder = write_v1_package(tmp_path, "v1chk-container", validate=textwrap.indent(textwrap.dedent(needs), "    "))
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-noop")
    assert code == 1
    detail = by_name(verdict)["noop"]["detail"]
    assert "AddTask needs a container runtime (NEEDS_CONTAINER)" in detail and "--runtime.type sandbox" in detail
    assert not marker.exists()


@pytest.mark.parametrize(
    ("kwargs", "check", "reason"),
    [
        ({"all_": '["AddTask"]'}, "load", "exports no Taskset subclass in __all__"),
        ({"all_": "[]"}, "load", "exports no Taskset subclass in __all__"),
        ({"load": 'raise RuntimeError("the dataset is gone")'}, "taskset", "RuntimeError: the dataset is gone"),
        ({"reward": 'raise ValueError("cannot score")'}, "noop", "scoring the untouched task failed"),
    ],
    ids=["no-taskset-in-all", "empty-all", "load-raises", "reward-raises"],
)
def test_a_broken_v1_package_fails_with_a_clear_reason(tmp_path, capsys, kwargs, check, reason) -> None:
    folder = write_v1_package(tmp_path, f"v1chk-broken-{len(list(tmp_path.iterdir()))}", **kwargs)
    code, verdict = validate(capsys, str(folder), "-n", "2", "-r", "1")
    assert code == 1 and verdict["ok"] is False
    failed = [c for c in verdict["checks"] if not c["ok"] and not c["skipped"]]
    assert failed[0]["name"] == check, failed
    assert reason in failed[0]["detail"], failed[0]
    if check == "noop":
        assert "cannot score" in failed[0]["detail"]
        # the episodes fail it too; the reward's None is accepted by the rewards check because
        # its error is on record
        assert "reward 'correct'" in by_name(verdict)["errors"]["detail"] and not by_name(verdict)["errors"]["ok"]
        assert by_name(verdict)["rewards"]["ok"]


def test_the_gold_check_runs_validate_and_only_gold_runs_it_alone(tmp_path, capsys) -> None:
    good = """
    async def validate(self, runtime) -> bool:
        await runtime.write("answer.txt", self.data.answer)
        return (await runtime.read("answer.txt")).decode() == self.data.answer
    """
    folder = write_v1_package(tmp_path, "v1chk-gold", validate=textwrap.indent(textwrap.dedent(good), "    "))
    code, verdict = validate(capsys, str(folder), "-n", "2", "-r", "1")
    assert code == 0 and by_name(verdict)["gold"] == {"name": "gold", "ok": True, "skipped": False, "detail": "2 task(s) valid"}
    code, verdict = validate(capsys, str(folder), "-n", "2", "--only-gold")
    assert code == 0 and verdict["rollouts"] == []
    assert by_name(verdict)["rollouts"]["skipped"] and not by_name(verdict)["gold"]["skipped"]

    wrong = "\n    async def validate(self, runtime) -> bool:\n        return self.data.answer == '0'\n"
    folder = write_v1_package(tmp_path, "v1chk-gold-wrong", validate=textwrap.indent(textwrap.dedent(wrong), "    "))
    code, verdict = validate(capsys, str(folder), "-n", "2", "--only-gold")
    assert code == 1
    assert "task 1: validate() returned False" in by_name(verdict)["gold"]["detail"]


def test_only_noop_fails_a_task_that_passes_untouched(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-noop", reward="return 1.0")
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-noop")
    assert code == 1 and "passes untouched (reward 1)" in by_name(verdict)["noop"]["detail"]
    folder = write_v1_package(tmp_path, "v1chk-noop-ok")
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-noop")
    assert code == 0, verdict


def test_taskset_knobs_and_runtime_flags_reach_the_package(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-knobs")
    code, verdict = validate(capsys, str(folder), "-n", "5", "-r", "1", "--taskset.n", "1", "--runtime.type", "subprocess")
    assert code == 0 and len(verdict["rollouts"]) == 1  # n = 1 task, although -n asked for 5
    code, verdict = validate(capsys, str(folder), "--taskset.no_such_knob", "1")
    assert code == 1 and "no_such_knob" in by_name(verdict)["load"]["detail"]
    code, verdict = validate(capsys, str(folder), "--runtime.type", "docker")
    assert code == 1 and "runtime" in by_name(verdict)["load"]["detail"]


def test_classic_environments_still_get_the_classic_check(tmp_path, capsys) -> None:
    env_file = write_env_file(tmp_path, "v1chk_classic_echo", ECHO_ENV)
    code, verdict = validate(capsys, str(env_file), "-n", "2", "-r", "1")
    assert code == 0, verdict
    assert set(verdict) == VERDICT_KEYS and [c["name"] for c in verdict["checks"]] == list(CLASSIC_CHECKS)
    # a v1-only option on a classic environment is refused in the verdict, not ignored
    code, verdict = validate(capsys, str(env_file), "--only-gold")
    assert code == 1 and "apply to v1 packages" in by_name(verdict)["load"]["detail"]


def test_options_are_checked(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-opts")
    for argv, message in [
        ([str(folder), "--only-gold", "--only-noop"], "at most one of"),
        ([str(folder), "-n", "0"], "select.limit"),
        ([str(folder), "--frobnicate", "1"], "frobnicate"),
        ([], "name the environment"),
    ]:
        with pytest.raises(Exception, match=message):
            validate_cmd.run(argv)


def test_output_dir_keeps_the_verdict_and_refuses_to_overwrite(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-out")
    argv = [str(folder), "-n", "1", "-r", "1", "-o", str(tmp_path / "outputs"), "--run.name", "first"]
    assert validate(capsys, *argv)[0] == 0
    summary = json.loads((tmp_path / "outputs" / "first" / "summary.json").read_text())
    assert summary["verdict"]["ok"] is True and set(summary["verdict"]) == VERDICT_KEYS
    assert json.loads((tmp_path / "outputs" / "first" / "configs" / "validate.json").read_text())["taskset"]["id"] == str(folder)
    with pytest.raises(Exception, match="already holds a validation"):
        validate_cmd.run(argv)
    assert validate(capsys, *argv, "--resume")[0] == 0
    assert validate(capsys, *argv, "--clean")[0] == 0


def test_the_console_scripts_and_vf_check_dispatch(tmp_path) -> None:
    folder = write_v1_package(tmp_path, "v1chk-scripts")
    env_file = write_env_file(tmp_path, "v1chk_classic_echo2", ECHO_ENV)
    v1 = run_vf("check", str(folder), "-n", "1", "-r", "1", "--json", cwd=tmp_path)  # vf check on a v1 package
    assert v1.returncode == 0, v1.stderr
    assert [c["name"] for c in json.loads(v1.stdout)["checks"]] == list(V1_CHECKS)
    assert not (tmp_path / "outputs").exists()  # vf check keeps no run folder
    script = run_vf(str(folder), "-n", "1", "-r", "1", script="vf-validate", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    assert "v1chk-scripts: passed" in script.stdout
    (run,) = (tmp_path / "outputs").iterdir()  # the original's default run folder
    assert run.name.startswith("v1chk-scripts--validate--") and f"results: outputs/{run.name}" in script.stdout
    classic = run_vf("validate", str(env_file), "-n", "1", "-r", "1", "--json", cwd=tmp_path)  # vf validate on a classic one
    assert classic.returncode == 0, classic.stderr
    assert [c["name"] for c in json.loads(classic.stdout)["checks"]] == list(CLASSIC_CHECKS)
    broken = run_vf("validate", str(write_v1_package(tmp_path, "v1chk-scripts-broken", all_="[]")), "--json", cwd=tmp_path)
    assert broken.returncode == 1 and json.loads(broken.stdout)["ok"] is False


def test_a_hanging_load_fails_and_bad_task_data_is_named(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-hangs", load="import time; time.sleep(20)")
    code, verdict = validate(capsys, str(folder), "-n", "1", "--timeout-per-rollout", "1")
    assert code == 1 and "does it hang?" in by_name(verdict)["taskset"]["detail"]
    folder = write_v1_package(tmp_path, "v1chk-same-ids")
    module = folder / "v1chk_same_ids" / "__init__.py"
    module.write_text(module.read_text().replace('id=f"t{i}"', 'id="same"'))
    code, verdict = validate(capsys, str(folder), "-n", "2", "-r", "1")
    assert code == 1 and "task 1 has the id 'same' of task 0" in by_name(verdict)["tasks"]["detail"]
    assert by_name(verdict)["noop"]["skipped"]  # vf check's scope: the data is wrong, nothing else runs
    # every task (vf validate without -n): the others are still checked and get their rows
    code, verdict = validate(capsys, str(folder), "-r", "1", "-o", "o", "--run.name", "ids")
    assert code == 1 and not by_name(verdict)["tasks"]["ok"] and by_name(verdict)["noop"]["detail"] == "3 task(s) valid"
    assert sorted(_rows(tmp_path / "o" / "ids" / "results.jsonl")) == [0, 1, 2]
    folder = write_v1_package(tmp_path, "v1chk-empty-prompt")
    module = folder / "v1chk_empty_prompt" / "__init__.py"
    module.write_text(module.read_text().replace('prompt=f"What is {i} + {i}?"', 'prompt="  "'))
    code, verdict = validate(capsys, str(folder), "-n", "1", "-r", "1")
    assert code == 1 and "task 0 has an empty prompt" in by_name(verdict)["tasks"]["detail"]


def test_a_roles_own_endpoint_is_answered_by_the_scripted_model(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-own-client")
    # port 9 (discard) answers nothing: a check that called it would record a model error
    args = json.dumps({"agent": {"client": {"base_url": "http://127.0.0.1:9/v1"}}})
    code, verdict = validate(capsys, str(folder), "-n", "1", "-r", "1", "-a", args)
    assert code == 0, verdict
    assert "the own client of agent answered by the scripted model" in by_name(verdict)["rollouts"]["detail"]


def test_a_judge_with_its_own_endpoint_is_answered_by_the_scripted_model(tmp_path, capsys) -> None:
    """A judge plugged with its own base_url (port 9 answers nothing) asks the checker's scripted
    judge instead: the check makes no networked or paid call, and the judge's reward is scored."""
    folder = write_v1_package(tmp_path, "v1chk-own-judge")
    module = folder / "v1chk_own_judge" / "__init__.py"  # its tasks take the taskset's task config
    module.write_text(module.read_text().replace('id=f"t{i}"))', 'id=f"t{i}"), self.config.task)'))
    judge = {"id": "reference", "base_url": "http://127.0.0.1:9/v1", "model": "paid-judge", "name": "judged"}
    args = json.dumps({"taskset": {"task": {"judges": [judge]}}})
    code, verdict = validate(capsys, str(folder), "-n", "1", "-r", "1", "-a", args, "-o", "out", "--run.name", "j")
    assert code == 0, verdict
    (rollout,) = verdict["rollouts"]
    # weighted sum: `correct` 1.0 plus the judge's "yes" 1.0 (without the redirect: a recorded error)
    assert rollout["error"] is None and rollout["reward"] == 2.0, rollout
    # the noop check asks no judge: the untouched task is scored by its own reward alone
    (row,) = _rows(tmp_path / "out" / "j" / "results.jsonl").values()
    assert row["noop"]["rewards"] == {"correct": 0.0} and row["noop"]["reason"] == "valid"


def _rows(path: Path) -> dict[int, dict]:
    return {row["task_position"]: row for row in map(json.loads, path.read_text().splitlines())}


def test_the_default_checks_every_task_without_a_model_and_keeps_a_row_for_each(tmp_path, capsys) -> None:
    """Without -n: gold and noop on every task (the original vf-validate's default), the episodes
    on the first two; results.jsonl holds one row per task in the original's shape, summary.json
    its counts and the verdict."""
    gold = "\n    async def validate(self, runtime) -> bool:\n        return self.data.answer != '4'\n"
    folder = write_v1_package(tmp_path, "v1chk-every", validate=gold)
    code, verdict = validate(capsys, str(folder), "--taskset.n", "5", "-r", "1", "-o", "out", "--run.name", "every")
    assert code == 1
    checks = by_name(verdict)
    assert checks["taskset"]["detail"] == "5 task(s) of AddTaskset (all of them)"
    assert checks["gold"]["detail"] == "task 2: validate() returned False: the reference answer does not pass"
    assert checks["noop"] == {"name": "noop", "ok": True, "skipped": False, "detail": "5 task(s) valid"}
    assert len(verdict["rollouts"]) == 2 and checks["rollouts"]["ok"]  # the episodes: the first two tasks
    rows = _rows(tmp_path / "out" / "every" / "results.jsonl")
    assert sorted(rows) == [0, 1, 2, 3, 4] and len({r["task_key"] for r in rows.values()}) == 5
    bad = rows[2]
    assert set(bad) == {"index", "name", "mode", "valid", "reason", "elapsed", "error", "error_type", "gold", "noop",
                        "task_position", "task_key"}  # fmt: skip
    assert (bad["mode"], bad["valid"], bad["reason"], bad["error"]) == ("all", False, "invalid", "gold: validate() returned False: the reference answer does not pass")
    assert bad["gold"]["reason"] == "invalid" and bad["gold"]["valid"] is False
    # the untouched task scored 0 (the reward needs the agent's answer): the noop check holds
    assert (bad["noop"]["valid"], bad["noop"]["reward"], bad["noop"]["rewards"]) == (True, 0.0, {"correct": 0.0})
    assert all(r["reason"] == "valid" for p, r in rows.items() if p != 2)
    summary = json.loads((tmp_path / "out" / "every" / "summary.json").read_text())
    assert summary["outcomes"] == {"valid": 4, "invalid": 1, "unchecked": 0, "error": 0, "timeout": 0, "missing": 0}
    assert (summary["mode"], summary["total"], summary["owed"], summary["valid_rate"]) == ("all", 5, 0, 0.8)
    assert summary["checks"]["gold"]["invalid"] == 1 and summary["checks"]["noop"]["valid"] == 5
    assert summary["verdict"] == verdict


def test_resume_runs_again_only_the_tasks_without_a_verdict(tmp_path, capsys) -> None:
    """An errored task is checked again by --resume; the tasks with a verdict are kept, not re-run."""
    calls, flaky = tmp_path / "calls.txt", tmp_path / "flaky"
    gold = f"""
    async def validate(self, runtime) -> bool:
        import pathlib
        with open({str(calls)!r}, "a") as f:
            f.write(self.data.answer + "\\n")
        if self.data.answer == "2" and pathlib.Path({str(flaky)!r}).exists():
            raise ConnectionError("the grader is down")
        return True
    """
    folder = write_v1_package(tmp_path, "v1chk-resume", validate=textwrap.indent(textwrap.dedent(gold), "    "))
    argv = [str(folder), "--only-gold", "-o", "out", "--run.name", "r"]
    flaky.touch()
    code, verdict = validate(capsys, *argv)
    assert code == 1 and "task 1: ConnectionError: the grader is down" in by_name(verdict)["gold"]["detail"]
    assert sorted(calls.read_text().split()) == ["0", "2", "4"]
    assert _rows(tmp_path / "out" / "r" / "results.jsonl")[1]["error_type"] == "ConnectionError"
    with pytest.raises(Exception, match="already holds a validation"):
        validate_cmd.run(argv)
    flaky.unlink()
    calls.write_text("")
    # the run's own saved config names its taskset and folder, as the original's resume command takes it
    code, verdict = validate(capsys, "@", str(tmp_path / "out" / "r" / "configs" / "validate.json"), "--resume")
    assert code == 0, verdict
    assert calls.read_text().split() == ["2"]  # only the errored task ran again
    assert by_name(verdict)["gold"]["detail"] == "3 task(s) valid (2 kept from the run folder)"
    rows = _rows(tmp_path / "out" / "r" / "results.jsonl")
    assert sorted(rows) == [0, 1, 2] and all(r["reason"] == "valid" for r in rows.values())
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert summary["outcomes"]["valid"] == 3 and summary["owed"] == 0 and summary["mode"] == "gold"
    # --clean with --resume keeps the folder (the original ignores it there): nothing runs again
    calls.write_text("")
    code, verdict = validate(capsys, *argv, "--resume", "--clean")
    assert code == 0 and calls.read_text() == "" and "(3 kept from the run folder)" in by_name(verdict)["gold"]["detail"]
    # a resume whose checks never start (no tasks): the summary counts the folder's rows as they are
    assert validate(capsys, *argv, "--resume", "--taskset.n", "0")[0] == 1
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert (summary["mode"], summary["total"], summary["outcomes"]["valid"]) == ("gold", 3, 3)
    assert summary["verdict"]["ok"] is False


def test_the_run_folder_keeps_each_final_row_once_and_skips_a_cut_line(tmp_path) -> None:
    from verifiers.v1.check_log import CheckLog

    log = CheckLog(tmp_path / "run")
    assert log.plan(["a", "b", "a"], "gold") == [True, True, True]
    for position, (key, reason, valid) in enumerate([("a", "valid", True), ("b", "error", False), ("a", "valid", True)]):
        log.add({"task_key": key, "mode": "gold", "reason": reason, "valid": valid, "task_position": position})
    with open(log.results_path, "a", encoding="utf-8") as f:
        f.write("[" * 100_000 + "\n")  # not a row of ours (too deep for the parser)
        f.write('{"task_key": "b", "mode": "gold", "rea')  # a write cut short
    again = CheckLog(tmp_path / "run", resume=True)
    assert again.plan(["a", "b", "a"], "gold") == [False, True, False]
    assert [r["task_position"] for r in again.rows] == [0, 2]
    # two kept rows for content in three places: the first place runs again, the others keep them
    assert CheckLog(tmp_path / "run", resume=True).plan(["a", "a", "a"], "gold") == [True, False, False]
    # a row of another check, or one whose valid does not match its reason, is not a verdict
    tampered = CheckLog(tmp_path / "run")
    tampered.plan(["a"], "gold")
    tampered.add({"task_key": "a", "mode": "gold", "reason": "valid", "valid": False})
    assert CheckLog(tmp_path / "run", resume=True).plan(["a"], "gold") == [True]
    assert CheckLog(tmp_path / "run", resume=True).plan(["a"], "noop") == [True]


@pytest.mark.parametrize(
    ("mode", "row"),
    [
        ("gold", {"reason": ["valid"], "valid": True}),
        ("gold", {"reason": "valid", "valid": 1}),
        ("all", {"reason": "valid", "valid": True, "gold": "x", "noop": {}}),
        ("all", {"reason": "valid", "valid": True, "gold": {"mode": "gold", "reason": ["x"], "valid": True},
                 "noop": {"mode": "noop", "reason": "valid", "valid": True, "rewards": {}, "reward": 0.0}}),
        ("noop", {"reason": "invalid", "valid": False, "rewards": {}, "reward": "abc"}),
        ("noop", {"reason": "invalid", "valid": False, "rewards": {}, "reward": None}),
        ("noop", {"reason": "valid", "valid": True, "rewards": {}, "reward": float("nan")}),
        ("noop", {"reason": "valid", "valid": True, "rewards": [], "reward": 0.0}),
    ],
    ids=["reason-list", "valid-not-bool", "gold-not-a-row", "gold-reason-list", "reward-text", "invalid-no-reward",
         "reward-nan", "rewards-list"],
)
def test_a_row_not_of_our_shape_is_checked_again_and_counts_nothing(tmp_path, mode, row) -> None:
    """--resume keeps only rows of our own shape: a hostile or corrupt one is checked again, and
    the summary, the report and the verdict never fail on it."""
    from verifiers.v1.check import _why
    from verifiers.v1.check_log import CheckLog, summarize

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.jsonl").write_text(json.dumps({**row, "mode": mode, "task_key": "k"}) + "\n")
    log = CheckLog(folder, resume=True, mode=mode)
    assert log.plan(["k"], mode) == [True] and log.rows == []
    bad = {**row, "mode": mode}
    summary = summarize([bad], 1, mode)  # also as rows of this run: counted where they fit, never raising
    assert summary["total"] == 1 and sum(summary["outcomes"].values()) <= 1
    assert isinstance(_why(bad), str)


def test_a_noop_check_that_times_out_records_no_reward(tmp_path, capsys) -> None:
    folder = write_v1_package(tmp_path, "v1chk-slow-reward", reward="import time; time.sleep(5); return 0.0")
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-noop", "--timeout.total", "0.5", "-o", "o", "--run.name", "t")
    assert code == 1 and "noop did not finish within 0.5 s" in by_name(verdict)["noop"]["detail"]
    (row,) = _rows(tmp_path / "o" / "t" / "results.jsonl").values()
    assert (row["reason"], row["valid"], row["reward"], row["error_type"]) == ("timeout", False, None, "TimeoutError")


TWO_SEATS = '''
import verifiers.v1 as vf


class Seats(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    second: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})


class OneMove(vf.Env[Seats]):
    """The first seat moves; the game ends before the second one's turn (it is still scored)."""

    async def run(self, task, agents):
        seat = vf.Task(vf.TaskData(idx=task.data.idx, prompt=None))
        async with agents.first.interaction(seat) as a, agents.second.interaction(seat) as b:
            await a.turn(str(task.data.prompt))
        a.trace.record_reward("won", 1.0)
        b.trace.record_reward("won", 0.0)


class Games(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self):
        for i in range(2):
            yield vf.Task(vf.TaskData(prompt=f"game {i}: your move"))


__all__ = ["Games", "OneMove"]
'''


def test_a_seat_that_never_gets_a_turn_is_not_a_malformed_trace(tmp_path, capsys) -> None:
    folder = tmp_path / "v1chk-seats"
    (folder / "v1chk_seats").mkdir(parents=True)
    (folder / "v1chk_seats" / "__init__.py").write_text(TWO_SEATS)
    (folder / "pyproject.toml").write_text('[project]\nname = "v1chk-seats"\nversion = "0.1.0"\n')
    code, verdict = validate(capsys, str(folder), "-r", "1")
    checks = by_name(verdict)
    assert code == 0 and checks["traces"]["ok"] and checks["rewards"]["ok"], verdict
    assert "env OneMove (first: null harness on subprocess, second: null harness on subprocess)" in checks["load"]["detail"]


def test_the_model_free_checks_place_each_task_as_a_run_does(tmp_path, capsys) -> None:
    """A task with a network policy is refused on the subprocess runtime (its row says why) and
    checked in the sandbox, as an agent's run of it would be."""
    folder = write_v1_package(tmp_path, "v1chk-policy")
    module = folder / "v1chk_policy" / "__init__.py"
    module.write_text(module.read_text().replace('id=f"t{i}"', 'id=f"t{i}", network_allow=[]'))
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-setup", "-o", "o", "--run.name", "host")
    assert code == 1 and "requires a network policy" in by_name(verdict)["setup"]["detail"]
    (row,) = _rows(tmp_path / "o" / "host" / "results.jsonl").values()
    assert (row["reason"], row["error_type"]) == ("error", "SandboxError")
    code, verdict = validate(capsys, str(folder), "-n", "1", "--only-setup", "--runtime.type", "sandbox", "-o", "o", "--run.name", "box")
    assert code == 0 and by_name(verdict)["setup"]["detail"] == "1 task(s) valid", verdict


def test_a_folder_named_relatively_names_the_run_and_resumes_from_anywhere(tmp_path, capsys, monkeypatch) -> None:
    """``vf validate .`` from inside a package: the run is named after the folder (not
    ``--validate--<id>``), and its saved config holds the folder's absolute path, so a resume
    started elsewhere checks the same package."""
    folder = write_v1_package(tmp_path, "v1chk-here")
    monkeypatch.chdir(folder)
    code, _ = validate(capsys, ".", "-n", "1", "-o", str(tmp_path / "out"))
    assert code == 0
    (run,) = (tmp_path / "out").iterdir()
    assert run.name.startswith("v1chk-here--validate--")
    saved = json.loads((run / "configs" / "validate.json").read_text())
    assert saved["taskset"]["id"] == str(folder.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, verdict = validate(capsys, "@", str(run / "configs" / "validate.json"), "--resume")
    assert code == 0 and verdict["env_id"] == "v1chk-here", verdict
