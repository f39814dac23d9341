"""Verified environments end to end: a real hub, real check workers (``python -m hub worker``), the
bubblewrap sandbox, real wheels installed into fresh virtual environments.

One hub and one pair of workers serve the module: every environment below is pushed once and the
workers check them concurrently. Then: a worker killed with SIGKILL mid-job (the job reruns on
another worker), the page in Chromium, ``vf install`` and ``vf push --wait`` against the verdicts.
The queue's guarantees (no job claimed twice, a job that keeps losing its worker ends ``error``)
are tested on SQLite and PostgreSQL in ``test_check_queue.py``.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess, make_settings, run_hub
from tests.hubclient.helpers import VF, fresh_venv, write_env_package
from tests.support.envpkg import build_project

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MARK = uuid.uuid4().hex[:12]  # names host-side traces a hostile environment would leave

GOOD = """
import verifiers as vf

def load_environment(**kwargs):
    rows = [{"question": "What is 2+2?", "answer": "4"}, {"question": "What is 3+3?", "answer": "6"}]
    def correct(completion, answer, **_):
        return 1.0 if answer in vf.completion_text(completion) else 0.0
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[correct]))
"""

IMPORT_FAILS = """
import verifiers as vf
import a_module_nobody_ships  # noqa

def load_environment(**kwargs):
    raise AssertionError("unreachable")
"""

REWARD_RAISES = """
import verifiers as vf

def load_environment(**kwargs):
    rows = [{"question": "What is 2+2?", "answer": "4"}]
    def broken(completion, answer, **_):
        raise ZeroDivisionError("the reward function divides by zero")
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[broken]))
"""

EMPTY_DATASET = """
import verifiers as vf

def load_environment(**kwargs):
    def correct(completion, answer, **_):
        return 1.0
    return vf.SingleTurnEnv(eval_dataset=[], rubric=vf.Rubric(funcs=[correct]))
"""

HANGS = """
import time

def load_environment(**kwargs):
    while True:
        time.sleep(1)
"""

# Slow to load, then fine: the job a worker is killed in the middle of.
SLOW = """
import time
import verifiers as vf

def load_environment(**kwargs):
    time.sleep(10)  # long enough to be caught mid-check; the rescuer then waits it out
    rows = [{"question": "What is 2+2?", "answer": "4"}]
    def correct(completion, answer, **_):
        return 1.0 if answer in vf.completion_text(completion) else 0.0
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[correct]))
"""

# Every attack of the sandbox tests, from the environment's own code. Each success prints ESCAPE;
# the environment then works normally, except that the attacks leave it failing (a process left
# running, a memory bomb).
HOSTILE = """
import os, socket, subprocess, sys
import verifiers as vf

MARK = "{mark}"
HUB_PORT = {hub_port}

def attempt(name, fn):
    try:
        fn()
        print("ESCAPE:", name, file=sys.stderr)
    except BaseException as exc:
        print("blocked:", name, type(exc).__name__, file=sys.stderr)

def net():
    socket.create_connection(("127.0.0.1", HUB_PORT), timeout=3).close()

def net_out():
    socket.create_connection(("1.1.1.1", 53), timeout=3).close()

def secrets_():
    for p in ("/etc/shadow", "/root/.ssh/id_rsa", "/root/.config/vf/hub.json"):
        if os.path.exists(p):
            open(p).read()
            return
    if any(k.startswith("VF_HUB") for k in os.environ):
        return
    raise PermissionError("nothing to read")

def write_outside():
    for d in ("/work", "/root", "/home", "/var/tmp", "/opt/python/site-packages"):
        try:
            with open(os.path.join(d, "vf-hostile-" + MARK), "w") as fh:
                fh.write("x")
            return
        except OSError:
            continue
    raise PermissionError("no writable folder outside the work dir")

def fork_bomb():
    children = []
    try:
        for _ in range(100000):
            pid = os.fork()
            if pid == 0:
                import time
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError:
        raise OSError(f"stopped after {{len(children)}} processes")
    finally:
        for pid in children:
            try:
                os.kill(pid, 9)
            except OSError:
                pass

