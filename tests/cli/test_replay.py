"""``vf replay`` / ``vf-replay``: re-score a saved v1 run offline, as real processes.

One real ``vf eval`` run (a v1 package written here, a scripted model on loopback) is shared by
the tests; the package's reward reads ``RP_REWARD`` so a replay can score with a "fixed" reward,
a broken one, or the run's own, as an author who fixes a reward and re-scores an old run does.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import REPO, run_vf
from verifiers.testing.scripted import ScriptedServer, error

PACKAGE = '''
import os

import verifiers.v1 as vf


class PairData(vf.TaskData):
    a: int
    b: int


class PairTask(vf.Task[PairData]):
    @vf.reward
    def correct(self, task: PairData, trace: vf.Trace) -> float:
        mode = os.environ.get("RP_REWARD", "off_by_one")
        if mode == "raise":
            raise RuntimeError("reward exploded")
        if mode == "none":
            return None
        expected = task.a + task.b + (1 if mode == "off_by_one" else 0)
        return float(trace.last_reply.strip() == str(expected))

    @vf.metric
    def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))

    @vf.reward(weight=0.0)
    def in_box(self, runtime) -> float:
        return 1.0

    @vf.metric
    async def box_files(self, runtime) -> float:  # measured in the rollout's runtime
        await runtime.write("seen.txt", "x")
        return 3.0

    @vf.reward(weight=0.0)
    def reads_box(self, trace: vf.Trace) -> float:  # reads the runtime metric off the trace
        return trace.metrics.get("box_files") or 0.0

    @vf.metric
    async def box_stats(self, runtime) -> dict:  # a runtime metric that writes several keys
        return {"files": 2.0, "bytes": 10.0}


class PairConfig(vf.TasksetConfig):
    n: int = 4


class PairTaskset(vf.Taskset[PairTask, PairConfig]):
    def load(self):
        for i in range(self.config.n):
            yield PairTask(PairData(prompt=f"What is {i} + {i + 2}?", a=i, b=i + 2))


__all__ = ["PairTaskset"]
'''


def _answer(req):
    text = req.messages[-1]["content"] or ""
    a, b = map(int, re.findall(r"\d+", text))
    if a == 2:  # the third task's model call fails: its episode is a failed rollout
        return error(400, "bad request")
    return str(a + b)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("replay")
    pkg = root / "pkgs" / "rp_pairs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    env = {"PYTHONPATH": f"{REPO}:{root / 'pkgs'}"}
    with ScriptedServer(_answer) as srv:
        res = run_vf("eval", "rp-pairs", "-m", "scripted-model", "-b", srv.base_url, "-n", "4", "-r", "1",
                     "--env.agent.max-turns", "1", "-o", str(root / "out"), "--run.dir", "run1", cwd=root, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr  # one episode failed (the 400): a row of the run, as the original exits
    folder = root / "out" / "run1"
    assert len(_lines(folder / "traces.jsonl")) == 4
    return folder, env


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _replayed(res) -> Path:
    m = re.search(r"^traces: (.+)$", res.stdout, re.M)
    assert m, res.stdout + res.stderr
    return Path(m.group(1).strip())


def test_a_fixed_reward_rescores_the_run_without_the_model(run) -> None:
    folder, env = run
    before = _digest(folder / "traces.jsonl")
    old = _lines(folder / "traces.jsonl")
    # the run scored with the buggy reward: nothing right
    assert [x["reward"] for x in old] == [0.0, 0.0, 0.0, 0.0]
    res = run_vf("replay", str(folder), cwd=folder, env={**env, "RP_REWARD": "right"})
    assert res.returncode == 0, res.stdout + res.stderr
    # the original's default folder, under the current one: outputs/<taskset>--replay/<uuid>
    assert _replayed(res).parent.parent == Path("outputs") / "rp-pairs--replay"
    out = folder / _replayed(res)
    assert out.name == "traces.jsonl"
    assert _digest(folder / "traces.jsonl") == before  # the input is never touched
    assert not list(out.parent.glob(".*part"))  # the temporary file was renamed into place
    new = _lines(out)
    assert [x["example_id"] for x in new] == [x["example_id"] for x in old]
    by_id = {x["example_id"]: x for x in new}
    for rec in old:
        again = by_id[rec["example_id"]]
        # the transcript is the saved one: same nodes, same calls
        assert [t["nodes"] for t in again["traces"]] == [t["nodes"] for t in rec["traces"]]
        if rec["error"]:  # the failed rollout is copied as it was
            assert again == rec
            continue
        trace = again["traces"][0]
        assert trace["rewards"]["correct"] == {"score": 1.0, "weight": 1.0}
        # needs the rollout's runtime: not re-run, its saved value kept, and a reward that reads the
        # runtime metric sees the rollout's value
        assert trace["rewards"]["in_box"] == {"score": 1.0, "weight": 0.0}
        assert trace["metrics"]["box_files"] == 3.0 and trace["rewards"]["reads_box"]["score"] == 3.0
        assert (trace["metrics"]["files"], trace["metrics"]["bytes"]) == (2.0, 10.0)  # a mapping's keys kept
        assert trace["metrics"]["reply_chars"] == float(len(str(2 * rec["example_id"] + 2)))
        assert again["reward"] == 1.0 and again["complete"] is True
    assert sorted(x["reward"] for x in new) == [0.0, 1.0, 1.0, 1.0]
    summary = json.loads((out.parent / "replay.json").read_text())
    assert summary["old_avg_reward"] == 0.0 and summary["new_avg_reward"] == 0.75
    assert (summary["num_rescored"], summary["num_skipped"], summary["num_changed"]) == (3, 1, 3)
    assert summary["not_rerun"] == ["metric box_files", "metric box_stats", "reward in_box"]
    assert "avg reward" in res.stdout and "0.0000" in res.stdout and "0.7500" in res.stdout
    assert "reward in_box" in res.stdout and "skipped 1" in res.stdout
    # the replay folder is itself a source, with the env config it used
    res = run_vf("replay", str(out), "-o", str(out.parent / "again"), cwd=folder, env={**env, "RP_REWARD": "right"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert [x["reward"] for x in _lines(out.parent / "again" / "traces.jsonl")] == [x["reward"] for x in new]


@pytest.mark.parametrize(("mode", "says"), [("raise", "raised RuntimeError: reward exploded"),
                                            ("none", "returned NoneType None, not a number")])  # fmt: skip
def test_a_failing_reward_is_recorded_not_scored_zero(run, tmp_path, mode, says) -> None:
    folder, env = run
    res = run_vf("replay", str(folder), "-o", str(tmp_path / "r"), cwd=tmp_path, env={**env, "RP_REWARD": mode})
    assert res.returncode == 1, res.stdout + res.stderr  # scoring errors: a failed replay
    new = _lines(tmp_path / "r" / "traces.jsonl")
    scored = [x for x in new if x["example_id"] != 2]
    assert len(scored) == 3
    for rec in scored:
        trace = rec["traces"][0]
        assert trace["rewards"]["correct"] is None  # unscored, not 0
        assert trace["ok"] is False and trace["errors"][0]["type"] == "TaskError"
        assert trace["errors"][0]["message"].startswith("task ") and " scoring: reward 'correct'" in trace["errors"][0]["message"]
        assert says in trace["errors"][0]["message"] and "'correct'" in trace["errors"][0]["message"]
        assert rec["error"] is not None and rec["complete"] is False
    assert "scoring errors 3" in res.stdout and says in res.stdout
    # and replaying that output with the fixed reward drops the old scoring errors
    res = run_vf("replay", str(tmp_path / "r"), "--taskset", "rp-pairs", "-o", str(tmp_path / "fixed"), cwd=tmp_path,
                 env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    fixed = [x for x in _lines(tmp_path / "fixed" / "traces.jsonl") if x["example_id"] != 2]
    assert all(x["reward"] == 1.0 and x["traces"][0]["errors"] == [] for x in fixed)


def test_dotted_flags_adjust_the_taskset_config(run, tmp_path) -> None:
    folder, env = run
    res = run_vf("replay", str(folder), "-o", str(tmp_path / "w"), "--taskset.task.rewards.correct.weight", "3",
                 cwd=tmp_path, env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    new = [x for x in _lines(tmp_path / "w" / "traces.jsonl") if x["example_id"] != 2]
    assert all(x["traces"][0]["rewards"]["correct"] == {"score": 1.0, "weight": 3.0} and x["reward"] == 3.0 for x in new)
    assert json.loads((tmp_path / "w" / "configs" / "replay.json").read_text())["env"]["taskset"]["task"] == {
        "rewards": {"correct": {"weight": 3}}
    }


def test_hostile_lines_and_refusals(run, tmp_path) -> None:
    folder, env = run
    lines = [x for x in (folder / "traces.jsonl").read_text().splitlines() if json.loads(x)["example_id"] != 2]
    cyclic = json.loads(lines[0])
    cyclic["traces"][0]["nodes"][0]["parent"] = 1  # a graph that is not append-only
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "traces.jsonl").write_text("\n".join([lines[0], "{not json", "[1, 2]", json.dumps(cyclic), "", lines[1]]) + "\n")
    # no saved config beside the file: which taskset?
    res = run_vf("replay", str(bare / "traces.jsonl"), cwd=tmp_path, env=env)
    assert res.returncode == 1 and "--taskset" in res.stderr and "Traceback" not in res.stderr
    res = run_vf("replay", str(bare / "traces.jsonl"), "--taskset", "rp-pairs", "-o", str(tmp_path / "h"),
                 cwd=tmp_path, env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr  # unreadable lines fail the replay
    assert "unreadable lines 3" in res.stdout
    summary = json.loads((tmp_path / "h" / "replay.json").read_text())
    assert [u.split(":")[0] for u in summary["unreadable"]] == ["line 2", "line 3", "line 4"]
    assert "not an earlier node" in summary["unreadable"][2]
    assert [x["reward"] for x in _lines(tmp_path / "h" / "traces.jsonl")] == [1.0, 1.0]
    # the output may never be the input, nor an existing replay
    res = run_vf("replay", str(folder), "-o", str(folder), cwd=tmp_path, env=env)
    assert res.returncode == 1 and "is the input" in res.stderr
    res = run_vf("replay", str(bare), "--taskset", "rp-pairs", "-o", str(tmp_path / "h"), cwd=tmp_path, env=env)
    assert res.returncode == 1 and "already exists" in res.stderr
    # a classic run folder is named as such
    classic = tmp_path / "classic"
    classic.mkdir()
    (classic / "results.jsonl").write_text("{}\n")
    res = run_vf("replay", str(classic), cwd=tmp_path, env=env)
    assert res.returncode == 1 and "classic run" in res.stderr
    res = run_vf("replay", str(bare), "--taskset", "no-such-taskset", cwd=tmp_path, env=env)
    assert res.returncode == 1 and "no-such-taskset" in res.stderr and "Traceback" not in res.stderr
    # a run of an env with its own multi-agent play is refused in one line, as the original refuses
    # it (its cross-trace scoring cannot be redone from the saved traces), and nothing is written
    res = run_vf("replay", str(bare), "--taskset", "rp-pairs", "--env.id", "user-sim", "-o", str(tmp_path / "u"),
                 cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 1 and "multi-agent run (UserSimEnv)" in res.stderr, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "u").exists()


def test_a_file_of_many_bad_lines_keeps_counts_not_every_message() -> None:
    # millions of unreadable lines (or failed traces) are counted; the summary holds the first
    # hundred messages, not one per line for the whole file
    from verifiers.cli.replay_cmd import Outcome, Summary

    s = Summary(source="t", output="o", taskset="x", env="e")
    n = 20_000
    for i in range(n):
        s.add(Outcome(line=i, problem="JSONDecodeError: Expecting value"))
        s.add(Outcome(line=i, record={}, skipped=["the episode failed"], scoring_errors=["reward exploded"]))
    out = s.as_json()
    assert (out["num_unreadable"], out["num_skipped"], out["num_scoring_errors"]) == (n, n, n)
    assert out["unreadable"][0] == "line 0: JSONDecodeError: Expecting value" and len(out["unreadable"]) == 100
    for kept in (s.unreadable, s.skipped, s.scoring_errors):
        assert len(list(kept)) == 100 and len(kept) == n


def test_vf_replay_console_script(run, tmp_path) -> None:
    folder, env = run
    copy = tmp_path / "run"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("outputs"))
    res = run_vf(str(copy), "-n", "2", script="vf-replay", cwd=tmp_path, env={**env, "RP_REWARD": "right"})
    assert res.returncode == 0, res.stdout + res.stderr
    first_two = [x["example_id"] for x in _lines(folder / "traces.jsonl")[:2]]
    assert [x["reward"] for x in _lines(tmp_path / _replayed(res))] == [0.0 if i == 2 else 1.0 for i in first_two]

    # the original's other spellings: -r re-scores each one that many times (each its own line),
    # --no-rich and -v are taken, --dry-run writes the config and re-scores nothing
    res = run_vf(str(copy), "-n", "2", "-r", "3", "--no-rich", "-v", "-o", str(tmp_path / "thrice"), script="vf-replay",
                 cwd=tmp_path, env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert [x["example_id"] for x in _lines(tmp_path / "thrice" / "traces.jsonl")] == [i for i in first_two for _ in range(3)]
    res = run_vf(str(copy), "--dry-run", "-o", str(tmp_path / "dry"), script="vf-replay", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "dry" / "configs" / "replay.json").is_file() and not (tmp_path / "dry" / "traces.jsonl").exists()
    res = run_vf(str(copy), "-r", "0", script="vf-replay", cwd=tmp_path, env=env)
    assert res.returncode == 1 and "--num-rescores" in res.stderr

    # a run folder laid out as the original's vf-eval leaves it (configs/resolved/eval.json)
    (copy / "configs" / "eval.json").unlink()  # ours keeps both; the original only the resolved one
    assert (copy / "configs" / "resolved" / "eval.json").is_file()
    (copy / "metadata.json").unlink()  # the original writes none
    res = run_vf("replay", str(copy), "-n", "1", "-o", str(tmp_path / "theirs"), cwd=tmp_path, env={**env, "RP_REWARD": "right"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads((tmp_path / "theirs" / "configs" / "replay.json").read_text())["env"]["taskset"]["id"] == "rp-pairs"
    res = run_vf("eval", "--resume", str(copy), "--dry-run", cwd=tmp_path, env=env)  # and vf eval resumes it
    assert res.returncode == 0 and json.loads(res.stdout)["env"]["taskset"]["id"] == "rp-pairs", res.stderr


def test_a_multi_agent_run_rescores_each_trace_then_the_envs_finalize(run, tmp_path) -> None:
    _, env = run
    with ScriptedServer(_answer) as srv:
        res = run_vf("eval", "rp-pairs", "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "--env.id", "best-of-n",
                     "--env.n", "2", "-o", str(tmp_path / "out"), "--run.dir", "bo", cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    old = _lines(tmp_path / "out" / "bo" / "traces.jsonl")
    assert all(len(x["traces"]) == 2 and x["traces"][0]["metrics"]["pass_at_n"] == 0.0 for x in old)
    res = run_vf("replay", str(tmp_path / "out" / "bo"), "-o", str(tmp_path / "r"), cwd=tmp_path,
                 env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    new = _lines(tmp_path / "r" / "traces.jsonl")
    assert [x["env"]["id"] for x in new] == ["best-of-n+rp-pairs", "best-of-n+rp-pairs"]
    for rec in new:  # the env's finalize saw the new rewards
        assert [t["rewards"]["correct"]["score"] for t in rec["traces"]] == [1.0, 1.0]
        assert all(t["metrics"]["pass_at_n"] == 1.0 and t["metrics"]["best"] == 1.0 for t in rec["traces"])
        assert rec["reward"] == 1.0
    res = run_vf("replay", str(tmp_path / "out" / "bo"), "-c", "100000", cwd=tmp_path, env=env)
    assert res.returncode == 1 and "between 1 and 1024" in res.stderr


def test_a_kept_runtime_score_is_held_to_the_rules_of_a_live_one(run, tmp_path) -> None:
    """A saved value that is kept (its hook needs the runtime) is no way around scoring: a tampered
    weight is replaced by the hook's own, and a non-finite value is left unscored with a
    ``TaskError`` (never written back as NaN / Infinity)."""
    folder, env = run
    rows = _lines(folder / "traces.jsonl")
    for rec in rows:
        for trace in rec["traces"]:
            if "in_box" in trace["rewards"]:
                trace["rewards"]["in_box"] = {"score": 1e6, "weight": 1e6}  # would swamp the total
                trace["metrics"]["box_files"] = float("nan")
    tampered = tmp_path / "traces.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_vf("replay", str(tampered), "--taskset", "rp-pairs", "-o", str(tmp_path / "r"), cwd=tmp_path,
                 env={**env, "RP_REWARD": "right"})  # fmt: skip
    assert res.returncode == 1 and "scoring errors 3" in res.stdout, res.stdout + res.stderr  # as any failed hook
    text = (tmp_path / "r" / "traces.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    for rec in map(json.loads, text.splitlines()):
        if rec["error"] and not rec["traces"][0]["rewards"]:
            continue  # the failed rollout, copied as it was
        trace = rec["traces"][0]
        assert trace["rewards"]["in_box"] == {"score": 1e6, "weight": 0.0}  # the hook's weight, not the file's
        assert trace["metrics"]["box_files"] is None
        assert any("replay: the saved metric 'box_files'" in e["message"] and "not a finite number" in e["message"]
                   for e in trace["errors"])  # fmt: skip
        assert rec["reward"] < 10

