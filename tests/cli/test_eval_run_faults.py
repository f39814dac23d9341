"""`vf eval` under faults of the run itself (issue 23): what a rollout holds can never abort the run,
an infrastructure failure is never a score, one run per folder, a resume never deletes data.

Every test runs the real ``vf`` command as a subprocess against a real loopback server
(``tests.support.fault_server.FaultServer``) and reads what it saved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import ECHO_ENV, REPO, run_vf, vf_command, write_env_file
from tests.support.fault_server import FaultServer, Reset, Respond, Silent, chat_body


def serving(handler: Any) -> FaultServer:
    """A model server: ``GET /v1/models`` lists ``m``, chat requests go to ``handler``."""

    def dispatch(request):
        if request.method == "GET" and request.path.endswith("/models"):
            return Respond(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        return handler(request) if callable(handler) else handler

    return FaultServer(dispatch)


def _number(request) -> int:
    """The row number of an ECHO_ENV prompt ("Repeat the number N")."""
    return int(request.body["messages"][-1]["content"].rsplit(" ", 1)[1])


def _answer(request):
    return chat_body(f"number {_number(request)}")


def _run_folder(root: Path) -> Path:
    (run,) = [p.parent for p in root.rglob("results.jsonl")]
    return run


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def _ids(records: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return sorted((r["example_id"], r["rollout_index"]) for r in records)


# ECHO_ENV whose reward also reads a rollout that got no reply at all (prompt_too_long)
TOLERANT_ENV = ECHO_ENV.replace("text = completion[-1]", "text = (completion or [{}])[-1].get")
TOLERANT_ENV = TOLERANT_ENV.replace('["content"] if isinstance', '("content") if isinstance')


@pytest.fixture
def env_file(tmp_path):
    return write_env_file(tmp_path, "echo_env_run_faults", TOLERANT_ENV)


def _popen(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    env.pop("VF_DEBUG", None)
    return subprocess.Popen(
        [*vf_command(), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


# --------------------------------------------------------------------------------- item 1: saving

UNSAVEABLE_ENV = r'''
import verifiers as vf

# the rows' faults, by row number: a lone surrogate in the dataset (a file read with
# surrogateescape), in the model's reply (row 1: the server sends it), a tuple-keyed dict in info,
# a cleanup hook that pops fields the writer reads, a reward function that renames the rollout
FAULTS = {0: "dataset", 1: "reply", 2: "tuple_key", 3: "popped", 4: "renamed"}


def reward(completion, answer, state, **kwargs) -> float:
    fault = FAULTS.get(int(answer) % 8)
    if fault == "tuple_key":
        state["info"][("a", 1)] = "tuple key"
    if fault == "renamed":
        state["rollout_index"] = "not a number"
    return 1.0


class Env(vf.SingleTurnEnv):
    @vf.cleanup
    async def drop_fields(self, state):
        if FAULTS.get(int(state["answer"]) % 8) == "popped":
            for key in ("timing", "usage", "trajectory", "completion", "metrics", "warnings"):
                state.pop(key, None)


def load_environment(**kwargs):
    rows = []
    for i in range(16):
        question = f"Repeat the number {i}"
        if FAULTS.get(i % 8) == "dataset":
            question = b"caf\xe9 ".decode("utf-8", "surrogateescape") + question
        rows.append({"question": question, "answer": str(i)})
    return Env(dataset=rows, rubric=vf.Rubric(funcs=[reward]), **kwargs)
'''


def test_a_value_that_cannot_be_saved_is_a_recorded_error_and_the_run_goes_on(tmp_path):
    env = write_env_file(tmp_path, "unsaveable_env", UNSAVEABLE_ENV)

    def handler(request):
        n = _number(request)
        return chat_body("caf\udce9 \ud800" if n % 8 == 1 else f"number {n}")

    with serving(handler) as srv:
        args = ("eval", str(env), "-b", srv.base_url, "-n", "16", "-r", "1", "-o", str(tmp_path / "o"))
        result = run_vf(*args, "--max-error-rate", "1", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        run = _run_folder(tmp_path / "o")
        records = _records(run)
        # every rollout saved, once, under its own identity
        assert _ids(records) == [(i, 0) for i in range(16)]
        by_id = {r["example_id"]: r for r in records}
        for i in range(16):
            fault = {0: "dataset", 1: "reply", 2: "tuple_key", 3: "popped", 4: "renamed"}.get(i % 8)
            rec = by_id[i]
            if fault is None:
                assert rec["error"] is None and rec["reward"] == 1.0, rec
                continue
            assert rec["error"] is not None, (fault, rec)
            if fault == "dataset":  # the request itself could not be encoded: a model error, and saved
                assert rec["error"]["source"] == "model"
                assert any(w["type"] == "SaveError" for w in rec["warnings"]), rec
                assert "\ufffd" in json.dumps(rec["prompt"], ensure_ascii=False)
            elif fault == "reply":
                assert rec["error"]["source"] == "save" and rec["error"]["type"] == "UnicodeEncodeError"
                assert rec["completion"][-1]["content"] == "caf\ufffd \ufffd" and rec["reward"] == 0.0
            elif fault == "tuple_key":
                assert rec["error"]["source"] == "save" and rec["info"] == {"('a', 1)": "tuple key"}
            elif fault == "renamed":
                assert rec["error"]["source"] == "save" and "rollout_index" in rec["error"]["message"]
            else:  # popped: saved with what was left
                assert rec["error"]["source"] == "save" or rec["completion"] in (None, []), rec
        meta = json.loads((run / "metadata.json").read_text())
        assert meta["num_rollouts"] == 16
        # nothing left to do: a resume finishes at once instead of crashing again
        again = run_vf("eval", str(env), "--resume", str(run), "--max-error-rate", "1", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert _ids(_records(run)) == [(i, 0) for i in range(16)]


# ------------------------------------------------------------------------- item 2: 4xx that is not an overflow


@pytest.mark.parametrize(
    ("error", "overflow"),
    [
        ({"message": "Invalid 'stop': array too long. Expected an array with maximum length 4", "type":
          "invalid_request_error", "param": "stop", "code": "array_above_max_length"}, False),
        ({"message": "Invalid 'tools[0].function.name': string too long. Expected a string with maximum "
          "length 64", "type": "invalid_request_error", "code": "string_above_max_length"}, False),
        ({"message": "This model's maximum context length is 8192 tokens. However, your messages resulted "
          "in 9000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error",
          "param": "messages", "code": "context_length_exceeded"}, True),
        ({"message": "This model's maximum context length is 256 tokens. However, your prompt contains 300 "
          "input tokens, which exceeds this limit even without any output tokens.", "type": "BadRequestError",
          "code": 400}, True),
        ({"message": "The decoder prompt (length 300) is longer than the maximum model length of 256. Make "
          "sure that `max_model_len` is no smaller than the number of text tokens.", "type": "BadRequestError",
          "code": 400}, True),
    ],
)  # fmt: skip
def test_only_a_real_context_overflow_is_prompt_too_long(env_file, tmp_path, error, overflow):
    with serving(Respond(400, {"error": error})) as srv:
        result = run_vf("eval", str(env_file), "-b", srv.base_url, "-n", "3", "-r", "1", "-o", str(tmp_path / "o"))
    records = _records(_run_folder(tmp_path / "o"))
    meta = json.loads((_run_folder(tmp_path / "o") / "metadata.json").read_text())
    if overflow:
        assert result.returncode == 0, result.stderr
        assert meta["stop_conditions"] == {"prompt_too_long": 3} and meta["num_errors"] == 0
        assert "--max-model-len" in result.stderr
        return
    assert result.returncode == 1 and "all 3 rollouts failed" in result.stderr, result.stderr
    assert "prompt_too_long" not in meta["stop_conditions"] and "--max-model-len" not in result.stderr
    assert meta["num_errors"] == 3 and meta["errors_by_kind"] == {"model": 3}
    for rec in records:  # the server's own message is saved
        assert rec["error"]["source"] == "model" and error["message"] in rec["error"]["message"]


# -------------------------------------------------------------------------- item 11: infrastructure


def test_infrastructure_failures_are_not_scores_and_a_resume_runs_them_again(env_file, tmp_path):
    healthy = {"on": False}

    def handler(request):  # rows 0-3 answer; the others find a server that drops every connection
        return _answer(request) if healthy["on"] or _number(request) < 4 else Reset()

    with serving(handler) as srv:
        args = ("eval", str(env_file), "-b", srv.base_url, "-n", "6", "-r", "2", "--max-retries", "0")
        result = run_vf(*args, "-o", str(tmp_path / "o"), cwd=tmp_path)
        run = _run_folder(tmp_path / "o")
        meta = json.loads((run / "metadata.json").read_text())
        # 4 of 12 failed for infrastructure reasons: above the error-rate bound, so exit 1
        assert result.returncode == 1, result.stderr
        assert "4 of 12 rollouts failed" in result.stderr and "infrastructure" in result.stderr
        assert meta["num_rollouts"] == 12 and meta["num_errors"] == 4 and meta["num_infra_errors"] == 4
        assert meta["errors_by_kind"] == {"infra": 4} and meta["num_scored"] == 8
        assert meta["avg_reward"] == 1.0  # the 8 answered rollouts, not 8/12
        assert "4 infrastructure, not in the reward" in result.stdout
        # the server recovers: --resume runs the infrastructure failures again, and only them
        healthy["on"] = True
        before = srv.request_count
        again = run_vf("eval", str(env_file), "--resume", str(run), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert len([r for r in srv.requests[before:] if r.method == "POST"]) == 4
    records = _records(run)
    assert _ids(records) == [(i, j) for i in range(6) for j in range(2)]
    assert all(r["error"] is None and r["reward"] == 1.0 for r in records)
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["num_errors"] == 0 and meta["avg_reward"] == 1.0
    # the failed attempts are kept aside, not deleted
    aside = [json.loads(x) for x in (run / "results.aside.jsonl").read_text().splitlines()]
    assert len(aside) == 4 and all(r["error"]["kind"] == "infra" for r in aside)


def test_max_error_rate_bounds_the_exit_status(env_file, tmp_path):
    def handler(request):  # one row of six is refused by the server (a model error)
        return Respond(400, {"error": {"message": "bad request"}}) if _number(request) == 0 else _answer(request)

    with serving(handler) as srv:
        base = ("eval", str(env_file), "-b", srv.base_url, "-n", "6", "-r", "1", "--no-save")
        assert run_vf(*base, cwd=tmp_path).returncode == 1  # 1/6 is above the default 0.1
        assert run_vf(*base, "--max-error-rate", "0.2", cwd=tmp_path).returncode == 0


# ------------------------------------------------------------------------------- item 7: one run per folder


def test_a_second_vf_eval_on_a_busy_run_folder_refuses(env_file, tmp_path):
    answering = {"on": False}

    with serving(lambda req: _answer(req) if answering["on"] else Silent()) as srv:
        first = _popen("eval", str(env_file), "-b", srv.base_url, "-n", "3", "-r", "2", "-o", str(tmp_path / "o"),
                       cwd=tmp_path)  # fmt: skip
        try:
            srv.wait_for(lambda: srv.in_flight >= 6, "6 requests in flight")
            run = _run_folder_when_planned(tmp_path / "o")
            second = run_vf("eval", str(env_file), "--resume", str(run), cwd=tmp_path)
            assert second.returncode == 1 and "another run is writing to" in second.stderr, second.stderr
            assert f"pid {first.pid}" in second.stderr
            # the holder dies without cleaning up: its lock goes with it
            first.kill()
            first.wait(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
        answering["on"] = True
        srv.release.set()
        third = run_vf("eval", str(env_file), "--resume", str(run), cwd=tmp_path)
        assert third.returncode == 0, third.stderr
    assert _ids(_records(run)) == [(i, j) for i in range(3) for j in range(2)]


def _run_folder_when_planned(root: Path) -> Path:
    (plan,) = list(root.rglob("plan.json"))
    return plan.parent


# ------------------------------------------------------------------------- item 8: repeated example ids

DUPLICATE_IDS_ENV = """
import verifiers as vf


