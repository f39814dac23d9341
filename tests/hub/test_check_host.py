"""Nothing of an environment runs on the check worker's host, and a stranger on the public index
decides no verdict (issue 22, items 1 and 3), end to end: a real hub, a second real hub playing the
public index, a real worker (``python -m hub worker``) started from a polluted environment, the
bubblewrap sandbox, pip.

* ``ch-dref`` depends on ``evil @ file:///...``, a local project whose build backend writes the
  environment it runs in to a marker file. A worker that resolves dependencies on its host runs it
  there, worker token and all. The version was stored before the hub refused direct references
  (published here in-process with that check switched off, as an upgraded hub holds such versions).
* ``ch-app`` depends on ``ch-helper`` (a hub dependency: the same owner publishes it) and on
  ``tiny-public`` (the public index's). Someone squatted ``ch-helper`` 99.0 on the public index.
* The worker's process must hold none of the secrets, index settings or proxy settings it was
  started with, and its token in neither its environment nor its command line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from hub.auth import add_token
from hub.testing import HubProcess, make_settings, run_hub
from tests.support.envpkg import build_env_package, build_project

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MARK = "vfmark" + uuid.uuid4().hex[:12]

EVIL_BACKEND = """
import json, os
open({marker!r}, "w").write(json.dumps(dict(os.environ)))
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(directory, config_settings=None):
    raise RuntimeError("the evil backend ran")
def build_wheel(directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("the evil backend ran")
"""

APP = """
import verifiers as vf
import ch_helper, tiny_public

def load_environment(**kwargs):
    assert ch_helper.ORIGIN == "hub", f"ch-helper came from {ch_helper.ORIGIN}"
    rows = [{"question": "What is 2+2?", "answer": "4"}]
    def correct(completion, answer, **_):
        return 1.0 if answer in vf.completion_text(completion) else 0.0
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[correct]))
"""

GOOD = """
import verifiers as vf

def load_environment(**kwargs):
    rows = [{"question": "What is 2+2?", "answer": "4"}]
    def correct(completion, answer, **_):
        return 1.0 if answer in vf.completion_text(completion) else 0.0
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[correct]))
"""


def write_project(root: Path, name: str, version: str, source: str, deps: list[str], *, env: bool = True) -> Path:
    mod = name.replace("-", "_")
    project = root / f"{name}-{version}-{uuid.uuid4().hex[:6]}"
    (project / mod).mkdir(parents=True)
    (project / mod / "__init__.py").write_text(textwrap.dedent(source))
    entry = f'[project.entry-points."verifiers.environments"]\n"{name}" = "{mod}:load_environment"\n' if env else ""
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{name}"
            version = "{version}"
            description = "a check-host test package"
            requires-python = ">=3.10"
            dependencies = {json.dumps(deps)}

            [tool.hatch.metadata]
            allow-direct-references = true

            [tool.hatch.build.targets.wheel]
            packages = ["{mod}"]
            """
        )
        + entry
    )
    return project


def _files(wheel: Path, sdist: Path | None = None) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (wheel, sdist) if p]


