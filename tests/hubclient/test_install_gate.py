"""One verification gate on every install path (issue 22, item 8): a version whose hub check failed
is refused by `vf install`, by `vf install --lock`, as a failed hub dependency, and through the
loader's installer (``load_environment(..., install=True)``, ``VF_AUTO_INSTALL=1``, training configs,
EnvGroup members given by id); ``VF_ALLOW_UNVERIFIED=1`` / ``--allow-unverified`` let it through.

A real hub process; the verdicts come from a scripted check worker speaking the real worker protocol
(claim, report) with a real worker token, so no sandbox is needed to make a version fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess, run_hub
from tests.hubclient.helpers import VF, create_user, fresh_venv
from tests.support.envpkg import build_env_package

OWNER = "gina"
REFUSED = "failed the hub's check"


def _worker_token(hub: HubProcess) -> str:
    from hub.auth import add_token
    from hub.checks import system_worker
    from hub.core import Hub
    from hub.settings import Settings

    h = Hub(Settings(data_dir=hub.data_dir, migrate_on_start=False))
    try:
        with h.db.session() as s:
            secret, _tok = add_token(s, system_worker(h, s), scope="worker")
        return secret
    finally:
        h.close()


def _publish_with_verdict(hub: HubProcess, token: str, worker: str, work: Path, name: str, status: str,
                          dependencies: list[str] | None = None) -> None:
    pkg = build_env_package(work, name, "1.0.0", dependencies=dependencies)
    with httpx.Client(base_url=hub.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (pkg.wheel, pkg.sdist)]
        r = c.post(f"/api/v1/environments/{OWNER}/{name}/versions", files=files)
        assert r.status_code == 201, r.text
    with httpx.Client(base_url=hub.url, headers={"Authorization": f"Bearer {worker}"}, timeout=60) as c:
        job = c.post("/api/v1/check-jobs/claim", json={"worker": "scripted"}).json()["job"]
        assert job["env"] == f"{OWNER}/{name}", job  # one publish, one job: this one
        r = c.post(f"/api/v1/check-jobs/{job['id']}/report",
                   json={"lease_token": job["lease_token"], "status": status,
                         "reason": "errors: reward:broken: ZeroDivisionError" if status == "failed" else ""})
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """gate-bad failed; gate-good passed but needs gate-dep (same owner), which failed."""
    work = tmp_path_factory.mktemp("gate-pkgs")
    with run_hub(tmp_path_factory.mktemp("gate-hub")) as hub:
        token = create_user(hub, OWNER)
        worker = _worker_token(hub)
        _publish_with_verdict(hub, token, worker, work, "gate-bad", "failed")
        _publish_with_verdict(hub, token, worker, work, "gate-dep", "failed")
        _publish_with_verdict(hub, token, worker, work, "gate-good", "passed", dependencies=["gate-dep>=1.0"])
        hub.extra["token"] = token
        yield hub


def _vf(hub: HubProcess, root: Path) -> VF:
    root.mkdir(parents=True, exist_ok=True)
    (root / "work").mkdir(exist_ok=True)
    return VF(fresh_venv(root / "venv"), root / "config", hub.url, root / "work", hub.extra["token"])


def _importable(vf: VF, module: str) -> bool:
    return vf.python_run(f"import {module}").code == 0


LOAD = "import verifiers as vf; print(vf.load_environment('gina/gate-bad@1.0.0', install=True)['name'])"
AUTO = "import verifiers as vf; print(vf.load_environment('gina/gate-bad')['name'])"
TRAIN = ("from verifiers.train.config import EnvSection, load_env; "
         "print(load_env(EnvSection(id='gina/gate-bad@1.0.0'))['name'])")
GROUP = "import verifiers as vf; vf.EnvGroup(envs=['gina/gate-bad@1.0.0'])"


@pytest.mark.parametrize("path,code,env", [
    ("install=True", LOAD, {}),
    ("VF_AUTO_INSTALL", AUTO, {"VF_AUTO_INSTALL": "1"}),
    ("training config", TRAIN, {}),
    ("EnvGroup member", GROUP, {"VF_AUTO_INSTALL": "1"}),
], ids=["install-true", "auto-install", "training-config", "envgroup-member"])
def test_the_loaders_installer_refuses_a_failed_version(gated: HubProcess, tmp_path: Path, path: str, code: str,
                                                       env: dict[str, str]) -> None:
    vf = _vf(gated, tmp_path / "vf")
    res = vf.python_run(code, **env)
    assert res.code != 0 and REFUSED in res.err and "ZeroDivisionError" in res.err, res.err
    assert "VF_ALLOW_UNVERIFIED=1" in res.err
    assert not _importable(vf, "gate_bad")  # nothing was installed
    if path == "EnvGroup member":  # (these test packages are no Environments: installing is the point)
        return
    res = vf.python_run(code, VF_ALLOW_UNVERIFIED="1", **env)
    assert res.code == 0 and res.out.strip() == "gate-bad", res.err
    assert "installing anyway" in res.err


def test_a_failed_hub_dependency_is_refused(gated: HubProcess, tmp_path: Path) -> None:
    vf = _vf(gated, tmp_path / "vf")
    res = vf("install", "gina/gate-good")
    assert res.code != 0 and "gina/gate-dep@1.0.0 failed the hub's check" in res.text, res.text
    assert not _importable(vf, "gate_good") and not _importable(vf, "gate_dep")
    res = vf("install", "gina/gate-good", "--allow-unverified")
    assert res.code == 0, res.text
    assert _importable(vf, "gate_good") and _importable(vf, "gate_dep")


def test_a_lock_file_never_skips_the_gate(gated: HubProcess, tmp_path: Path) -> None:
    lock = tmp_path / "vf.lock"
    first = _vf(gated, tmp_path / "first")
    assert first("install", "gina/gate-bad", "--lock", str(lock), VF_ALLOW_UNVERIFIED="1").code == 0
    assert "gate-bad" in lock.read_text()
    vf = _vf(gated, tmp_path / "second")
    res = vf("install", "--lock", str(lock))
    assert res.code != 0 and REFUSED in res.text, res.text
    assert not _importable(vf, "gate_bad")
    res = vf("install", "--lock", str(lock), "--allow-unverified")
    assert res.code == 0 and _importable(vf, "gate_bad"), res.text
