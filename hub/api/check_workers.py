"""``GET /api/v1/check-workers``: whether any check worker is alive (``hub/worker_presence.py``), so
``vf push --wait`` can say at once that a queued check has no one to run it. Read-only and anonymous:
it tells no more than a version's check status already does."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from hub import worker_presence
from hub.api.deps import HubDep

router = APIRouter()


class CheckWorkersOut(BaseModel):
    alive: bool = Field(description="A worker claimed within stale_after_seconds, or holds a live lease")
    last_claim_seconds_ago: float | None = Field(description="Since any worker last asked for a job (null: never)")
    stale_after_seconds: int
    running: int
    queued: int


@router.get("/check-workers", response_model=CheckWorkersOut, tags=["checks"])
def check_workers(hub: HubDep) -> dict[str, Any]:
    """Whether a check worker is alive, and how many checks are running and queued."""
    return worker_presence.status(hub.db)