def load_environment(**kwargs):
    rows = [{"question": f"Repeat the number {i}", "answer": str(i), "example_id": i % 3} for i in range(6)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda **kw: 1.0]), **kwargs)
"""


def test_repeated_example_ids_are_refused_before_anything_runs(tmp_path):
    env = write_env_file(tmp_path, "duplicate_ids_env", DUPLICATE_IDS_ENV)
    with serving(_answer) as srv:
        result = run_vf("eval", str(env), "-b", srv.base_url, "-n", "-1", "-r", "1", "-o", str(tmp_path / "o"))
        assert srv.request_count == 1  # /models only
    assert result.returncode == 1
    assert "example_id values repeat" in result.stderr and "0 (2 times)" in result.stderr, result.stderr
    assert not list((tmp_path / "o").rglob("results.jsonl"))


# ------------------------------------------------------------------ items 14, 17: a resume keeps everything


def test_resume_sets_a_bad_middle_line_aside_and_keeps_the_run_clock(env_file, tmp_path):
    with serving(_answer) as srv:
        first = run_vf("eval", str(env_file), "-b", srv.base_url, "-n", "4", "-r", "2", "-o", str(tmp_path / "o"))
        assert first.returncode == 0, first.stderr
        run = _run_folder(tmp_path / "o")
        meta1 = json.loads((run / "metadata.json").read_text())
        lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
        broken = lines[2][: len(lines[2]) // 2] + b"\n"  # a damaged line in the middle
        lost = json.loads(lines[2])
        tail = b'{"example_id": 3, "rollout_in'  # and an unfinished last one, as a killed run leaves
        (run / "results.jsonl").write_bytes(b"".join([*lines[:2], broken, *lines[3:]]) + tail)
        before = srv.request_count
        again = run_vf("eval", str(env_file), "--resume", str(run))
        assert again.returncode == 0, again.stderr
        # only the rollout whose line was damaged ran again; everything after it was kept
        assert [r.method for r in srv.requests[before:]] == ["GET", "POST"]
    records = _records(run)
    assert _ids(records) == [(i, j) for i in range(4) for j in range(2)]
    assert [json.loads(x) for x in lines[3:]] == [r for r in records if r["example_id"] != lost["example_id"]
                                                   or r["rollout_index"] != lost["rollout_index"]][2:]
    assert (run / "results.aside.jsonl").read_bytes() == broken + tail + b"\n"
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["started_at"] == meta1["started_at"] and meta["invocations"] == 2
    assert meta["time_ms"] > meta1["time_ms"]


# ------------------------------------------------------------------------- item 18: usage, SIGTERM


def test_usage_counts_that_cannot_be_real_are_not_summed(env_file, tmp_path):
    usages = [{"prompt_tokens": -1000, "completion_tokens": 2}, {"prompt_tokens": 3, "completion_tokens": 10**15},
              {"prompt_tokens": 3, "completion_tokens": 2}]  # fmt: skip

    with serving(lambda req: chat_body(f"number {_number(req)}", usage=usages[_number(req)])) as srv:
        result = run_vf("eval", str(env_file), "-b", srv.base_url, "-n", "3", "-r", "1", "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    meta = json.loads((_run_folder(tmp_path / "o") / "metadata.json").read_text())
    assert meta["usage"]["prompt_tokens"] == 3 + 3 and meta["usage"]["completion_tokens"] == 2 + 2
    assert meta["warnings_by_type"] == {"InvalidUsage": 2}


def test_sigterm_prints_the_command_that_continues_the_run(env_file, tmp_path):
    with serving(lambda req: Silent()) as srv:
        proc = _popen("eval", str(env_file), "-b", srv.base_url, "-n", "2", "-r", "2", "-o", str(tmp_path / "o"),
                      cwd=tmp_path)  # fmt: skip
        try:
            srv.wait_for(lambda: srv.in_flight >= 4, "4 requests in flight")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        srv.release.set()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Continue with: vf eval" in err and "--resume" in err


# ----------------------------------------------------------------- items 12, 13: stopping and exiting

SLOW_REWARD_ENV = """
import os, signal
from pathlib import Path

