"""`vf serve` and `VLLMServer` against real vLLM (CPU build): health, chat with token data, in-place
weight reloads (what training uses), and a clean shutdown on SIGINT."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.cli.helpers import REPO, vf_command
from tests.support.vllm import make_tiny_model
from verifiers.serving.vllm import VLLMServer, free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _chat(base_url: str, model: str, text: str, **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 8, **extra}
    req = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def _greedy_ids(server: VLLMServer) -> list[int]:
    out = _chat(server.base_url, server.model, "Hello there", temperature=0.0, return_token_ids=True)
    return out["choices"][0]["token_ids"]


def _group_gone(pgid: int, within: float) -> bool:
    """Whether process group ``pgid`` is empty (killed members take a moment to be reaped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def _group_commands(pgid: int) -> list[str]:
    """The command lines of every live process of group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:  # field 5 of stat: the process group
            out.append(cmdline)
    return out


def test_cpu_server_has_no_spinning_worker(vllm_server):
    """The CPU server runs the model in its engine process: no ``VLLM::Worker`` process busy-polls a
    queue (a training loop needs those cores back). How much CPU the idle server still uses is
    measured by benchmarks/vllm_server.py, not asserted here."""
    pgid = vllm_server.process.pid  # started with start_new_session: its pid is the group id
    _greedy_ids(vllm_server)
    commands = _group_commands(pgid)
    assert commands, "the server's process group is empty"
    assert not [c for c in commands if "Worker" in c], commands


def test_reload_weights_changes_the_policy_in_place(vllm_server, tiny_model_dir, tmp_path):
    before = _greedy_ids(vllm_server)
    assert _greedy_ids(vllm_server) == before  # greedy decoding is deterministic
    other = make_tiny_model(tmp_path / "other", seed=12345)
    try:
        vllm_server.reload_weights(other)  # how long it takes: benchmarks/vllm_server.py
        changed = _greedy_ids(vllm_server)
    finally:
        vllm_server.reload_weights(tiny_model_dir)  # the shared server must serve the original again
    assert changed != before
    assert _greedy_ids(vllm_server) == before


def test_vf_serve_runs_vllm_and_stops_cleanly_on_sigint(tiny_model_dir, tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [*vf_command(), "serve", str(tiny_model_dir), "--port", str(port), "--dev-mode",
         "--served-model-name", "tiny-served", "--log-file", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        base = f"http://127.0.0.1:{port}"
        # ready is when vf serve says so (a Ctrl-C while it still waits for vLLM is an interrupted
        # start, exit 130), not merely when vLLM's /health first answers
        deadline = time.monotonic() + 600
        while not any("vLLM ready" in line for line in lines):
            assert proc.poll() is None or any("vLLM ready" in line for line in lines), "".join(lines)
            if time.monotonic() > deadline:
                pytest.fail("vf serve did not say it was ready")
            time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
            assert resp.status == 200
        reply = _chat(f"{base}/v1", "tiny-served", "Hi", logprobs=True, return_token_ids=True)
        choice = reply["choices"][0]
        assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) >= 1
        assert reply["prompt_token_ids"]
        # dev mode exposes the weight-update route
        rpc = urllib.request.Request(
            f"{base}/collective_rpc",
            data=json.dumps(
                {"method": "reload_weights", "kwargs": {"weights_path": str(tiny_model_dir)}}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(rpc, timeout=120) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        output = "".join(lines)
        assert proc.returncode == 0, output
        assert "vLLM ready" in output and "vLLM stopped" in output
        assert "Traceback" not in output
        vllm_pid = int(re.search(r"starting vLLM \(pid (\d+)\)", output).group(1))
        for group in (proc.pid, vllm_pid):  # nothing left of vf serve, vLLM or its engine workers
            assert _group_gone(group, within=15.0), f"process group {group} still has members"
        assert log.stat().st_size > 0  # vLLM's own output went to the log file
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_coalesced_samples_from_real_vllm(vllm_server):
    """A group's identical requests as one ``n`` request to vLLM: every caller gets its own sample,
    with its own token ids and logprobs, over the shared prompt ids."""
    import asyncio

    from verifiers.clients import ModelClient

    args = {"max_tokens": 8, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}
    msgs = [{"role": "user", "content": "Hello there"}]
    async with ModelClient(base_url=vllm_server.base_url, coalesce_samples=True) as client:
        out = await asyncio.gather(*(client.chat(model=vllm_server.model, messages=msgs, sampling_args=args)
                                     for _ in range(8)))
    assert len({tuple(r.completion_token_ids) for r in out}) > 1  # independent samples, not one copied
    for r in out:
        assert r.prompt_token_ids == out[0].prompt_token_ids and r.prompt_token_ids
        assert 0 < len(r.completion_token_ids) <= 8
        assert len(r.completion_logprobs) == len(r.completion_token_ids)
        assert r.usage["completion_tokens"] == len(r.completion_token_ids)