def load_environment(**kwargs):
    attempt("network to the worker's host", net)
    attempt("network to the internet", net_out)
    attempt("secrets", secrets_)
    attempt("write outside the work dir", write_outside)
    attempt("fork bomb", fork_bomb)
    # a process meant to outlive the check
    subprocess.Popen(["/bin/sh", "-c", "exec -a vf-hostile-" + MARK + " sleep 600"], start_new_session=True)
    rows = [{{"question": "What is 2+2?", "answer": "4"}}]
    def correct(completion, answer, **_):
        blob = bytearray(64 * 1024 ** 3)  # a memory bomb inside the reward function
        return 1.0
    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[correct]))
"""


@dataclass
class Hub:
    proc: HubProcess
    admin: str
    worker_token: str
    root: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        return self.proc.client(token if token is not None else self.admin)


def write_env(root: Path, name: str, version: str, source: str) -> Path:
    """An environment project (entry point named ``name``) whose module is ``source``."""
    mod = name.replace("-", "_")
    project = root / f"{name}-{version}"
    (project / mod).mkdir(parents=True)
    (project / mod / "__init__.py").write_text(textwrap.dedent(source))
    (project / "README.md").write_text(f"# {name}\n\nA check test environment.\n")
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{name}"
            version = "{version}"
            description = "A check test environment"
            readme = "README.md"
            requires-python = ">=3.10"
            dependencies = ["verifiers"]

            [project.entry-points."verifiers.environments"]
            "{name}" = "{mod}:load_environment"

            [tool.hatch.build.targets.wheel]
            packages = ["{mod}"]

            [tool.hatch.build.targets.sdist]
            include = ["{mod}", "README.md", "pyproject.toml"]
            """
        )
    )
    return project


def push(hub: Hub, name: str, source: str, version: str = "0.1.0") -> None:
    project = write_env(hub.root / "src" / uuid.uuid4().hex[:8], name, version, source)
    wheel, sdist = build_project(project, hub.root / "dist")
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (wheel, sdist)]
    with hub.client() as c:
        r = c.post(f"/api/v1/environments/admin/{name}/versions", files=files)
    assert r.status_code == 201, r.text


def start_worker(hub: Hub, name: str, *extra: str, timeout: float = 60) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB")}
    env["VF_HUB_WORKER_TOKEN"] = hub.worker_token
    log = open(hub.root / f"worker-{name}.log", "ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hub",
            "worker",
            "--hub",
            hub.proc.url,
            "--name",
            name,
            "--poll-interval",
            "0.3",
            "--timeout",
            str(timeout),
            "--memory-mb",
            "3072",
            *extra,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
    )
    log.close()
    hub.workers.append(proc)
    return proc


