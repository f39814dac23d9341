"""Backend selection, the development-only subprocess backend, and the clear user-namespace error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers.sandbox import Sandbox, UserNamespacesUnavailableError, get_backend
from verifiers.sandbox.backends import BwrapBackend, NsjailBackend, SubprocessBackend, diagnose_userns

from .conftest import REPO

pytestmark = pytest.mark.sandbox


def test_default_backend_is_bwrap_and_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VF_SANDBOX_BACKEND", raising=False)
    assert isinstance(get_backend(), BwrapBackend)
    monkeypatch.setenv("VF_SANDBOX_BACKEND", "nsjail")
    assert isinstance(get_backend(), NsjailBackend)
    assert Sandbox().backend_name == "nsjail"
    assert isinstance(get_backend("subprocess"), SubprocessBackend)
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("docker")


async def test_subprocess_backend_works_and_warns_loudly(capfd: pytest.CaptureFixture[str]) -> None:
    sandbox = Sandbox("subprocess")
    with pytest.warns(RuntimeWarning, match="WITHOUT ANY ISOLATION"):
        result = await sandbox.run(python="print(6 * 7)", files={"a.txt": "x"})
    assert result.ok and result.stdout == "42\n"
    with pytest.warns(RuntimeWarning):
        result = await sandbox.run("while true; do :; done", timeout=0.5)
    assert result.kill_reason == "timeout"
    err = capfd.readouterr().err
    assert err.count("UNSAFE") >= 2  # on every use, not once


async def test_file_paths_cannot_escape_the_work_dir() -> None:
    sandbox = Sandbox()
    for bad in ["../x", "/etc/passwd", "a/../../x", ""]:
        with pytest.raises(ValueError):
            await sandbox.run("true", files={bad: "x"})
    result = await sandbox.run(
        "cat sub/dir/f.txt /workspace/abs.txt", files={"sub/dir/f.txt": "1", "/workspace/abs.txt": "2"}
    )
    assert result.stdout == "12"


async def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown sandbox limits"):
        await Sandbox().run("true", limits={"memory": 10})


def test_diagnosis_names_the_kernel_setting(tmp_path: Path) -> None:
    (tmp_path / "user").mkdir()
    (tmp_path / "kernel").mkdir()
    (tmp_path / "user" / "max_user_namespaces").write_text("15000\n")
    assert diagnose_userns(tmp_path) is None
    (tmp_path / "kernel" / "unprivileged_userns_clone").write_text("0\n")
    assert "kernel.unprivileged_userns_clone" in (diagnose_userns(tmp_path) or "")
    (tmp_path / "user" / "max_user_namespaces").write_text("0\n")
    assert "user.max_user_namespaces is 0" in (diagnose_userns(tmp_path) or "")


_PROBE = """
from verifiers.sandbox import Sandbox, UserNamespacesUnavailableError
try:
    Sandbox({backend!r}).run_sync("echo should-not-run")
except UserNamespacesUnavailableError as exc:
    print("CLEAR-ERROR:", exc)
"""


@pytest.mark.parametrize("backend", ["bwrap", "nsjail"])
def test_clear_error_when_user_namespaces_are_off(backend: str, tmp_path: Path) -> None:
    # A child user namespace whose own limit on further user namespaces is 0: exactly what a
    # machine with user namespaces switched off looks like to the sandbox (the host is untouched).
    assert shutil.which("unshare")
    root = tmp_path / "sbx"
    root.mkdir()
    root.chmod(0o777)
    script = f'echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c "$0"'
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script, _PROBE.format(backend=backend)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "VF_SANDBOX_DIR": str(root)},
    )
    assert "should-not-run" not in proc.stdout
    assert "CLEAR-ERROR:" in proc.stdout, proc.stdout + proc.stderr
    assert "user.max_user_namespaces" in proc.stdout
    assert "sysctl" in proc.stdout  # it says how to fix it
    assert UserNamespacesUnavailableError.__name__  # the type is importable from the package
