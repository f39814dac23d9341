"""``GET /api/v1/check-workers`` (``hub/worker_presence.py``): a hub says whether any check worker is
alive, from the workers' own claims and leases, on SQLite and on a real PostgreSQL. Staleness is
made by writing an old claim time (no sleeping)."""

from __future__ import annotations

import datetime as dt
import time

from sqlalchemy import text, update

from hub import worker_presence
from hub.auth import add_token
from hub.models import CheckRun
from hub.services.accounts import add_user
from tests.hub.helpers import HubClient, PackageFactory


def _workers(hub: HubClient) -> dict:
    r = hub.get("/api/v1/check-workers")  # anonymous
    assert r.status_code == 200, r.text
    return r.json()


def test_check_workers_reports_claims_and_leases(hub: HubClient, packages: PackageFactory) -> None:
    assert _workers(hub) == {"alive": False, "last_claim_seconds_ago": None, "stale_after_seconds": 60,
                             "running": 0, "queued": 0}
    assert hub.publish("admin", packages.get("presence-env"), hub.admin_token).status_code == 201
    assert _workers(hub)["queued"] == 1 and _workers(hub)["alive"] is False
    core = hub.hub
    with core.db.session() as s:
        user, _ = add_user(s, "presence-worker")
        worker, _t = add_token(s, user, scope="worker")
    job = hub.post("/api/v1/check-jobs/claim", worker, json={"worker": "w"}).json()["job"]
    assert job is not None
    now = _workers(hub)
    assert now["alive"] is True and now["running"] == 1 and now["queued"] == 0
    assert 0 <= now["last_claim_seconds_ago"] <= 60

    # The worker died a while ago: its lease ran out, its last claim is older than the stale bound.
    with core.db.session() as s:
        s.execute(update(CheckRun).where(CheckRun.id == job["id"]).values(lease_expires_at=dt.datetime(2000, 1, 1)))
        s.execute(text("UPDATE hub_state SET value = :v WHERE key = :k"),
                  {"v": int(time.time()) - 600, "k": worker_presence.KEY})
    stale = _workers(hub)
    assert stale["alive"] is False and stale["last_claim_seconds_ago"] >= 600

    # A worker polls again (an empty queue counts: idle workers are alive too).
    core.db._vf_worker_seen_written = None  # the per-process write limit, spent by the first claim
    assert hub.post("/api/v1/check-jobs/claim", worker, json={"worker": "w2"}).status_code == 200
    assert _workers(hub)["alive"] is True