def checks_of(hub: Hub, name: str, version: str = "0.1.0") -> list[dict]:
    with hub.client() as c:
        r = c.get(f"/api/v1/environments/admin/{name}/versions/{version}/checks")
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(
    hub: Hub, name: str, statuses: tuple[str, ...], timeout: float = 400.0, version: str = "0.1.0"
) -> dict:
    """The newest check once its status is one of ``statuses`` (a generous bound, not a timing test)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = checks_of(hub, name, version)
        if runs and runs[0]["status"] in statuses:
            return runs[0]
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in hub.root.glob("worker-*.log"))
            raise AssertionError(f"{name}: still {runs[:1]} \n{logs}")
        time.sleep(0.5)


def host_processes_named(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    yield from checked_hub(
        tmp_path_factory.mktemp("checks"), {"VF_HUB_CHECK_LEASE_SECONDS": "8", "VF_HUB_CHECK_MAX_ATTEMPTS": "3"}
    )


def checked_hub(root: Path, extra_env: dict[str, str], user: str = "checker") -> Iterator[Hub]:
    """A running hub with a worker token of its own account; the workers a test starts on it
    (``start_worker``) and the hub stop when the generator ends."""
    from hub.core import Hub as HubCore

    proc = run_hub(root / "data", extra_env=extra_env)
    core = HubCore(make_settings(root / "data"))
    try:
        account, _ = core.accounts.create_user(user)
        worker_token, _tok = core.accounts.create_token(account.id, name="test worker", scope="worker")
    finally:
        core.close()
    h = Hub(proc, proc.admin_token, worker_token, root)
    try:
        yield h
    finally:
        for w in h.workers:
            if w.poll() is None:
                w.terminate()
        for w in h.workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
        proc.stop()

CASES = {
    "chk-good": (GOOD, "passed", None),
    "chk-import-fails": (IMPORT_FAILS, "failed", "a_module_nobody_ships"),
    "chk-reward-raises": (REWARD_RAISES, "failed", "ZeroDivisionError"),
    "chk-empty-dataset": (EMPTY_DATASET, "failed", "no rows"),
    "chk-hangs": (HANGS, "failed", "wall clock"),
}


@pytest.fixture(scope="module")
def verdicts(hub: Hub) -> dict[str, dict]:
    """Push every case (and the hostile environment), run two workers, collect the verdicts."""
    for name, (source, _status, _why) in CASES.items():
        push(hub, name, source)
    push(hub, "chk-hostile", HOSTILE.format(mark=MARK, hub_port=hub.proc.port))
    for name in [*CASES, "chk-hostile"]:
        assert checks_of(hub, name)[0]["status"] in ("queued", "running")  # queued by the push itself
    # a check here takes a few seconds (its install is a separate limit): 25 s of wall clock is
    # room enough for a loaded machine, and is how long the hanging case holds its worker
    start_worker(hub, "w1", timeout=25)
    start_worker(hub, "w2", timeout=25)
    return {name: wait_for(hub, name, ("passed", "failed", "error")) for name in [*CASES, "chk-hostile"]}


@pytest.mark.parametrize("name", list(CASES))
def test_verdict(hub: Hub, verdicts: dict[str, dict], name: str) -> None:
    _source, status, why = CASES[name]
    run = verdicts[name]
    assert run["status"] == status, run
    if why:
        assert why in (run["reason"] or "") + run["log_tail"], run
    assert run["attempts"] == 1  # each job ran once, on one worker
    with hub.client() as c:
        version = c.get(f"/api/v1/environments/admin/{name}/versions/0.1.0").json()
    assert version["check"]["status"] == status
    assert version["check"]["id"] == run["id"]


def test_passed_report_says_what_ran(verdicts: dict[str, dict]) -> None:
    run = verdicts["chk-good"]
    report = run["report"]
    assert report["env_args"] == {}
    assert report["num_rollouts"] == 4 and report["rewards"] == [1.0, 1.0, 1.0, 1.0]
    assert any("<answer>4</answer>" in r for r in report["scripted_replies"])
    assert report["python_version"].startswith("3.")
    import importlib.metadata

    assert report["verifiers_version"] == importlib.metadata.version("verifiers")
    assert report["sandbox"] == "bwrap"
    assert report["duration_s"] > 0
    assert "Successfully installed chk-good-0.1.0" in run["log_tail"]


def test_two_workers_shared_the_queue(verdicts: dict[str, dict]) -> None:
    workers = {run["worker"] for run in verdicts.values()}
    assert workers == {"w1", "w2"}, workers


def test_hostile_environment_fails_and_touches_nothing(hub: Hub, verdicts: dict[str, dict]) -> None:
    run = verdicts["chk-hostile"]
    assert run["status"] == "failed", run
    log = run["log_tail"]
    assert "ESCAPE" not in log, log
    for attack in (
        "network to the worker's host",
        "network to the internet",
        "secrets",
        "write outside",
        "fork bomb",
    ):
        assert f"blocked: {attack}" in log, (attack, log)
    for folder in ("/work", "/root", "/home", "/var/tmp", "/tmp"):
        assert not (Path(folder) / f"vf-hostile-{MARK}").exists()
    assert host_processes_named(f"vf-hostile-{MARK}") == []  # nothing left running on the host
    assert all(w.poll() is None for w in hub.workers)  # both workers survived it


def test_worker_tokens_only_claim_and_report(hub: Hub, verdicts: dict[str, dict]) -> None:
    with hub.client(hub.worker_token) as c:
        assert c.get("/api/v1/whoami").status_code == 403
        assert c.get("/api/v1/environments/admin/chk-good").status_code == 403
        assert c.get("/simple/").status_code == 403  # (public pages answer it as anyone else)
        assert c.get("/admin/chk-good", headers={"Accept": "text/html"}).status_code == 403
        bogus = {"lease_token": "0" * 32, "status": "passed"}
        run_id = verdicts["chk-good"]["id"]
        assert c.post(f"/api/v1/check-jobs/{run_id}/report", json=bogus).status_code == 409
        assert (
            c.post(f"/api/v1/check-jobs/{run_id}/heartbeat", json={"lease_token": "0" * 32}).status_code
            == 409
        )
        assert (
            c.get(f"/api/v1/check-jobs/{run_id}/wheel", headers={"X-VF-Lease": "0" * 32}).status_code == 404
        )
    with hub.client() as c:  # an admin's write token is no worker token
        assert c.post("/api/v1/check-jobs/claim", json={}).status_code == 403
    # the verdict stands
    assert checks_of(hub, "chk-good")[0]["status"] == "passed"


def test_recheck_keeps_history(hub: Hub, verdicts: dict[str, dict]) -> None:
    with hub.client() as c:
        r = c.post("/api/v1/environments/admin/chk-good/versions/0.1.0/checks")
        assert r.status_code == 201, r.text
        assert c.post("/api/v1/environments/admin/chk-good/versions/0.1.0/checks").status_code == 409
        alice = c.post("/api/v1/users", json={"name": "alice"}).json()["token"]
    with hub.client(alice) as c:
        assert c.post("/api/v1/environments/admin/chk-good/versions/0.1.0/checks").status_code == 403
    wait_for(hub, "chk-good", ("passed", "failed", "error"))
    runs = checks_of(hub, "chk-good")
    assert [r["status"] for r in runs] == ["passed", "passed"]
    assert runs[0]["trigger"] == "recheck" and runs[1]["trigger"] == "publish"


def _vf(hub: Hub, tmp: Path) -> VF:
    work = tmp / "work"
    work.mkdir(parents=True, exist_ok=True)
    return VF(fresh_venv(tmp / "venv"), tmp / "config", hub.proc.url, work, hub.admin)


def test_vf_install_refuses_a_failed_version(hub: Hub, verdicts: dict[str, dict], tmp_path: Path) -> None:
    vf = _vf(hub, tmp_path)
    res = vf("install", "admin/chk-reward-raises")
    assert res.code != 0
    assert "admin/chk-reward-raises@0.1.0 failed the hub's check" in res.text, res.text
    assert "ZeroDivisionError" in res.text and "--allow-unverified" in res.text
    assert vf.python_run("import chk_reward_raises").code != 0  # nothing was installed
    res = vf("install", "admin/chk-reward-raises", VF_ALLOW_UNVERIFIED="1")
    assert res.code == 0, res.text
    assert "installing anyway" in res.text
    assert vf.python_run("import chk_reward_raises").code == 0
    res = vf("install", "admin/chk-good")  # a passed version installs without a word about it
    assert res.code == 0 and "not verified" not in res.text and "failed" not in res.text, res.text
    info = vf("info", "admin/chk-reward-raises")
    assert info.code == 0 and "failed: errors: reward:broken: ZeroDivisionError" in info.text, info.text


def test_vf_push_wait(hub: Hub, verdicts: dict[str, dict], tmp_path: Path) -> None:
    vf = _vf(hub, tmp_path)
    good = write_env_package(tmp_path / "src", "chk-pushed-good", "1.0.0")
    res = vf("push", str(good), "--wait", timeout=600)
    assert res.code == 0, res.text
    assert "check:   passed" in res.text
    bad = write_env_package(tmp_path / "src", "chk-pushed-bad", "1.0.0", reward_body="raise KeyError('nope')")
    res = vf("push", str(bad), "--no-check", "--wait", timeout=600)  # the local check would refuse it
    assert res.code == 1, res.text
    assert "check:   failed" in res.text and "KeyError" in res.text


@pytest.mark.browser
def test_page_shows_the_badges(hub: Hub, verdicts: dict[str, dict]) -> None:
    from playwright.sync_api import expect

    from tests.support.services import start_chromium

    session = start_chromium()
    try:
        page = session.browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{hub.proc.url}/admin/chk-good")
        expect(page.locator("#check-badge")).to_have_text("check: passed")
        expect(page.locator("#versions .check-passed")).to_have_text("passed")
        report = page.locator("#check-report")
        expect(report).to_contain_text("[1.0, 1.0, 1.0, 1.0]")  # the rewards
        expect(report).to_contain_text("{}")  # default load arguments
        import importlib.metadata

        expect(report).to_contain_text(importlib.metadata.version("verifiers"))
        page.goto(f"{hub.proc.url}/admin/chk-hangs")
        expect(page.locator("#check-badge")).to_have_text("check: failed")
        expect(page.locator("#versions .check-failed")).to_have_text("failed")
        expect(page.locator("#check-reason")).to_contain_text("wall clock")
        expect(page.locator("#check-log")).to_be_visible()
    finally:
        session.stop()


def test_killed_worker_loses_its_lease(hub: Hub, verdicts: dict[str, dict]) -> None:
    for w in hub.workers:  # this test runs its own workers
        w.terminate()
        w.wait(timeout=30)
    push(hub, "chk-slow", SLOW)
    victim = start_worker(hub, "victim")
    deadline = time.monotonic() + 300
    while not (
        checks_of(hub, "chk-slow")[0].get("worker") == "victim" and host_processes_named("admin/chk-slow")
    ):
        assert time.monotonic() < deadline, (hub.root / "worker-victim.log").read_text()
        time.sleep(0.3)
    os.kill(victim.pid, signal.SIGKILL)  # mid-check: its sandboxed run is under way
    victim.wait(timeout=30)
    deadline = time.monotonic() + 60
    while host_processes_named("admin/chk-slow"):  # the sandbox dies with its worker
        assert time.monotonic() < deadline, "the killed worker's sandbox is still running"
        time.sleep(0.2)
    start_worker(hub, "rescuer")
    run = wait_for(hub, "chk-slow", ("passed", "failed", "error"))
    assert run["status"] == "passed", run
    assert run["attempts"] == 2 and run["worker"] == "rescuer"
    assert "attempt 1 on worker 'victim' lost its lease" in run["log_tail"]
    # the killed worker's sandbox died with it: nothing of that check is still running
    assert host_processes_named("admin/chk-slow") == []


def test_serve_with_worker(tmp_path: Path) -> None:
    """The embedded default: `vf hub serve --with-worker` checks pushes with no other set-up."""
    from hub.testing import free_port, hub_env

    port = free_port()
    admin = "vfh_" + secrets.token_urlsafe(32)
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hub",
                "serve",
                "--with-worker",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=hub_env(tmp_path / "data", admin_token=admin),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
        )
    handle = HubProcess(f"http://127.0.0.1:{port}", port, admin, tmp_path / "data", proc, log_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(handle.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        h = Hub(handle, admin, "", tmp_path)
        push(h, "chk-embedded", GOOD)
        run = wait_for(h, "chk-embedded", ("passed", "failed", "error"))
        assert run["status"] == "passed", (run, log_path.read_text()[-3000:])
        # The embedded worker never had the admin token, nor its own token where others can read it
        # (its environment, its command line): it got the token on a pipe.
        (worker_pid,) = host_processes_named(f"http://127.0.0.1:{port}")
        environ = Path(f"/proc/{worker_pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{worker_pid}/cmdline").read_bytes()
        assert admin.encode() not in environ and admin.encode() not in cmdline
        assert b"VF_HUB_ADMIN_TOKEN" not in environ and b"VF_HUB_WORKER_TOKEN" not in environ
        assert b"vfh_" not in environ and b"vfh_" not in cmdline
        assert b"--token-fd" in cmdline
        with h.client() as c:  # the job ran under the hub's own worker account (seen by an admin)
            assert c.get("/api/v1/environments/admin/chk-embedded/versions/0.1.0/checks").json()[0]["worker"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while host_processes_named(f"http://127.0.0.1:{port}"):  # the worker's --hub argument
        assert time.monotonic() < deadline, "the worker outlived `serve`"
        time.sleep(0.2)
