"""The JSON API under ``/api/v1``: one router per resource (environments, versions, evals, accounts,
tokens, orgs, checks, check workers), request/response schemas in ``schemas``, shared access checks in ``deps``, and the
queries shared with the web pages and the admin CLI in ``hub.queries``."""

from __future__ import annotations

from fastapi import APIRouter

from hub.api import accounts, check_workers, checks, environments, evals, orgs, tokens, versions

router = APIRouter(prefix="/api/v1")
for _module in (environments, versions, evals, accounts, tokens, orgs, checks, check_workers):
    router.include_router(_module.router)
