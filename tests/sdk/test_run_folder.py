"""The run folder through ``Environment.evaluate`` (issue 23): an existing run is never appended to
without ``resume``, repeated ``example_id`` values are refused, and a resume reads the results file
as a stream (its memory does not grow with the file).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.testing import ScriptedServer
from verifiers.utils.results import (
    DuplicateRolloutError,
    RunFolderBusyError,
    RunFolderExistsError,
    run_lock,
    scan_for_resume,
)


def _env(rows=None) -> vf.SingleTurnEnv:
    rows = rows or [{"question": f"q{i}", "answer": "ok"} for i in range(3)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda completion, **kw: 1.0]))


async def test_results_path_of_an_existing_run_is_refused_without_resume(tmp_path):
    folder = tmp_path / "run"
    with ScriptedServer("ok") as srv:
        env = _env()
        await env.evaluate(srv.base_url, "m", num_examples=3, rollouts_per_example=1, results_path=folder)
        before = (folder / "results.jsonl").read_bytes()
        with pytest.raises(RunFolderExistsError, match="already holds a run"):
            await env.evaluate(srv.base_url, "m", num_examples=3, rollouts_per_example=1, results_path=folder)
        assert srv.request_count == 3  # the refusal came before any request
        # resume=True continues it (nothing left to do here)
        out = await env.evaluate(srv.base_url, "m", num_examples=3, rollouts_per_example=1, results_path=folder,
                                 resume=True)  # fmt: skip
    assert (folder / "results.jsonl").read_bytes() == before and len(out["outputs"]) == 3


async def test_repeated_example_ids_are_refused(tmp_path):
    rows = [{"question": f"q{i}", "answer": "ok", "example_id": ["a", "b", "a", "c", "b"][i]} for i in range(5)]
    with ScriptedServer("ok") as srv:
        with pytest.raises(DuplicateRolloutError, match=r"'a' \(2 times\), 'b' \(2 times\)"):
            await _env(rows).evaluate(srv.base_url, "m", num_examples=-1, results_path=tmp_path / "run")
        assert srv.request_count == 0
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_the_run_lock_refuses_a_second_holder_and_is_reentrant(tmp_path):
    import subprocess
    import sys

    with run_lock(tmp_path), run_lock(tmp_path):  # the engine inside vf eval takes it again
        probe = (
            "import sys; from verifiers.utils.results import run_lock, RunFolderBusyError\n"
            "try:\n    run_lock(sys.argv[1]).__enter__()\nexcept RunFolderBusyError as e:\n    print(e); sys.exit(3)\n"
        )
        held = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
        assert held.returncode == 3 and "another run is writing" in held.stdout, held
    free = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
    assert free.returncode == 0, free
    assert issubclass(RunFolderBusyError, vf.Error)


async def test_resume_streams_the_results_file(tmp_path):
    # 200 finished records of 100 kB: 20 MB on disk. Reading them all into memory (what resume
    # did) peaks above 20 MB; a streaming resume holds one line at a time plus a small summary per
    # record. (RSS on a 1.2 GB file: see the report of issue 23 / benchmarks.)
    _write_finished_records(tmp_path / "results.jsonl", 200, 100_000)
    env = _env([{"question": f"q{i}", "answer": "ok"} for i in range(200)])
    with ScriptedServer("ok") as srv:
        tracemalloc.start()
        try:
            out = await env.evaluate(srv.base_url, "m", num_examples=-1, rollouts_per_example=1,
                                     results_path=tmp_path, resume=True)  # fmt: skip
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert srv.request_count == 0
    assert out["metadata"]["num_rollouts"] == 200 and out["metadata"]["avg_reward"] == 1.0
    assert peak < 5_000_000, f"resume held {peak} bytes for a 20 MB file"
    assert _size(tmp_path / "results.jsonl") > 20_000_000  # nothing was rewritten


def _write_finished_records(path: Path, n: int, size: int) -> None:
    big = "x" * size
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"example_id": i, "rollout_index": 0, "completion": big, "reward": 1.0}) + "\n")


def _size(path: Path) -> int:
    return path.stat().st_size


def test_a_resume_scan_keeps_the_first_record_of_each_rollout(tmp_path):
    lines = [{"example_id": 0, "rollout_index": 0, "reward": 1.0}, {"example_id": 0, "rollout_index": 0, "reward": 0.5},
             {"example_id": 1, "rollout_index": 0, "reward": 1.0}]  # fmt: skip
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    scan = scan_for_resume(tmp_path, {(0, 0): 0, (1, 0): 1})
    assert scan.done == {(0, 0), (1, 0)} and scan.set_aside == 1
    kept = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert kept == [lines[0], lines[2]]
    assert json.loads((tmp_path / "results.aside.jsonl").read_text()) == lines[1]


def test_error_kinds_are_decided_in_one_place():
    import errno

    from verifiers.errors import error_kind, error_record, is_context_overflow

    assert error_record(OSError(errno.EMFILE, "Too many open files"), "tool:x")["kind"] == "infra"
    assert error_record(FileNotFoundError(errno.ENOENT, "no such file"), "tool:x")["kind"] == "environment"
    assert error_record(vf.ModelError(None, "connection refused", True), "model")["kind"] == "infra"
    assert error_record(vf.ModelError(503, "overloaded", True, attempts=4), "model")["kind"] == "infra"
    assert error_record(vf.ModelError(400, "bad request", False), "model")["kind"] == "model"
    assert error_record(vf.JudgeError("judge failed", vf.ModelError(None, "reset", True)), "judge")["kind"] == "infra"
    assert error_record(ValueError("boom"), "reward:f")["kind"] == "reward"
    assert error_record(vf.SandboxError("lost"), "setup")["kind"] == "infra"
    # records saved before kinds existed
    assert error_kind({"type": "ModelError", "message": "HTTP 502: bad gateway after 4 attempts", "source": "model"}) == "infra"
    assert error_kind({"type": "OSError", "message": "[Errno 24] Too many open files", "source": "tool:t"}) == "infra"
    assert error_kind({"type": "ModelError", "message": "HTTP 400: bad", "source": "model"}) == "model"
    assert error_kind(None) is None
    refused = vf.ModelError(400, "Invalid 'stop': array too long", False)
    assert not is_context_overflow(refused)
    refused.code = "context_length_exceeded"
    assert is_context_overflow(refused) and is_context_overflow(vf.OverlongPromptError("too long"))


async def test_outputs_of_a_resume_that_set_lines_aside_read_the_right_records(tmp_path):
    with ScriptedServer("ok") as srv:
        env = _env([{"question": f"q{i}", "answer": "ok"} for i in range(5)])
        await env.evaluate(srv.base_url, "m", num_examples=-1, rollouts_per_example=1, results_path=tmp_path)
        lines = (tmp_path / "results.jsonl").read_bytes().splitlines(keepends=True)
        (tmp_path / "results.jsonl").write_bytes(lines[0] + b"{not json\n" + b"".join(lines[2:]))
        out = await env.evaluate(srv.base_url, "m", num_examples=-1, rollouts_per_example=1, results_path=tmp_path,
                                 resume=True)  # fmt: skip
        assert srv.request_count == 5 + 1
    assert [o["example_id"] for o in out["outputs"]] == [0, 1, 2, 3, 4]
    assert out["metadata"]["num_rollouts"] == 5
