"""The hub's side of "nothing of an environment runs outside the sandbox" (issue 22, items 1, 3, 7, 9,
10, 11), against the in-process hub on SQLite and on a real PostgreSQL:

* uploads whose metadata has direct references (``name @ URL``, a ``file:`` path) are refused, in a
  wheel's METADATA, an sdist's PKG-INFO and its pyproject.toml, with one clear error and nothing kept;
* a version's second file must carry the same metadata, empty fields included;
* every account name the hub itself uses is reserved;
* the check queue is fair across owners and bounds each owner's running jobs;
* a worker token is useless outside its own claims; viewers never see the worker's host;
* a job's hub dependencies are the same owner's environments, resolved by the hub.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

import pytest
from sqlalchemy import update

from hub import checks
from hub.auth import add_token
from hub.models import CheckRun
from hub.services.accounts import add_user
from tests.hub.helpers import HubClient, Member, PackageFactory, make_sdist, make_wheel

DIRECT = [
    "evil @ https://attacker.example/evil-1.0.tar.gz",
    "evil @ file:///tmp/evil",
    "evil @ git+https://attacker.example/evil.git",
]


def _worker_token(hub: HubClient, user: str | None = None) -> str:
    core = hub.hub
    with core.db.session() as s:
        if user is None:
            account = checks.system_worker(core, s)
        else:
            account, _first = add_user(s, user)
        secret, _tok = add_token(s, account, scope="worker")
    return secret


# ------------------------------------------------------------------------------- direct references
@pytest.mark.parametrize("ref", DIRECT)
def test_direct_references_are_refused_in_every_metadata_file(hub: HubClient, ref: str) -> None:
    alice = hub.user("alice")
    before = hub.row_counts()
    uploads = {
        "wheel METADATA": [make_wheel("dref-env", requires=[ref])],
        "sdist PKG-INFO": [make_sdist("dref-env", requires=[ref])],
        "pyproject dependencies": [
            make_sdist("dref-env", pyproject=f'[project]\nname = "dref-env"\nversion = "0.1.0"\ndependencies = ["{ref}"]\n')
        ],
        "pyproject optional dependencies": [
            make_sdist(
                "dref-env",
                pyproject=(
                    '[project]\nname = "dref-env"\nversion = "0.1.0"\n'
                    f'[project.optional-dependencies]\nextra = ["{ref}"]\n'
                ),
            )
        ],
        "build-system requires": [
            make_sdist(
                "dref-env",
                pyproject=f'[build-system]\nrequires = ["{ref}"]\n[project]\nname = "dref-env"\nversion = "0.1.0"\n',
            )
        ],
    }
    for where, files in uploads.items():
        r = hub.publish_files("alice", "dref-env", files, alice)
        assert r.status_code == 400, (where, r.status_code, r.text)
        assert "direct reference" in r.json()["detail"], (where, r.text)
    # twine's path refuses them too
    fn, data = make_wheel("dref-env", requires=[ref])
    r = hub.client.post(
        "/legacy/", auth=("__token__", alice), files={"content": (fn, data)}, data={":action": "file_upload"}
    )
    assert r.status_code == 400 and "direct reference" in r.text, r.text
    assert hub.row_counts() == before  # nothing half-written
    assert hub.stored_keys() == [] and hub.temp_files() == []
    # by name, the same dependency is fine
    ok = hub.publish_files("alice", "dref-env", [make_wheel("dref-env", requires=["evil>=1"])], alice)
    assert ok.status_code == 201, ok.text


# ------------------------------------------------------------------------------- the counterpart
def test_counterpart_metadata_is_compared_even_when_empty(hub: HubClient) -> None:
    alice = hub.user("alice")
    # a wheel without dependencies, then an sdist with some: two different releases
    assert hub.publish_files("alice", "cp-env", [make_wheel("cp-env")], alice).status_code == 201
    r = hub.publish_files("alice", "cp-env", [make_sdist("cp-env", requires=["numpy>=1"])], alice)
    assert r.status_code == 409 and "dependencies" in r.text, r.text
    # and the other way round
    assert hub.publish_files("alice", "cp-env", [make_sdist("cp-env", "0.2.0", requires=["numpy>=1"])], alice).status_code == 201
    r = hub.publish_files("alice", "cp-env", [make_wheel("cp-env", "0.2.0")], alice)
    assert r.status_code == 409 and "dependencies" in r.text, r.text
    # both in one request must agree as well
    r = hub.publish_files("alice", "cp-env", [make_wheel("cp-env", "0.3.0"), make_sdist("cp-env", "0.3.0", requires=["x"])], alice)
    assert r.status_code == 400 and "disagree" in r.text, r.text
    # the same metadata joins (the requirement spelled differently is the same requirement)
    assert hub.publish_files("alice", "cp-env", [make_wheel("cp-env", "0.4.0", requires=["numpy >= 1"])], alice).status_code == 201
    assert hub.publish_files("alice", "cp-env", [make_sdist("cp-env", "0.4.0", requires=["numpy>=1"])], alice).status_code == 201
    files = hub.get("/api/v1/environments/alice/cp-env/versions/0.1.0").json()["files"]
    assert [f["kind"] for f in files] == ["wheel"]


# ------------------------------------------------------------------------------- system names
def test_every_system_account_name_is_reserved(hub: HubClient) -> None:
    from hub.owners import RESERVED_OWNERS, SYSTEM_ACCOUNTS

    assert checks.SYSTEM_WORKER in SYSTEM_ACCOUNTS and "admin" in SYSTEM_ACCOUNTS
    assert SYSTEM_ACCOUNTS <= RESERVED_OWNERS
    # Every account name the hub's own code creates or looks up is one of them.
    root = Path(__file__).resolve().parents[2] / "hub"
    used = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r"Owner\.name == \"([a-z0-9-]+)\"", text))
        used |= set(re.findall(r"^SYSTEM_[A-Z]+ = \"([a-z0-9-]+)\"", text, re.M))
    assert used and used <= SYSTEM_ACCOUNTS, used
    alice = hub.user("alice")
    for name in sorted(SYSTEM_ACCOUNTS | {"Check_Worker", "check.worker"}):
        r = hub.post("/api/v1/users", hub.admin_token, json={"name": name})
        assert r.status_code == 400 and "reserved" in r.text, (name, r.text)
        r = hub.post("/api/v1/orgs", alice, json={"name": name})
        assert r.status_code == 400 and "reserved" in r.text, (name, r.text)
    # the hub's own account is made by the hub, and a worker token of it works
    token = _worker_token(hub)
    assert hub.post("/api/v1/check-jobs/claim", token, json={}).json() == {"job": None}


def test_system_worker_refuses_an_organisation_holding_its_name(hub: HubClient) -> None:
    """A database from before the reservation, where an org took the name: one clear error."""
    from hub.errors import HubError
    from hub.models import Owner

    core = hub.hub
    with core.db.session() as s:
        s.add(Owner(name="check-worker", display_name="check-worker", kind="org", is_admin=False, description=""))
    with core.db.session() as s, pytest.raises(HubError, match="organisation or an administrator"):
        checks.embedded_worker_token(core, s)


# ------------------------------------------------------------------------------- fairness
def _publish(hub: HubClient, packages: PackageFactory, owner: str, token: str, name: str) -> None:
    r = hub.publish(owner, packages.get(name), token)
    assert r.status_code == 201, r.text


def test_one_owners_hanging_versions_do_not_starve_another(hub: HubClient, packages: PackageFactory) -> None:
    core = hub.hub
    core.settings.check_max_running_per_owner = 2
    alice, bob = hub.user("alice"), hub.user("bob")
    for i in range(5):  # alice pushes five versions first (say, each hangs until its wall clock)
        _publish(hub, packages, "alice", alice, f"fair-alice-{i}")
    _publish(hub, packages, "bob", bob, "fair-bob-0")
    _publish(hub, packages, "bob", bob, "fair-bob-1")
    order = []
    for i in range(4):
        job = checks.claim(core.db, core.settings, f"w{i}")
        assert job is not None
        order.append(job["owner"])
    # round robin over owners, then alice is at her bound: two running, no third
    assert order == ["alice", "bob", "alice", "bob"], order
    assert checks.claim(core.db, core.settings, "w5") is None
    with core.db.session() as s:
        running = s.query(CheckRun).filter(CheckRun.status == "running").all()
        assert sorted(r.worker for r in running) == ["w0", "w1", "w2", "w3"]
        first = next(r for r in running if r.worker == "w0")
        # alice's first one finishes: she gets the next slot (bob has nothing queued)
        job_id, lease = first.id, first.lease_token
    assert checks.finish(core.db, core.settings, job_id, lease, "failed", "hangs", "", {}) is not None
    job = checks.claim(core.db, core.settings, "w6")
    assert job is not None and job["owner"] == "alice"
    # a lease that ran out frees its owner's slot too
    with core.db.session() as s:
        s.execute(update(CheckRun).where(CheckRun.worker == "w2").values(lease_expires_at=dt.datetime(2000, 1, 1)))
    job = checks.claim(core.db, core.settings, "w7")
    assert job is not None and job["owner"] == "alice"
    assert checks.claim(core.db, core.settings, "w8") is None


def test_the_owner_bound_holds_under_racing_claims(hub: HubClient, packages: PackageFactory) -> None:
    import threading

    core = hub.hub
    core.settings.check_max_running_per_owner = 2
    alice = hub.user("alice")
    for i in range(6):
        _publish(hub, packages, "alice", alice, f"race-alice-{i}")
    barrier = threading.Barrier(6)
    got: list[dict] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        barrier.wait()
        job = checks.claim(core.db, core.settings, f"r{i}")
        if job is not None:
            with lock:
                got.append(job)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == 2, [j["name"] for j in got]


# ------------------------------------------------------------------------------- worker tokens
def test_a_worker_token_is_useless_outside_its_own_claims(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    r = hub.publish("alice", packages.get("scope-private"), alice, private=True)
    assert r.status_code == 201, r.text
    mallory = _worker_token(hub, "mallory")  # a worker token of an ordinary user (stolen, say)
    system = _worker_token(hub)
    other_system = _worker_token(hub)
    # mallory's token claims no private job of alice's
    assert hub.post("/api/v1/check-jobs/claim", mallory, json={"worker": "m"}).json()["job"] is None
    job = hub.post("/api/v1/check-jobs/claim", system, json={"worker": "sys"}).json()["job"]
    assert job is not None and job["env"] == "alice/scope-private"
    lease = {"X-VF-Lease": job["lease_token"]}
    body = {"lease_token": job["lease_token"], "status": "passed"}
    # even with the lease, another token can neither download, heartbeat nor report
    for token in (mallory, other_system):
        assert hub.get(job["wheel"]["url"], token, headers=lease).status_code == 404
        assert hub.post(f"/api/v1/check-jobs/{job['id']}/heartbeat", token, json=body).status_code == 409
        assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", token, json=body).status_code == 409
    # the claim's own token downloads the job's files, and only those
    r = hub.get(job["wheel"]["url"], system, headers=lease)
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == job["wheel"]["sha256"]
    other = hub.publish("alice", packages.get("scope-other"), alice, private=True)
    assert other.status_code == 201
    other_sha = other.json()["files"][0]["sha256"]
    assert hub.get(f"/api/v1/check-jobs/{job['id']}/files/{other_sha}", system, headers=lease).status_code == 404
    # a private file and a missing one look alike to a worker token on the index's file route
    private_url = next(f["url"] for f in hub.get(
        "/api/v1/environments/alice/scope-private/versions/0.1.0", alice).json()["files"])  # fmt: skip
    missing_url = re.sub(r"/files/[0-9a-f]{2}/[0-9a-f]{64}/", "/files/00/" + "0" * 64 + "/", private_url)
    assert missing_url != private_url
    answers = [hub.get(u, system) for u in (private_url, missing_url)]
    assert [a.status_code for a in answers] == [404, 404], [a.text for a in answers]
    assert answers[0].json() == answers[1].json()
    # the verdict, reported by the claim's own token, stands; viewers do not see the worker
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", system, json=body).status_code == 200
    shown = hub.get("/api/v1/environments/alice/scope-private/versions/0.1.0/checks", alice).json()[0]
    assert shown["status"] == "passed" and shown["worker"] is None
    seen_by_admin = hub.get("/api/v1/environments/alice/scope-private/versions/0.1.0/checks", hub.admin_token)
    assert seen_by_admin.json()[0]["worker"] == "sys"
    # an expired lease downloads nothing either
    job2 = hub.post("/api/v1/check-jobs/claim", system, json={"worker": "sys"}).json()["job"]
    assert job2 is not None
    with hub.hub.db.session() as s:
        s.execute(update(CheckRun).where(CheckRun.id == job2["id"]).values(lease_expires_at=dt.datetime(2000, 1, 1)))
    assert hub.get(job2["wheel"]["url"], system, headers={"X-VF-Lease": job2["lease_token"]}).status_code == 404


def test_check_details_show_viewers_no_host_details(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("host-env"), alice).status_code == 201
    system = _worker_token(hub)
    job = hub.post("/api/v1/check-jobs/claim", system, json={"worker": "build-host-7:4242"}).json()["job"]
    # a report is read against a strict schema: no field it does not know (like a host name)
    body = {"lease_token": job["lease_token"], "status": "passed", "report": {"worker": "build-host-7:4242", "rewards": [1.0]}}
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", system, json=body).status_code == 422
    body["report"] = {"rewards": [1.0], "checks": [{"name": "load", "ok": True, "detail": "x" * 3000}]}
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", system, json=body).status_code == 422
    body["report"] = {"rewards": [1.0]}
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", system, json=body).status_code == 200
    for viewer in (None, alice):
        runs = hub.get("/api/v1/environments/alice/host-env/versions/0.1.0/checks", viewer).json()
        assert "build-host-7" not in json.dumps(runs), runs
        page = hub.get("/alice/host-env", viewer)
        assert page.status_code == 200 and "build-host-7" not in page.text
    # a report stored by an older worker (its host in it, fields the page did not expect) reads cleanly
    with hub.hub.db.session() as s:
        s.execute(update(CheckRun).where(CheckRun.id == job["id"]).values(
            report_json=json.dumps({"worker": "build-host-7:4242", "rewards": "not a list"})))  # fmt: skip
    runs = hub.get("/api/v1/environments/alice/host-env/versions/0.1.0/checks").json()
    assert "build-host-7" not in json.dumps(runs) and runs[0]["report"] == {}
    page = hub.get("/alice/host-env")
    assert page.status_code == 200 and "build-host-7" not in page.text


# ------------------------------------------------------------------------------- hub dependencies
def test_jobs_carry_the_same_owners_hub_dependencies(hub: HubClient, packages: PackageFactory) -> None:
    alice, bob = hub.user("alice"), hub.user("bob")
    core = hub.hub
    core.settings.check_max_running_per_owner = 10
    for v in ("1.0.0", "1.5.0", "2.0.0"):
        assert hub.publish("alice", packages.get("hd-dep", v), alice).status_code == 201
    assert hub.publish("alice", packages.get("hd-deep", "1.0.0"), alice).status_code == 201
    r = hub.publish("alice", packages.get("hd-mid", "1.0.0", dependencies=["hd-deep>=1"]), alice)
    assert r.status_code == 201
    assert hub.publish("bob", packages.get("hd-bobs", "1.0.0"), bob).status_code == 201
    env = packages.get("hd-env", "1.0.0", dependencies=["hd-dep<2", "hd-mid", "hd-bobs", "numpy>=1"])
    assert hub.publish("alice", env, alice).status_code == 201
    system = _worker_token(hub)
    with core.db.session() as s:  # only hd-env's job is of interest
        s.execute(update(CheckRun).where(CheckRun.status == "queued").values(status="passed"))
        from hub.models import Environment, Version

        env_row = s.query(Environment).filter(Environment.name == "hd-env").one()
        ver = s.query(Version).filter(Version.env_id == env_row.id).one()
        checks.enqueue(s, ver, trigger="recheck")
    job = hub.post("/api/v1/check-jobs/claim", system, json={}).json()["job"]
    assert job["env"] == "alice/hd-env" and job["unresolvable"] is None
    deps = {d["env"]: d["version"] for d in job["hub_dependencies"]}
    # the same owner's environments, transitively; bob's hd-bobs and numpy are the public index's
    assert deps == {"alice/hd-dep": "1.5.0", "alice/hd-mid": "1.0.0", "alice/hd-deep": "1.0.0"}, deps
    lease = {"X-VF-Lease": job["lease_token"]}
    for d in job["hub_dependencies"]:
        r = hub.get(d["url"], system, headers=lease)
        assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == d["sha256"]


def test_an_unsatisfiable_hub_dependency_is_the_environments_fault(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("un-dep", "1.0.0"), alice).status_code == 201
    assert hub.publish("alice", packages.get("un-env", "1.0.0", dependencies=["un-dep>=5"]), alice).status_code == 201
    system = _worker_token(hub)
    jobs = [hub.post("/api/v1/check-jobs/claim", system, json={}).json()["job"] for _ in range(2)]
    job = next(j for j in jobs if j and j["name"] == "un-env")
    assert "un-dep>=5" in job["unresolvable"] and job["hub_dependencies"] == []


def _mix(name: str, environments: str, version: str = "1.0.0") -> list[tuple[str, bytes]]:
    """A wheel and an sdist whose pyproject.toml lists ``[tool.verifiers] environments``."""
    pyproject = f'[project]\nname = "{name}"\nversion = "{version}"\n\n[tool.verifiers]\nenvironments = {environments}\n'
    return [make_wheel(name, version), make_sdist(name, version, pyproject=pyproject)]


def test_environments_loaded_by_id_come_from_the_owner_on_the_hub_only(hub: HubClient, packages: PackageFactory) -> None:
    """``[tool.verifiers] environments``: hub-only dependencies. The check's job and the install
    commands take them from the same owner on the hub; one the owner does not publish is never taken
    from anywhere else (the check says why); the list is fixed with the version."""
    alice, bob = hub.user("alice"), hub.user("bob")
    hub.hub.settings.check_max_running_per_owner = 10
    for v in ("1.0.0", "2.0.0"):
        assert hub.publish("alice", packages.get("le-member", v), alice).status_code == 201
    assert hub.publish("bob", packages.get("le-bobs", "1.0.0"), bob).status_code == 201
    r = hub.publish_files("alice", "le-mix", _mix("le-mix", '["le-member<2"]'), alice)
    assert r.status_code == 201, r.text
    # bob publishes le-bobs, alice does not: her le-orphan may not take it (nor a public index's)
    r = hub.publish_files("alice", "le-orphan", _mix("le-orphan", '["le-bobs"]'), alice)
    assert r.status_code == 201, r.text
    detail = hub.get("/api/v1/environments/alice/le-mix/versions/1.0.0").json()
    assert detail["environments"] == ["le-member<2"] and detail["dependencies"] == []
    # the hub step of the pip and uv lines names it, so it comes from the hub index alone
    pip = detail["install_commands"]["pip"]
    assert len(pip) == 1 and pip[0].endswith("/alice/simple/ le-mix==1.0.0 'le-member<2'"), pip
    orphan = hub.get("/api/v1/environments/alice/le-orphan/versions/1.0.0").json()["install_commands"]["pip"]
    assert len(orphan) == 1 and "le-bobs" not in orphan[0] and "pypi" not in orphan[0], orphan

    system = _worker_token(hub)
    with hub.hub.db.session() as s:  # only the two mixtures' jobs are of interest
        from hub.models import Environment

        mixes = s.query(Environment.id).filter(Environment.name.in_(["le-mix", "le-orphan"]))
        s.execute(update(CheckRun).where(CheckRun.env_id.not_in(mixes)).values(status="passed"))
    jobs = {}
    for _ in range(2):
        job = hub.post("/api/v1/check-jobs/claim", system, json={}).json()["job"]
        jobs[job["name"]] = job
    assert jobs["le-mix"]["unresolvable"] is None
    assert {d["env"]: d["version"] for d in jobs["le-mix"]["hub_dependencies"]} == {"alice/le-member": "1.0.0"}
    assert jobs["le-orphan"]["hub_dependencies"] == []
    assert "le-bobs" in jobs["le-orphan"]["unresolvable"] and "does not publish" in jobs["le-orphan"]["unresolvable"]

    # published one file per request, wheel first (twine, uv publish): the sdist counterpart brings the
    # list, and the version is checked again with it; once set, it is fixed with the version
    assert hub.publish_files("alice", "le-late", [make_wheel("le-late", "1.0.0")], alice).status_code == 201
    late = _mix("le-late", '["le-member"]')[1:]
    assert hub.publish_files("alice", "le-late", late, alice).status_code == 201
    assert hub.get("/api/v1/environments/alice/le-late/versions/1.0.0").json()["environments"] == ["le-member"]
    with hub.hub.db.session() as s:
        from hub.models import Environment

        late_id = s.query(Environment.id).filter(Environment.name == "le-late").scalar()
        assert [r.trigger for r in s.query(CheckRun).filter(CheckRun.env_id == late_id).order_by(CheckRun.id)] == ["publish", "recheck"]
    assert hub.publish_files("alice", "le-other", _mix("le-other", '["le-member"]'), alice).status_code == 201
    other_sdist = _mix("le-other", '["le-bobs"]')[1:]
    r = hub.publish_files("alice", "le-other", other_sdist, alice)  # already has its sdist: refused as any second file
    assert r.status_code == 409, r.text


@pytest.mark.parametrize(
    "environments, words",
    [
        ('"le-member"', "must be a list"),
        ('["le-member @ https://example.com/x.whl"]', "direct reference"),
        ('["le-member; python_version < \'3\'"]', "extras or a marker"),
        ('["le-member[x]"]', "extras or a marker"),
        ('["le-member", "LE_Member"]', "twice"),
        ("[1]", "not a string"),
    ],
)
def test_a_bad_environments_list_is_refused_with_nothing_stored(
    hub: HubClient, environments: str, words: str
) -> None:
    alice = hub.user("alice")
    r = hub.publish_files("alice", "le-bad", _mix("le-bad", environments), alice)
    assert r.status_code == 400 and words in r.text, r.text
    assert hub.get("/api/v1/environments/alice/le-bad").status_code == 404


def test_member_helpers_still_build_valid_archives(hub: HubClient) -> None:
    """The builders' ``requires``/``pyproject`` options make valid uploads when nothing is hostile."""
    alice = hub.user("alice")
    files = [make_wheel("ok-env", requires=["numpy>=1"], members=[Member("ok_env/x.py", b"")]),
             make_sdist("ok-env", requires=["numpy>=1"])]  # fmt: skip
    r = hub.publish_files("alice", "ok-env", files, alice)
    assert r.status_code == 201, r.text
    assert hub.get("/api/v1/environments/alice/ok-env/versions/0.1.0").json()["dependencies"] == ["numpy>=1"]


