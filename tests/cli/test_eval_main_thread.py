"""``vf eval`` runs the sync code of an environment where the original runs it: on the main thread.

The original calls sync reward functions, hooks and tools on its event loop, in the main thread,
one at a time. Code written for it may need that thread: math-verify's default timeouts (and any
other ``signal.alarm`` / ``signal.signal``) only work there, and in any other thread they raise (or,
behind a ``try``, silently score 0). Both generations are run here as real ``vf eval`` subprocesses
against a scripted model server, with math-verify's defaults, so a regression is a wrong score.
"""

from __future__ import annotations

import json
import os
import textwrap

from tests.cli.helpers import REPO, run_vf, write_env_file
from verifiers.testing import ScriptedServer

CLASSIC = """
import threading

import verifiers as vf
from math_verify import parse, verify


def correct(completion, answer, **kwargs) -> float:
    # math-verify's default parsing and verifying timeouts arm signal.alarm: main thread only
    return float(verify(parse(f"\\\\boxed{{{answer}}}"), parse(completion[-1]["content"])))


def on_main_thread(**kwargs) -> float:
    return float(threading.current_thread() is threading.main_thread())


def load_environment(**kwargs):
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(4)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[correct, on_main_thread]), **kwargs)
"""

V1 = """
import threading

import verifiers.v1 as vf
from math_verify import parse, verify


class Sum(vf.TaskData):
    answer: str


class SumTask(vf.Task[Sum]):
    @vf.reward
    def correct(self, task: Sum, trace: vf.Trace) -> float:
        return float(verify(parse(f"\\\\boxed{{{task.answer}}}"), parse(trace.last_reply)))

    @vf.metric
    def on_main_thread(self) -> float:
        return float(threading.current_thread() is threading.main_thread())


class SumConfig(vf.TasksetConfig):
    n: int = 4


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            yield SumTask(Sum(prompt=f"What is {i} + {i}?", answer=str(2 * i), id=f"m{i}"))


__all__ = ["SumTaskset"]
"""


def _boxed_sum(request) -> str:
    text = request.messages[-1]["content"] or ""
    n = int(text.split("What is ")[1].split(" +")[0])
    return f"The sum is \\\\boxed{{{2 * n}}}."


def test_classic_and_v1_sync_code_runs_on_the_main_thread_under_vf_eval(tmp_path) -> None:
    env_file = write_env_file(tmp_path, "mainthread_classic", CLASSIC)
    package = tmp_path / "pkgs" / "vf_mainthread"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(V1))
    path = os.pathsep.join([str(REPO), str(tmp_path / "pkgs")])
    with ScriptedServer(_boxed_sum) as srv:
        classic = run_vf("eval", str(env_file), "-m", "scripted-model", "-b", srv.base_url, "-n", "4", "-r", "1",
                         "-o", str(tmp_path / "c"), cwd=tmp_path)  # fmt: skip
        v1 = run_vf("eval", "vf-mainthread", "-m", "scripted-model", "-b", srv.base_url, "-n", "4", "-r", "1",
                    "--env.agent.harness.id", "null", "-o", str(tmp_path / "v"), cwd=tmp_path,
                    env={"PYTHONPATH": path})  # fmt: skip
    assert classic.returncode == 0, classic.stderr
    (results,) = (tmp_path / "c").rglob("results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["error"] for r in records] == [None] * 4
    assert [r["reward"] for r in records] == [2.0] * 4  # right answers, scored on the main thread

    assert v1.returncode == 0, v1.stderr
    (traces,) = (tmp_path / "v").rglob("traces.jsonl")
    episodes = [json.loads(line)["traces"][0] for line in traces.read_text().splitlines()]
    assert len(episodes) == 4 and all(t["errors"] == [] for t in episodes)
    assert [t["rewards"]["correct"]["score"] for t in episodes] == [1.0] * 4
    assert [t["metrics"]["on_main_thread"] for t in episodes] == [1.0] * 4