import verifiers as vf


def slow(completion, answer, **kwargs) -> float:
    # a synchronous reward during which the user presses Ctrl-C twice: the signals are real, sent
    # from here so that both arrive while this code holds the event loop (once per run folder)
    mark = Path(os.environ["VF_TEST_MARK"])
    if not mark.exists():
        mark.write_text(answer)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return 1.0


def load_environment(**kwargs):
    rows = [{"question": f"Repeat the number {i}", "answer": str(i)} for i in range(4)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[slow]), **kwargs)
"""


def test_ctrl_c_twice_during_a_sync_reward_records_nothing_false(tmp_path):
    env = write_env_file(tmp_path, "slow_reward_env", SLOW_REWARD_ENV)
    os.environ["VF_TEST_MARK"] = str(tmp_path / "mark")
    try:
        with serving(_answer) as srv:
            proc = _popen("eval", str(env), "-b", srv.base_url, "-n", "4", "-r", "1", "-c", "1",
                          "-o", str(tmp_path / "o"), cwd=tmp_path)  # fmt: skip
            try:
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == 130, err
            assert "Continue with: vf eval" in err
            run = _run_folder_when_planned(tmp_path / "o")
            saved = _records(run) if (run / "results.jsonl").exists() else []
            assert not [r for r in saved if r["error"]], saved  # no KeyboardInterrupt on anyone
            again = run_vf("eval", str(env), "--resume", str(run), cwd=tmp_path)
            assert again.returncode == 0, again.stderr
    finally:
        del os.environ["VF_TEST_MARK"]
    records = _records(run)
    assert _ids(records) == [(i, 0) for i in range(4)] and all(r["error"] is None for r in records)


OWN_POOL_TOOL_ENV = """
import threading
from concurrent.futures import ThreadPoolExecutor, TimeoutError

