"""`verifiers.serving.vllm` without starting vLLM: install locking and markers, launch flags, start-up
failures reported with the server's own words."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tests.support.vllm import make_tiny_model
from verifiers.serving import vllm as serving


@pytest.fixture
def vf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("VF_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_venv_location_follows_vf_home_variant_and_version(vf_home, monkeypatch):
    monkeypatch.setenv("VF_VLLM_VARIANT", "cpu")
    assert serving.detect_variant() == "cpu"
    assert serving.vllm_venv_dir() == vf_home / f"vllm-cpu-{serving.VLLM_VERSION}"
    assert serving.vllm_venv_dir("cuda", "9.9.9") == vf_home / "vllm-cuda-9.9.9"
    monkeypatch.setenv("VF_VLLM_VARIANT", "tpu")
    with pytest.raises(serving.VLLMError):
        serving.detect_variant()


def _fake_install(calls: list[str]):
    def install(venv, variant, version, log):
        calls.append(variant)
        time.sleep(0.5)  # long enough for the other caller to hit the lock
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")
        (venv / serving.READY_MARKER).write_text("{}")

    return install


def test_concurrent_callers_install_once(vf_home, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(serving, "_install", _fake_install(calls))
    results: list = []
    logs: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(serving.ensure_vllm("cpu", log=logs.append)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == ["cpu"]
    assert (
        len(results) == 2
        and results[0] == results[1] == vf_home / f"vllm-cpu-{serving.VLLM_VERSION}/bin/python"
    )
    assert any("waiting for another vLLM install" in line for line in logs)
    # installed: later calls return at once without the lock
    assert serving.ensure_vllm("cpu", log=logs.append) == results[0]
    assert calls == ["cpu"]


def test_unfinished_install_is_redone(vf_home, monkeypatch):
    venv = serving.vllm_venv_dir("cpu")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")  # a venv without the ready marker: killed mid-install
    calls: list[str] = []

    def install(venv_path, variant, version, log):
        calls.append(variant)
        (venv_path / serving.READY_MARKER).write_text("{}")

    monkeypatch.setattr(serving, "_install", install)
    serving.ensure_vllm("cpu", log=lambda _: None)
    assert calls == ["cpu"]


def test_launch_command_and_environment(tmp_path, monkeypatch):
    model = make_tiny_model(tmp_path / "m")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    server = serving.VLLMServer(model, 4321, dev_mode=True, variant="cpu", extra_args=["--enforce-eager"])
    cmd = server.command("/x/python")
    assert cmd[:3] == ["/x/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for flag in ("--dtype float32", "--gpu-memory-utilization 0.3", "--max-model-len 256", "--port 4321",
                 "--host 127.0.0.1", "--served-model-name m", "--enforce-eager"):  # fmt: skip
        assert flag in joined
    env = server.environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "PYTHONPATH" not in env
    assert server.base_url == "http://127.0.0.1:4321/v1"
    plain = serving.VLLMServer(model, 4322, variant="cuda")
    assert "VLLM_SERVER_DEV_MODE" not in plain.environment()
    assert "--gpu-memory-utilization" not in plain.command("p")


def test_not_a_model_folder(tmp_path):
    with pytest.raises(serving.VLLMError, match="vf model tiny"):
        serving.VLLMServer(tmp_path)


def test_start_failure_quotes_the_server_log(tmp_path):
    model = make_tiny_model(tmp_path / "m")
    # An interpreter without vllm: the server dies at once, and the error says why.
    server = serving.VLLMServer(
        model, python=sys.executable, variant="cpu", startup_timeout=60, log=lambda _: None
    )
    with pytest.raises(serving.VLLMError, match="exited with code") as exc:
        server.start()
    assert "No module named" in str(exc.value)
    assert not server.is_running()


def test_cpu_server_runs_the_model_in_the_engine_process(tmp_path, monkeypatch):
    """``uni`` alone is turned back into ``mp`` by vLLM's CPU platform: the environment must say so too."""
    model = make_tiny_model(tmp_path / "m")
    for var in ("VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(serving.os, "cpu_count", lambda: 8)
    server = serving.VLLMServer(model, 4321, variant="cpu")
    assert " --distributed-executor-backend uni" in " ".join(server.command("p"))
    env = server.environment()
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["OMP_NUM_THREADS"] == "7"  # every core but one, like vLLM's own pinning

    # The caller's own choices win: an explicit backend, parallelism, or the variables themselves.
    for args in (["--distributed-executor-backend", "mp"], ["--distributed-executor-backend=mp"],
                 ["--tensor-parallel-size", "2"]):
        chosen = serving.VLLMServer(model, 4321, variant="cpu", extra_args=args)
        assert "uni" not in chosen.command("p")
        assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in chosen.environment()
        assert "OMP_NUM_THREADS" not in chosen.environment()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert serving.VLLMServer(model, 4321, variant="cpu").environment()["OMP_NUM_THREADS"] == "3"
    own = serving.VLLMServer(model, 4321, variant="cpu", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"})
    assert own.environment()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    # GPU servers are left alone.
    gpu = serving.VLLMServer(model, 4321, variant="cuda")
    assert "uni" not in gpu.command("p") and "VLLM_ENABLE_V1_MULTIPROCESSING" not in gpu.environment()
    monkeypatch.setattr(serving.os, "cpu_count", lambda: 1)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert serving.VLLMServer(model, 4321, variant="cpu").environment()["OMP_NUM_THREADS"] == "1"