def test_the_json_index_never_sends_the_key_old_pip_crashes_on(hub: HubClient, packages: PackageFactory) -> None:
    """pip 23.0 (Debian 12's, the sandbox's pip) crashes on a JSON ``dist-info-metadata`` object
    (PEP 714 renamed it ``core-metadata`` for that reason); the HTML page keeps both attributes."""
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("pep714-env"), alice).status_code == 201
    doc = hub.get("/simple/pep714-env/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}).json()
    wheel = next(f for f in doc["files"] if f["filename"].endswith(".whl"))
    assert "dist-info-metadata" not in wheel and wheel["core-metadata"]["sha256"]


def test_worker_token_cli_makes_tokens_of_the_system_account(tmp_path: Path) -> None:
    """``python -m hub worker-token`` (the documented way to equip workers elsewhere): each call a
    new token of ``check-worker``, none revoking another; they claim jobs and nothing else."""
    import os
    import secrets
    import subprocess
    import sys

    client = HubClient.create(tmp_path / "hub", database_url=None, admin_token="vfh_" + secrets.token_urlsafe(32))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB")}
        tokens = []
        for _ in range(2):
            res = subprocess.run([sys.executable, "-m", "hub", "worker-token", "--data", str(tmp_path / "hub")],
                                 capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
            assert res.returncode == 0, res.stderr
            tokens.append(res.stdout.strip())
        assert len(set(tokens)) == 2 and all(t.startswith("vfh_") for t in tokens)
        for token in tokens:
            assert client.post("/api/v1/check-jobs/claim", token, json={}).json() == {"job": None}
            assert client.get("/api/v1/whoami", token).status_code == 403
    finally:
        client.close()


# ---------------------------------------------------------------------- names, extras, private deps
@pytest.mark.parametrize(
    "filename_name",
    ["javascript:alert(document%2Edomain);%2Fx", "demo$({touch,pwned})", "v\u0435rifiers", "\ufb01le-env", "\u212aelvin"],
)
def test_a_distribution_name_outside_pep_508_is_refused_on_upload(hub: HubClient, filename_name: str) -> None:
    """packaging's filename parsers let these through (an sdist's name is anything before the last
    ``-``; a wheel's is Unicode ``\\w``); the hub does not: a name reaches index links, install
    lines and shells, and a look-alike would pass the reserved names."""
    alice = hub.user("alice")
    before = hub.row_counts()
    _fn, sdist = make_sdist("plain-env", "1.0.0")
    wheel_name = filename_name.replace("-", "_")
    for filename, data in ((f"{filename_name}-1.0.0.tar.gz", sdist), (f"{wheel_name}-1.0.0-py3-none-any.whl", make_wheel("plain-env", "1.0.0")[1])):
        r = hub.publish_files("alice", "plain-env", [(filename, data)], alice)
        assert r.status_code == 400, (filename, r.status_code, r.text)
        assert "distribution name" in r.text or "invalid" in r.text
    # and a wheel whose METADATA Name is a look-alike of its ASCII filename's
    r = hub.publish_files("alice", "plain-env", [make_wheel("plain-env", "1.0.0", metadata_name="pl\u0430in-env")], alice)
    assert r.status_code == 400, r.text
    assert hub.row_counts() == before and hub.temp_files() == []


def test_more_requirements_than_the_cap_are_refused(hub: HubClient) -> None:
    from hub.archives import MAX_REQUIREMENTS

    alice = hub.user("alice")
    before = hub.row_counts()
    reqs = [f"dep{i}>=1" for i in range(MAX_REQUIREMENTS + 1)]
    r = hub.publish_files("alice", "many-reqs", [make_wheel("many-reqs", requires=reqs)], alice)
    assert r.status_code == 400 and f"at most {MAX_REQUIREMENTS}" in r.text, r.text
    assert hub.row_counts() == before
    assert hub.publish_files("alice", "many-reqs", [make_wheel("many-reqs", requires=reqs[:MAX_REQUIREMENTS])], alice).status_code == 201


def test_a_hub_dependency_behind_an_extra_comes_from_the_hub(hub: HubClient) -> None:
    """X needs ``hx-b[extra1]``; hx-b needs ``hx-c; extra == "extra1"``: hx-c is the owner's too, so
    the job pins it from the hub rather than leaving it to a public index."""
    alice = hub.user("alice")
    hub.hub.settings.check_max_running_per_owner = 10
    assert hub.publish_files("alice", "hx-c", [make_wheel("hx-c", "1.0.0")], alice).status_code == 201
    b = make_wheel("hx-b", "1.0.0", requires=['hx-c>=1; extra == "extra1"', 'hx-public; extra == "other"'])
    assert hub.publish_files("alice", "hx-b", [b], alice).status_code == 201
    assert hub.publish_files("alice", "hx-x", [make_wheel("hx-x", "1.0.0", requires=["hx-b[Extra1]"])], alice).status_code == 201
    system = _worker_token(hub)
    jobs = [hub.post("/api/v1/check-jobs/claim", system, json={}).json()["job"] for _ in range(3)]
    job = next(j for j in jobs if j and j["name"] == "hx-x")
    assert {d["env"] for d in job["hub_dependencies"]} == {"alice/hx-b", "alice/hx-c"}, job
    assert job["unresolvable"] is None


def test_a_private_hub_dependency_stays_with_those_who_may_read_it(hub: HubClient) -> None:
    """A public environment needing its owner's private one: another user's worker token never gets
    that job (nor the private wheel); the install advice for a caller who cannot read it never sends
    the name to the public index, and says an install needs access."""
    alice = hub.user("alice")
    hub.hub.settings.check_max_running_per_owner = 10
    assert hub.publish_files("alice", "pd-secret", [make_wheel("pd-secret", "1.0.0")], alice, private=True).status_code == 201
    r = hub.publish_files("alice", "pd-public", [make_wheel("pd-public", "1.0.0", requires=["pd-secret>=1", "numpy"])], alice)
    assert r.status_code == 201, r.text
    plain = hub.publish_files("alice", "pd-plain", [make_wheel("pd-plain", "1.0.0")], alice)
    assert plain.status_code == 201
    mallory = _worker_token(hub, "mallory")
    # mallory's worker skips pd-public (its dependency is private) but still gets alice's other public job
    got = hub.post("/api/v1/check-jobs/claim", mallory, json={"worker": "m"}).json()["job"]
    assert got is not None and got["name"] == "pd-plain", got
    assert hub.post("/api/v1/check-jobs/claim", mallory, json={"worker": "m"}).json()["job"] is None
    system = _worker_token(hub)
    jobs = [hub.post("/api/v1/check-jobs/claim", system, json={}).json()["job"] for _ in range(2)]
    job = next(j for j in jobs if j and j["name"] == "pd-public")
    assert [d["env"] for d in job["hub_dependencies"]] == ["alice/pd-secret"]
    anonymous = hub.get("/api/v1/environments/alice/pd-public/versions/1.0.0", None).json()["install_commands"]
    assert anonymous["needs_access"] is True and "pd-secret" not in " ".join(anonymous["pip"]) + anonymous["uv"]
    assert "numpy" in anonymous["pip"][0]
    own = hub.get("/api/v1/environments/alice/pd-public/versions/1.0.0", alice).json()["install_commands"]
    assert own["needs_access"] is False
    # a private dependency behind an extra nobody asks for does not make the install need access
    extra = make_wheel("pd-extra", "1.0.0", requires=['pd-secret>=1; extra == "gpu"'])
    assert hub.publish_files("alice", "pd-extra", [extra], alice).status_code == 201
    shown = hub.get("/api/v1/environments/alice/pd-extra/versions/1.0.0", None).json()["install_commands"]
    assert shown["needs_access"] is False and "pd-secret" not in " ".join(shown["pip"]) + shown["uv"]
    # ...but one who asks for that extra does: the hub says which extras (vf install refuses them)
    assert shown["needs_access_extras"] == ["gpu"] and "extra(s) gpu" in shown["note"]
    assert hub.get("/api/v1/environments/alice/pd-extra/versions/1.0.0", alice).json()["install_commands"][
        "needs_access_extras"] == []


def test_the_extras_a_requirement_applies_under() -> None:
    from packaging.requirements import Requirement

    from hub.queries import _marker_extras

    cases = {
        'c; extra == "GPU_Extra"': ["gpu-extra"],  # normalised, as pip compares them
        "c; 'gpu' == extra": ["gpu"],
        'c; extra == "a" or extra == "b"': ["a", "b"],
        'c; extra == "a" and python_version < "3"': [],  # never applies here
        'c; python_version >= "3"': [],
        "c": [],
    }
    assert {raw: _marker_extras(Requirement(raw)) for raw in cases} == cases


def test_index_links_and_the_vf_line_are_quoted(hub: HubClient) -> None:
    from hub.index import render_list
    from hub.queries import shlex

    page = render_list(["ok-env", "javascript:alert(1)"], "text/html").decode()
    assert 'href="ok-env/"' in page and 'href="javascript%3Aalert%281%29/"' in page
    assert shlex.quote("alice/x@1.0") == "alice/x@1.0"  # a valid id needs no quotes, so the line reads as before