import verifiers as vf

_never = threading.Event()
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool-pool")


def lookup(query: str) -> str:
    \"\"\"Look something up (gives up on its own worker after a moment).\"\"\"
    future = _pool.submit(_never.wait)
    try:
        future.result(timeout=0.05)
    except TimeoutError:
        return "lookup timed out"
    return "found"


def load_environment(**kwargs):
    rows = [{"question": "Repeat the number 0", "answer": "0"}]
    rubric = vf.Rubric(funcs=[lambda completion, **kw: 1.0])
    return vf.ToolEnv(tools=[lookup], dataset=rows, rubric=rubric, max_turns=3, **kwargs)
"""


def test_a_tool_with_its_own_stuck_thread_pool_does_not_keep_vf_eval_alive(tmp_path):
    env = write_env_file(tmp_path, "own_pool_tool_env", OWN_POOL_TOOL_ENV)
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "x"}'}}]}  # fmt: skip

    def handler(request):
        turn = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return chat_body(None, tool_calls=call["tool_calls"], finish_reason="tool_calls")
        return chat_body("number 0")

    with serving(handler) as srv:
        # the timeout only guards against the hang this test is about
        result = run_vf("eval", str(env), "-b", srv.base_url, "-n", "1", "-r", "1", "--no-save", cwd=tmp_path,
                        timeout=90)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "never ended (tool-pool" in result.stderr


FD_EXHAUSTION_ENV = """
import os, resource

