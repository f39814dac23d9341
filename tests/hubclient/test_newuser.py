"""Messages a newcomer follows from the README: each says what to do next, with the command that
exists, and nothing that buries the real error. Real hub processes, real `vf` subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hub.testing import HubProcess, free_port
from tests.hubclient.helpers import create_user, write_env_package
from tests.hubclient.test_vf_hub_e2e import one_line_error

REPO = Path(__file__).resolve().parents[2]


def test_a_refused_token_says_how_to_make_a_new_one(hub: HubProcess, make_vf) -> None:
    vf = make_vf()
    for res in (vf("whoami", VF_HUB_TOKEN="vfh_not_a_token"), vf("login", "--token", "vfh_wrong")):
        err = one_line_error(res)
        assert "refused the token" in err
        hint = err.splitlines()[1]
        # not "vf login" again (the same token would be refused again), but where a token comes from
        assert hint.startswith("hint: ") and "vf hub token create USER" in hint and "vf login --token NEW_TOKEN" in hint
    # the subcommand the hint names exists
    proc = subprocess.run([sys.executable, "-m", "verifiers.cli", "hub", "token", "create", "--help"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 0 and "--data" in proc.stdout, proc.stderr


def test_installing_an_unknown_version_prints_only_the_real_error(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    vf = make_vf(create_user(hub, "nina"))
    assert vf("push", str(write_env_package(tmp_path, "nina-words", "0.3.0")), "--no-check").code == 0
    res = vf("install", "nina/nina-words@9.9.9")
    err = one_line_error(res)
    assert "nina/nina-words has no version 9.9.9" in err and "0.3.0" in err
    assert res.out.strip() == ""  # no "note: ... verified" before it
    res = vf("install", "nina/nowhere@1.0")
    assert "not found" in one_line_error(res) and res.out.strip() == ""


def test_the_hub_start_up_message_names_the_vf_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB_")}
    env["PYTHONPATH"] = str(REPO)
    data = tmp_path / "hub-data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifiers.cli", "hub", "serve", "--data", str(data), "--port", str(free_port())],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        assert proc.stderr is not None
        line = ""
        for line in proc.stderr:  # the message comes before uvicorn starts serving
            if "No users yet" in line:
                break
        else:
            raise AssertionError("the hub printed no start-up message")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert f"`vf hub user create NAME --data {data}`" in line and "python -m hub" not in line


def test_a_push_whose_visibility_disagrees_names_vf_visibility_and_the_version_pushed(
    hub: HubProcess, make_vf, tmp_path: Path
) -> None:
    vf = make_vf(create_user(hub, "omar"))
    pkg = write_env_package(tmp_path, "omar-words", "0.1.0")
    assert vf("push", str(pkg), "--no-check").code == 0  # public
    res = vf("push", str(pkg), "--private", "--bump", "patch")
    err = one_line_error(res)
    assert "omar/omar-words 0.1.1:" in err and "is public, and this upload asks for private" in err
    assert "vf visibility omar/omar-words private" in err
    assert "bump" not in err.splitlines()[1]  # --bump was given; a new version is refused the same way
    assert "omar-words 0.1.0" not in res.text and "checking omar-words 0.1.1 (bumped from 0.1.0)" in res.out
    assert 'version = "0.1.0"' in (pkg / "pyproject.toml").read_text()  # a refused push changes nothing
    # the command the hint names: the owner changes it, then the same push goes through
    assert vf("visibility", "omar/omar-words", "private").out.strip() == "omar/omar-words is now private"
    assert vf("info", "omar/omar-words").out.splitlines()[0] == "omar/omar-words (private)"
    res = vf("push", str(pkg), "--private", "--bump", "patch", "--no-check")
    assert res.code == 0 and "published omar/omar-words@0.1.1" in res.out, res.text
    assert vf("visibility", "omar/omar-words", "public").out.strip() == "omar/omar-words is now public"
    # someone else's environment, a typo in the word, an unknown name: one line each
    other = make_vf(create_user(hub, "pia"))
    assert "not allowed" in one_line_error(other("visibility", "omar/omar-words", "private"))
    assert "public or private" in one_line_error(vf("visibility", "omar/omar-words", "secret"))
    assert "not found" in one_line_error(vf("visibility", "omar/omar-wrds", "private"))


def test_push_wait_says_at_once_when_no_check_worker_runs(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    import httpx

    vf = make_vf(create_user(hub, "quinn"))
    pkg = write_env_package(tmp_path, "quinn-words", "0.1.0")
    # --wait-timeout is the default 900 s: the answer comes from the hub's word, not a timeout
    res = vf("push", str(pkg), "--no-check", "--wait")
    err = one_line_error(res)
    assert "published quinn/quinn-words@0.1.0" in res.out
    assert "the check of quinn/quinn-words@0.1.0 is queued, but no check worker is running" in err
    assert "no worker has ever asked it for a job" in err
    assert "vf hub serve --with-worker" in err and "vf hub worker --hub" in err
    workers = httpx.get(f"{hub.url}/api/v1/check-workers", timeout=30).json()
    assert workers["alive"] is False and workers["last_claim_seconds_ago"] is None and workers["queued"] >= 1
    # (a worker's claims and leases making it alive: tests/hub/test_worker_presence.py; here no
    # worker ever runs, so every test of this module sees the same answer)


def test_eval_push_refuses_a_run_that_is_mostly_failures(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    import threading

    import httpx

    from verifiers.testing import ScriptedServer, error, reply

    vf = make_vf(create_user(hub, "sam"), venv=True)
    pkg = write_env_package(tmp_path, "sam-say", "1.0.0", reward_body="return 1.0 if answer in str(completion) else 0.0")
    assert vf("push", str(pkg), "--no-check").code == 0
    assert vf("install", "sam/sam-say@1.0.0").code == 0

    def failing(n_bad: int):
        seen = {"n": 0}
        lock = threading.Lock()

        def handler(request):
            with lock:
                seen["n"] += 1
                bad = seen["n"] <= n_bad
            return error(500, "the model server broke") if bad else reply("the answer is 0 1 2 3")

        return handler

    def evaluate(n_bad: int, *extra: str, max_error_rate: str = "1"):
        # --max-error-rate 1: the run itself succeeds, so what is checked is the push's own refusal
        with ScriptedServer(failing(n_bad)) as srv:
            return vf("eval", "sam/sam-say@1.0.0", "-b", srv.base_url, "-n", "4", "-r", "1", "--max-retries", "0",
                      "--push", "-o", str(tmp_path / "runs"), "--max-error-rate", max_error_rate, *extra)

    def board():
        return httpx.get(f"{hub.url}/api/v1/environments/sam/sam-say/leaderboard", timeout=30).json()

    # Under the default error-rate bound (0.1) such a run fails before any push, --push-anyway or not.
    res = evaluate(3, "--push-anyway", max_error_rate="0.1")
    assert res.code == 1 and "above --max-error-rate 0.1" in res.err, res.text
    assert "pushed to the hub" not in res.out and board() == []
    res = evaluate(3)  # 3 of 4 failed: refused, and nothing reaches the leaderboard
    assert res.code == 1, res.text
    assert "but was not pushed: 3 of 4 rollouts (75%) 3 errored" in res.err
    assert "--push-anyway" in res.err and board() == []
    res = evaluate(3, "--push-anyway")
    assert res.code == 0 and "pushed to the hub: sam/sam-say@1.0.0" in res.out, res.text
    assert "note: 3 of 4 rollouts (75%) 3 errored" in res.err
    assert len(board()) == 1
    res = evaluate(1)  # a quarter: pushed, and said so
    assert res.code == 0 and "pushed to the hub" in res.out, res.text
    assert "note: 1 of 4 rollouts (25%) 1 errored" in res.err
    assert len(httpx.get(f"{hub.url}/api/v1/environments/sam/sam-say/evals", timeout=30).json()) == 2


def test_unusable_rollouts_counts_errors_and_context_overflows_from_the_records(tmp_path: Path) -> None:
    import json

    from verifiers.hub_client.evals import describe_unusable, unusable_rollouts

    records = [{"stop_condition": "prompt_too_long", "error": None}] * 59 + [{"stop_condition": "completed"}]
    records += [{"stop_condition": "prompt_too_long", "error": {"source": "model"}}]  # counted once, as an error
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n")
    assert unusable_rollouts(tmp_path) == (61, 1, 59)
    assert describe_unusable(61, 1, 59) == (
        "60 of 61 rollouts (98%) 1 errored and 59 did not fit the model's context (prompt_too_long)"
    )


def test_install_of_a_queued_version_says_no_worker_will_check_it(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    vf = make_vf(create_user(hub, "tara"), venv=True)
    assert vf("push", str(write_env_package(tmp_path, "tara-words", "0.1.0")), "--no-check").code == 0
    res = vf("install", "tara/tara-words@0.1.0")
    assert res.code == 0, res.text
    assert ("note: tara/tara-words@0.1.0 is not verified by the hub (queued; no check worker is running on the "
            "hub, so it stays unverified until one runs)") in res.out
