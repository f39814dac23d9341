"""The unit of work (``hub.services.uow``): a write bumps the generation inside its transaction and
drops this worker's caches only after the commit; a failed write does neither; writes no cache shows
(``cached=False``, or a transaction marked ``unchanged``) do neither."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from hub.core import Hub
from hub.errors import Conflict, NotFound
from hub.index import CachedPage
from hub.models import Owner
from hub.testing import make_settings


@pytest.fixture
def core(tmp_path: Path) -> Hub:
    hub = Hub(make_settings(tmp_path / "h"))
    yield hub  # type: ignore[misc]
    hub.close()


def _cache_a_page(hub: Hub) -> tuple[str, ...]:
    key = ("project", None, "p", "text/html")
    gen = hub.db.generation()
    hub.index_cache.sync(gen)
    hub.index_cache.put(key, CachedPage(b"page", '"e"'), gen)
    assert hub.index_cache.get(key) is not None
    return key


def test_a_write_bumps_the_generation_and_drops_the_caches_after_its_commit(core: Hub) -> None:
    key = _cache_a_page(core)
    before = core.db.generation()
    seen_inside: list[object] = []
    with core.uow.write() as s:
        s.add(Owner(name="someone", display_name="someone", kind="user", description=""))
        seen_inside.append(core.index_cache.get(key))  # not dropped before the commit
    assert seen_inside[0] is not None
    assert core.db.generation() == before + 1
    assert core.index_cache.get(key) is None


def test_a_failed_write_commits_nothing_and_keeps_the_caches(core: Hub) -> None:
    key = _cache_a_page(core)
    before = core.db.generation()
    with pytest.raises(Conflict), core.uow.write() as s:
        s.add(Owner(name="ghost", display_name="ghost", kind="user", description=""))
        s.flush()
        raise Conflict("no")
    assert core.db.generation() == before and core.index_cache.get(key) is not None
    with core.db.session() as s:
        assert s.scalar(select(Owner.id).where(Owner.name == "ghost")) is None


def test_writes_no_cache_shows_neither_bump_nor_drop(core: Hub) -> None:
    key = _cache_a_page(core)
    before = core.db.generation()
    with core.uow.write(cached=False) as s:
        s.add(Owner(name="quiet", display_name="quiet", kind="user", description=""))
    with core.uow.write() as s:
        core.uow.unchanged(s)  # e.g. an identical re-upload
    assert core.db.generation() == before and core.index_cache.get(key) is not None


def test_services_raise_domain_errors_with_their_status(core: Hub) -> None:
    core.accounts.create_user("alice")
    with pytest.raises(Conflict) as taken:
        core.accounts.create_user("alice")
    assert taken.value.status == 409 and "taken" in taken.value.message
    with pytest.raises(NotFound) as missing:
        core.accounts.set_member(_admin(core), "no-such-org", "alice", "read")
    assert missing.value.status == 404


def _admin(core: Hub):  # type: ignore[no-untyped-def]
    from hub.auth import Principal

    return Principal(user_id=0, user_name="root", is_admin=True, token_id=None, scope="write")