import verifiers as vf


def reward(completion, answer, **kwargs) -> float:
    if answer == "0":  # the machine runs out of file descriptors while this rollout is scored
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
        fds = []
        try:
            while True:
                fds.append(os.open(os.devnull, os.O_RDONLY))
        finally:
            for fd in fds:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return 1.0


def load_environment(**kwargs):
    rows = [{"question": f"Repeat the number {i}", "answer": str(i)} for i in range(4)]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[reward]), **kwargs)
"""


def test_too_many_open_files_is_an_infrastructure_error_not_a_score(tmp_path):
    env = write_env_file(tmp_path, "fd_exhaustion_env", FD_EXHAUSTION_ENV)
    with serving(_answer) as srv:
        result = run_vf("eval", str(env), "-b", srv.base_url, "-n", "4", "-r", "1", "-o", str(tmp_path / "o"))
    assert result.returncode == 1 and "1 of 4 rollouts failed" in result.stderr, result.stderr
    run = _run_folder(tmp_path / "o")
    (failed,) = [r for r in _records(run) if r["error"]]
    assert failed["example_id"] == 0 and failed["error"]["kind"] == "infra"
    assert "Too many open files" in failed["error"]["message"]
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["num_infra_errors"] == 1 and meta["num_scored"] == 3 and meta["avg_reward"] == 1.0