def _user(h: HubProcess, name: str) -> str:
    with h.client(h.admin_token) as c:
        r = c.post("/api/v1/users", json={"name": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]


@dataclass
class Setup:
    hub: HubProcess
    public: HubProcess
    root: Path
    marker: Path
    worker: subprocess.Popen[bytes]
    worker_token: str
    log: Path


def _publish(h: HubProcess, token: str, owner: str, name: str, wheel: Path, sdist: Path | None = None) -> None:
    with h.client(token) as c:
        r = c.post(f"/api/v1/environments/{owner}/{name}/versions", files=_files(wheel, sdist))
    assert r.status_code == 201, r.text


def _publish_bypassing_the_direct_reference_check(h: HubProcess, wheel: Path) -> None:
    """As a hub from before the check stored it: in-process, on the same database and files."""
    from packaging.requirements import Requirement

    from hub import archives
    from tests.hub.helpers import HubClient

    saved = archives.check_requirement
    archives.check_requirement = lambda raw, where: Requirement(raw)  # type: ignore[assignment]
    try:
        client = HubClient.create(h.data_dir, database_url=None, admin_token=h.admin_token)
        try:
            r = client.publish_files("admin", "ch-dref", [(wheel.name, wheel.read_bytes())], h.admin_token)
            assert r.status_code == 201, r.text
        finally:
            client.close()
    finally:
        archives.check_requirement = saved


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    from hub import checks
    from hub.core import Hub as HubCore

    root = tmp_path_factory.mktemp("check-host")
    marker = root / "MARKER"
    with run_hub(root / "public") as public, run_hub(root / "data", extra_env={"VF_HUB_CHECK_LEASE_SECONDS": "8"}) as h:
        # the public index: a squatter's ch-helper 99.0, and an honest tiny-public
        mallory = _user(public, "mallory")
        squat = build_project(write_project(root / "src", "ch-helper", "99.0", 'ORIGIN = "squatter"\n', [], env=False), root / "pub")
        _publish(public, mallory, "mallory", "ch-helper", *squat)
        tiny = build_env_package(root / "tiny", "tiny-public", "1.0.0")
        _publish(public, mallory, "mallory", "tiny-public", tiny.wheel, tiny.sdist)
        # the hub: the helper, the app, the direct reference
        helper = build_project(write_project(root / "src", "ch-helper", "1.0.0", 'ORIGIN = "hub"\n', [], env=False), root / "dist")
        _publish(h, h.admin_token, "admin", "ch-helper", *helper)
        app = build_project(write_project(root / "src", "ch-app", "1.0.0", APP, ["verifiers", "ch-helper>=1", "tiny-public>=1"]), root / "dist")
        _publish(h, h.admin_token, "admin", "ch-app", *app)
        evil = root / "evilproj"
        evil.mkdir()
        (evil / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
        (evil / "backend.py").write_text(EVIL_BACKEND.format(marker=str(marker)))
        dref_project = write_project(root / "src", "ch-dref", "1.0.0", GOOD, ["verifiers", f"evil @ file://{evil}"])
        dref_wheel, _sdist = build_project(dref_project, root / "dref")
        _publish_bypassing_the_direct_reference_check(h, dref_wheel)

        core = HubCore(make_settings(root / "data"))
        try:
            with core.db.session() as s:
                token, _tok = add_token(s, checks.system_worker(core, s), name="test", scope="worker")
        finally:
            core.close()
        polluted = {
            **{k: v for k, v in os.environ.items() if not k.startswith("VF_HUB")},
            "VF_HUB_WORKER_TOKEN": token,
            "VF_HUB_ADMIN_TOKEN": h.admin_token,
            "VF_HUB_DATABASE_URL": f"postgresql://hub:{MARK}@db/hub",
            "AWS_SECRET_ACCESS_KEY": MARK,
            "PIP_INDEX_URL": "http://127.0.0.1:9/simple/",
            "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:9/extra/",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "UV_INDEX_URL": "http://127.0.0.1:9/uv/",
        }
        log = root / "worker.log"
        with open(log, "wb") as fh:
            worker = subprocess.Popen(
                [sys.executable, "-m", "hub", "worker", "--hub", h.url, "--name", "host-w", "--poll-interval", "0.3",
                 "--timeout", "120", "--index-url", f"{public.url}/simple/"],
                env=polluted, stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
            )  # fmt: skip
        try:
            yield Setup(h, public, root, marker, worker, token, log)
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()


def _verdict(s: Setup, name: str, version: str = "1.0.0", timeout: float = 400) -> dict:
    deadline = time.monotonic() + timeout  # a generous bound on a hang, not a timing assertion
    while True:
        with s.hub.client(s.hub.admin_token) as c:
            runs = c.get(f"/api/v1/environments/admin/{name}/versions/{version}/checks").json()
        if runs and runs[0]["status"] in ("passed", "failed", "error"):
            return runs[0]
        assert s.worker.poll() is None, s.log.read_text()[-4000:]
        assert time.monotonic() < deadline, (runs, s.log.read_text()[-4000:])
        time.sleep(0.5)


def test_a_direct_reference_never_runs_on_the_host(setup: Setup) -> None:
    run = _verdict(setup, "ch-dref")
    assert run["status"] == "failed", run
    assert "direct reference" in run["reason"], run
    assert not setup.marker.exists(), "the dependency's build backend ran on the worker's host: " + (
        setup.marker.read_text()[:500] if setup.marker.exists() else ""
    )


def test_hub_dependencies_come_from_the_hub_not_the_public_index(setup: Setup) -> None:
    run = _verdict(setup, "ch-app")
    assert run["status"] == "passed", (run["reason"], run["log_tail"][-3000:])
    deps = run["report"]["hub_dependencies"]
    assert [(d["env"], d["version"]) for d in deps] == [("admin/ch-helper", "1.0.0")], deps
    # the public dependency was installed inside the sandbox, from the public index
    assert "tiny-public" in run["log_tail"] or "tiny_public" in run["log_tail"], run["log_tail"][-3000:]


def test_the_worker_holds_no_secret_it_was_started_with(setup: Setup) -> None:
    _verdict(setup, "ch-app")  # it has run a job by now (after its re-exec)
    pid = setup.worker.pid
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    names = {e.split("=", 1)[0] for e in environ if e}
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    for secret in (setup.worker_token, setup.hub.admin_token, MARK):
        assert secret not in "\0".join(environ), sorted(names)
        assert secret not in cmdline
    for name in ("VF_HUB_WORKER_TOKEN", "VF_HUB_ADMIN_TOKEN", "VF_HUB_DATABASE_URL", "AWS_SECRET_ACCESS_KEY",
                 "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HTTP_PROXY", "HTTPS_PROXY", "UV_INDEX_URL"):  # fmt: skip
        assert name not in names, sorted(names)
    assert "PIP_CONFIG_FILE=/dev/null" in environ


def test_viewers_see_no_host_details(setup: Setup) -> None:
    runs = []
    for name in ("ch-app", "ch-dref"):
        _verdict(setup, name)
        with httpx.Client(base_url=setup.hub.url, timeout=30) as c:
            runs += c.get(f"/api/v1/environments/admin/{name}/versions/1.0.0/checks").json()
    text = json.dumps(runs)
    host = socket.gethostname()
    assert all(r["worker"] is None for r in runs)
    # (the direct reference's own path is the environment's metadata, not a host detail)
    for leak in ("host-w", str(setup.root / "data"), str(ROOT), "/tmp/vf-sandbox", "/usr/lib/python3", setup.public.url):
        assert leak not in text, leak
    if len(host) >= 6:
        assert host not in text
