"""The check queue's guarantees (``hub/checks.py``), on SQLite and on a real PostgreSQL.

* a push of a wheel queues exactly one check; an sdist alone queues none;
* workers racing for jobs (threads released together by a barrier) never get the same job twice;
* a job whose worker stops heartbeating is claimed again, and after ``check_max_attempts`` lost
  leases it ends ``error``; a verdict from a claim that lost its lease is refused;
* a checker ``error`` is retried, a ``failed`` verdict is final; reports and logs are bounded.

Leases run out here because the test sets ``lease_expires_at`` into the past (no sleeping).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

from sqlalchemy import update

from hub import checks
from hub.auth import add_token
from hub.models import CheckRun
from tests.hub.helpers import HubClient, PackageFactory


def _expire(hub: HubClient, job_id: int) -> None:
    with hub.hub.db.session() as s:
        s.execute(
            update(CheckRun).where(CheckRun.id == job_id).values(lease_expires_at=dt.datetime(2000, 1, 1))
        )


def _publish(hub: HubClient, packages: PackageFactory, name: str) -> None:
    r = hub.publish("admin", packages.get(name), hub.admin_token)
    assert r.status_code == 201, r.text


def test_racing_workers_never_share_a_job(hub: HubClient, packages: PackageFactory) -> None:
    names = [f"queue-race-{i}" for i in range(6)]
    for name in names:
        _publish(hub, packages, name)
    core = hub.hub
    core.settings.check_max_running_per_owner = len(names)  # one owner here: the race, not the bound
    n_workers = 8
    barrier = threading.Barrier(n_workers)
    claimed: list[int] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        while True:
            job = checks.claim(core.db, core.settings, f"w{i}")
            if job is None:
                return
            with lock:
                claimed.append(job["id"])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    counts = Counter(claimed)
    assert len(counts) == len(names), counts  # every job was handed out ...
    assert set(counts.values()) == {1}, counts  # ... exactly once
    with core.db.session() as s:
        runs = s.query(CheckRun).all()
        assert {r.status for r in runs} == {"running"} and {r.attempts for r in runs} == {1}


def test_lost_leases_rerun_then_end_in_error(hub: HubClient, packages: PackageFactory) -> None:
    _publish(hub, packages, "queue-lease")
    core = hub.hub
    core.settings.check_max_attempts = 2
    first = checks.claim(core.db, core.settings, "a")
    assert first is not None and first["attempt"] == 1
    assert checks.claim(core.db, core.settings, "b") is None  # its lease holds
    assert checks.heartbeat(core.db, core.settings, first["id"], first["lease_token"])
    _expire(hub, first["id"])  # worker "a" died
    second = checks.claim(core.db, core.settings, "b")
    assert second is not None and second["id"] == first["id"] and second["attempt"] == 2
    assert second["lease_token"] != first["lease_token"]
    # the dead worker's claim can neither heartbeat nor report any more
    assert not checks.heartbeat(core.db, core.settings, first["id"], first["lease_token"])
    assert (
        checks.finish(core.db, core.settings, first["id"], first["lease_token"], "passed", "", "", {}) is None
    )
    _expire(hub, second["id"])  # worker "b" died too: attempts are used up
    assert checks.claim(core.db, core.settings, "c") is None
    with core.db.session() as s:
        run = s.get(CheckRun, first["id"])
        assert run is not None and run.status == "error" and run.lease_token is None
        assert "lost its worker 2 times" in run.reason
        assert "attempt 1 on worker 'a' lost its lease" in run.log_tail
        assert "attempt 2 on worker 'b' lost its lease" in run.log_tail


def test_checker_errors_retry_failures_are_final(hub: HubClient, packages: PackageFactory) -> None:
    _publish(hub, packages, "queue-verdicts")
    core = hub.hub
    job = checks.claim(core.db, core.settings, "a")
    assert job is not None
    run = checks.finish(
        core.db, core.settings, job["id"], job["lease_token"], "error", "sandbox missing", "", {}
    )
    assert run is not None and run.status == "queued"  # the checker's fault: tried again
    job = checks.claim(core.db, core.settings, "b")
    assert job is not None and job["attempt"] == 2
    huge_log = "x" * 10 + "y" * (core.settings.check_max_log_bytes * 3)
    report = {"rollouts": [{"reward": 1.0, "pad": "z" * 1000}] * 1000, "env_args": {}}
    run = checks.finish(
        core.db, core.settings, job["id"], job["lease_token"], "failed", "dataset: no rows", huge_log, report
    )
    assert run is not None and run.status == "failed" and run.finished_at is not None
    assert len(run.log_tail.encode()) <= core.settings.check_max_log_bytes + 100 and run.log_tail.endswith(
        "y"
    )
    assert len(run.report_json.encode()) <= core.settings.check_max_report_bytes
    assert checks.claim(core.db, core.settings, "c") is None  # a verdict is final


def test_sdist_alone_queues_nothing_wheel_queues_once(hub: HubClient, packages: PackageFactory) -> None:
    pkg = packages.get("queue-sdist-first")
    r = hub.publish("admin", pkg, hub.admin_token, which=("sdist",))
    assert r.status_code == 201, r.text
    v = hub.get(f"/api/v1/environments/admin/{pkg.normalized}/versions/0.1.0", hub.admin_token).json()
    assert v["check"] is None
    for _ in range(2):  # the wheel arrives (and again: idempotent)
        r = hub.publish("admin", pkg, hub.admin_token, which=("wheel",))
        assert r.status_code in (200, 201), r.text
    v = hub.get(f"/api/v1/environments/admin/{pkg.normalized}/versions/0.1.0").json()
    assert v["check"]["status"] == "queued"
    listed = hub.get(f"/api/v1/environments/admin/{pkg.normalized}/versions").json()
    assert listed[0]["check"]["id"] == v["check"]["id"]
    assert len(hub.get(f"/api/v1/environments/admin/{pkg.normalized}/versions/0.1.0/checks").json()) == 1


def test_worker_api_serves_the_job_wheel_of_a_private_environment(
    hub: HubClient, packages: PackageFactory
) -> None:
    import hashlib

    pkg = packages.get("queue-private")
    assert hub.publish("admin", pkg, hub.admin_token, private=True).status_code == 201
    core = hub.hub
    user, _ = core.accounts.create_user("queue-worker")
    stranger, _t = core.accounts.create_token(user.id, scope="worker")
    with core.db.session() as s:
        worker, _t = add_token(s, checks.system_worker(core, s), scope="worker")
    # another user's worker token checks public environments and its own only
    assert hub.post("/api/v1/check-jobs/claim", stranger, json={"worker": "x"}).json()["job"] is None
    assert hub.get("/api/v1/environments/admin/queue-private", worker).status_code == 403
    job = hub.post("/api/v1/check-jobs/claim", worker, json={"worker": "api"}).json()["job"]
    assert job["env"] == "admin/queue-private" and job["wheel"]["filename"] == pkg.wheel.name
    r = hub.get(job["wheel"]["url"], worker, headers={"X-VF-Lease": job["lease_token"]})
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == job["wheel"]["sha256"]
    assert hub.get(job["wheel"]["url"], worker, headers={"X-VF-Lease": "f" * 32}).status_code == 404
    assert (
        hub.get(job["wheel"]["url"], hub.admin_token, headers={"X-VF-Lease": job["lease_token"]}).status_code
        == 403
    )
    beat = hub.post(
        f"/api/v1/check-jobs/{job['id']}/heartbeat", worker, json={"lease_token": job["lease_token"]}
    )
    assert beat.status_code == 200
    body = {"lease_token": job["lease_token"], "status": "passed", "report": {"rewards": [1.0]}}
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", worker, json=body).status_code == 200
    assert hub.post(f"/api/v1/check-jobs/{job['id']}/report", worker, json=body).status_code == 409  # once
    v = hub.get("/api/v1/environments/admin/queue-private/versions/0.1.0", hub.admin_token).json()
    assert v["check"]["status"] == "passed"
    assert (
        hub.get("/api/v1/environments/admin/queue-private/versions/0.1.0/checks").status_code == 404
    )  # private
