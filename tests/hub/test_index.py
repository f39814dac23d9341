"""The package index, parsed the way installers parse it: PEP 503 HTML with html.parser, PEP 691 JSON,
names and versions through ``packaging``; PEP 592/658/700 fields; negotiation; private projects."""

from __future__ import annotations

import datetime
import hashlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tests.hub.helpers import HubClient, PackageFactory

JSON = "application/vnd.pypi.simple.v1+json"
HTML = "application/vnd.pypi.simple.v1+html"
PIP_ACCEPT = f"{JSON}, {HTML}; q=0.1, text/html; q=0.01"


class Links(HTMLParser):
    """Collects anchors and their attributes, and the repository-version meta tag."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.meta: dict[str, str | None] = {}
        self._cur: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._cur, self._text = dict(attrs), ""
        elif tag == "meta":
            d = dict(attrs)
            self.meta[str(d.get("name"))] = d.get("content")

    def handle_data(self, data: str) -> None:
        if self._cur is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._cur is not None:
            self.anchors.append((self._cur, self._text))
            self._cur = None


def parse_html(text: str) -> Links:
    p = Links()
    p.feed(text)
    return p


def _publish_two_versions(hub: HubClient, packages: PackageFactory) -> str:
    alice = hub.user("alice")
    for v in ("0.1.0", "0.2.0"):
        r = hub.publish("alice", packages.get("Index_Env", v, dependencies=["verifiers>=0.1.9"]), alice)
        assert r.status_code == 201, r.text
    return alice


def test_project_page_html_and_json_agree(hub: HubClient, packages: PackageFactory) -> None:
    _publish_two_versions(hub, packages)
    r = hub.get("/simple/index-env/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "Accept" in r.headers["vary"]
    page = parse_html(r.text)
    assert page.meta["pypi:repository-version"] == "1.1"
    names = sorted(text for _a, text in page.anchors)
    assert names == sorted(
        [
            "index_env-0.1.0-py3-none-any.whl",
            "index_env-0.1.0.tar.gz",
            "index_env-0.2.0-py3-none-any.whl",
            "index_env-0.2.0.tar.gz",
        ]
    )
    for attrs, text in page.anchors:
        href = attrs["href"] or ""
        url, _, frag = href.partition("#")
        assert frag.startswith("sha256=")
        sha = frag.split("=", 1)[1]
        assert url == f"/files/{sha[:2]}/{sha}/{text}"
        assert attrs["data-requires-python"] == ">=3.10"
        body = hub.get(url).content
        assert hashlib.sha256(body).hexdigest() == sha
        if text.endswith(".whl"):
            assert attrs["data-core-metadata"] == attrs["data-dist-info-metadata"]
            meta = hub.get(url + ".metadata")
            assert meta.status_code == 200
            assert "sha256=" + hashlib.sha256(meta.content).hexdigest() == attrs["data-core-metadata"]
            assert b"Name: Index_Env" in meta.content or b"Name: index-env" in meta.content.lower()
            name, version, _b, _t = parse_wheel_filename(text)
            assert name == "index-env" and version in (Version("0.1.0"), Version("0.2.0"))

    j = hub.get("/simple/index-env/", headers={"Accept": PIP_ACCEPT})
    assert j.headers["content-type"] == JSON
    doc = j.json()
    assert doc["meta"]["api-version"] == "1.1"
    assert doc["name"] == "index-env"
    assert doc["versions"] == ["0.1.0", "0.2.0"]
    html_names = {text for _a, text in page.anchors}
    assert {f["filename"] for f in doc["files"]} == html_names
    for f in doc["files"]:
        assert set(f) >= {
            "filename",
            "url",
            "hashes",
            "requires-python",
            "size",
            "upload-time",
            "yanked",
            "core-metadata",
        }
        assert f["size"] == len(hub.get(f["url"]).content)
        datetime.datetime.strptime(f["upload-time"], "%Y-%m-%dT%H:%M:%S.%fZ")  # the PEP 700 format
        assert f["yanked"] is False
        assert (f["core-metadata"] is not False) == f["filename"].endswith(".whl")


def test_negotiation_and_406(hub: HubClient, packages: PackageFactory) -> None:

    _publish_two_versions(hub, packages)
    cases = {
        None: "text/html; charset=utf-8",
        "*/*": "text/html; charset=utf-8",
        "text/html": "text/html; charset=utf-8",
        HTML: HTML,
        JSON: JSON,
        "application/vnd.pypi.simple.latest+json": JSON,
        f"{HTML}, {JSON};q=0.5": HTML,
        PIP_ACCEPT: JSON,
    }
    for accept, expected in cases.items():
        headers = {"Accept": accept} if accept else {}
        r = hub.get("/simple/index-env/", headers=headers)
        assert r.status_code == 200, accept
        assert r.headers["content-type"] == expected, accept
    assert hub.get("/simple/index-env/", headers={"Accept": "application/xml"}).status_code == 406
    assert hub.get("/simple/index-env/", params={"format": JSON}).headers["content-type"] == JSON


def test_project_list_and_redirects(hub: HubClient, packages: PackageFactory) -> None:
    _publish_two_versions(hub, packages)
    r = hub.get("/simple/")
    page = parse_html(r.text)
    assert [(a["href"], t) for a, t in page.anchors] == [("index-env/", "index-env")]
    doc = hub.get("/simple/", headers={"Accept": JSON}).json()
    assert doc["projects"] == [{"name": "index-env"}]
    for path in ("/simple/Index_Env/", "/simple/index.env/", "/simple/index-env", "/simple/INDEX-ENV"):
        r = hub.get(path, follow_redirects=False)
        assert r.status_code == 301, path
        assert r.headers["location"] == "/simple/index-env/"
    assert hub.get("/simple/Index_Env/").status_code == 200  # after following
    assert hub.get("/simple/no-such-project/").status_code == 404
    # Per-owner index.
    assert parse_html(hub.get("/alice/simple/").text).anchors[0][1] == "index-env"
    assert hub.get("/alice/simple/index-env/").status_code == 200
    assert hub.get("/Alice/simple/index-env/", follow_redirects=False).status_code == 301
    assert hub.get("/nobody/simple/").status_code == 404
    bob = hub.user("bob")
    assert bob
    assert hub.get("/bob/simple/index-env/").status_code == 404
    assert parse_html(hub.get("/bob/simple/").text).anchors == []


def test_yanked_files_are_marked(hub: HubClient, packages: PackageFactory) -> None:
    alice = _publish_two_versions(hub, packages)
    r = hub.post(
        "/api/v1/environments/alice/index-env/versions/0.2.0/yank", alice, json={"reason": "broken scorer"}
    )
    assert r.status_code == 200 and r.json()["yanked"] is True
    page = parse_html(hub.get("/simple/index-env/").text)
    yanked = {t: a.get("data-yanked") for a, t in page.anchors if "data-yanked" in a}
    assert yanked == {
        "index_env-0.2.0-py3-none-any.whl": "broken scorer",
        "index_env-0.2.0.tar.gz": "broken scorer",
    }
    doc = hub.get("/simple/index-env/", headers={"Accept": JSON}).json()
    assert {f["filename"]: f["yanked"] for f in doc["files"]}["index_env-0.2.0.tar.gz"] == "broken scorer"
    assert hub.get("/api/v1/environments/alice/index-env/versions/latest").json()["version"] == "0.1.0"
    r = hub.post("/api/v1/environments/alice/index-env/versions/0.2.0/unyank", alice)
    assert r.status_code == 200 and r.json()["yanked"] is False
    doc = hub.get("/simple/index-env/", headers={"Accept": JSON}).json()
    assert all(f["yanked"] is False for f in doc["files"])
    assert hub.get("/api/v1/environments/alice/index-env/versions/latest").json()["version"] == "0.2.0"


def test_private_project_served_only_to_token_holders(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    bob = hub.user("bob")
    pkg = packages.get("secret-env", "1.0.0")
    assert hub.publish("alice", pkg, alice, private=True).status_code == 201
    anon = hub.get("/simple/secret-env/")
    assert anon.status_code == 404
    assert hub.get("/simple/secret-env/", bob).status_code == 404
    assert "secret-env" not in hub.get("/simple/").text
    assert "secret-env" not in hub.get("/simple/", bob).text
    ok = hub.get("/simple/secret-env/", alice, headers={"Accept": JSON})
    assert ok.status_code == 200
    assert "private" in ok.headers["cache-control"]
    url = ok.json()["files"][0]["url"]
    assert hub.get(url).status_code == 404
    assert hub.get(url, bob).status_code == 404
    assert hub.get(url, alice).status_code == 200
    # HTTP Basic with the token as password (what pip and uv send), any username.
    basic = hub.client.get("/simple/secret-env/", auth=("__token__", alice))
    assert basic.status_code == 200
    assert "secret-env" in hub.client.get("/simple/", auth=("anything", alice)).text
    # A read-only token limited to this environment works too.
    ro = hub.token(alice, scope="read", environment="alice/secret-env")
    assert hub.client.get(url, auth=("x", ro)).status_code == 200
    # A wrong token is 401 (pip then asks for credentials), never the page; and 401 for a project that
    # does not exist too, so a wrong token tells nothing of which private names exist.
    assert hub.client.get("/simple/secret-env/", auth=("x", "vfh_wrong")).status_code == 401
    assert hub.client.get("/simple/no-such-env/", auth=("x", "vfh_wrong")).status_code == 401


def test_index_cache_invalidated_by_writes(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("cache-env", "1.0.0"), alice).status_code == 201
    first = hub.get("/simple/cache-env/")
    etag = first.headers["etag"]
    assert hub.get("/simple/cache-env/", headers={"If-None-Match": etag}).status_code == 304
    assert hub.publish("alice", packages.get("cache-env", "1.1.0"), alice).status_code == 201
    second = hub.get("/simple/cache-env/", headers={"If-None-Match": etag})
    assert second.status_code == 200
    assert "cache_env-1.1.0.tar.gz" in second.text
    # A write through another process's connection (simulated by a direct bump) is noticed too.
    from sqlalchemy import text

    with hub.hub.db.engine.begin() as conn:
        conn.execute(text("UPDATE versions SET yanked = true, yank_reason = 'x' WHERE version = '1.1.0'"))
        conn.execute(text("UPDATE hub_state SET value = value + 1 WHERE key = 'generation'"))
    assert 'data-yanked="x"' in hub.get("/simple/cache-env/").text


def test_download_counts(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("count-env", "1.0.0"), alice).status_code == 201
    doc = hub.get("/simple/count-env/", headers={"Accept": JSON}).json()
    whl = next(f for f in doc["files"] if f["filename"].endswith(".whl"))
    for _ in range(3):
        assert hub.get(whl["url"]).status_code == 200
    hub.get(whl["url"] + ".metadata")  # metadata fetches are not downloads
    hub.get("/simple/count-env/")  # nor are index pages
    d = hub.get("/api/v1/environments/alice/count-env/downloads").json()
    assert d["total"] == 3 and d["last_30_days"] == 3
    assert len(d["daily"]) == 1 and d["daily"][0]["count"] == 3
    assert hub.get("/api/v1/environments/alice/count-env").json()["downloads"] == 3
    # Wrong sha prefix or unknown file: 404, not counted.
    bad = whl["url"].replace("/files/", "/files/zz", 1)
    assert hub.get(bad).status_code == 404
    assert hub.get("/api/v1/environments/alice/count-env/downloads").json()["total"] == 3


def test_distribution_name_maps_to_environment(hub: HubClient, packages: PackageFactory) -> None:
    """owner/name's name IS the normalised distribution name, unique hub-wide."""
    alice = hub.user("alice")
    bob = hub.user("bob")
    pkg = packages.get("Shared.Name", "1.0.0")
    assert hub.publish("alice", pkg, alice).status_code == 201
    assert canonicalize_name("Shared.Name") == "shared-name"
    assert hub.get("/api/v1/environments/alice/shared-name").status_code == 200
    assert hub.get("/api/v1/environments/alice/Shared_Name").json()["id"] == "alice/shared-name"
    r = hub.publish("bob", packages.get("Shared.Name", "2.0.0"), bob)
    assert r.status_code == 403
    assert "belongs to" in r.json()["detail"]
    # Names that must resolve from the normal index can never be published here.
    r = hub.publish("alice", packages.get("verifiers", "99.0.0"), alice)
    assert r.status_code == 403 and "reserved" in r.json()["detail"]
    assert hub.get("/simple/verifiers/").status_code == 404


def test_optional_auth_challenge_for_netrc_clients(tmp_path, packages: PackageFactory) -> None:  # type: ignore[no-untyped-def]
    """With index_auth_challenge, anonymous misses get 401 + Basic challenge (pip then sends netrc or
    keyring credentials); absent and private projects still look the same."""
    hub = HubClient.create(
        tmp_path / "h", database_url=None, admin_token="vfh_" + "c" * 43, index_auth_challenge=True
    )
    try:
        alice = hub.user("alice")
        assert hub.publish("alice", packages.get("chal-env", "1.0.0"), alice, private=True).status_code == 201
        for path in ("/simple/chal-env/", "/simple/absent-env/"):
            r = hub.get(path)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic"), path
        assert hub.client.get("/simple/chal-env/", auth=("__token__", alice)).status_code == 200
        bob = hub.user("bob")
        assert hub.get("/simple/chal-env/", bob).status_code == 404  # authenticated: plain 404
    finally:
        hub.close()


def test_index_cache_is_bounded_in_entries_and_bytes() -> None:
    from hub.index import CachedPage, IndexCache

    class _Stub:
        pass

    cache = IndexCache(_Stub(), max_entries=3, max_bytes=1000)  # type: ignore[arg-type]
    for i in range(5):
        cache.put(("p", i), CachedPage(b"x" * 100, f'"{i}"'))
    assert [k[1] for k in cache._data] == [2, 3, 4] and cache.bytes == 300
    cache.put(("big", 0), CachedPage(b"y" * 240, '"b"'))
    cache.put(("big", 1), CachedPage(b"y" * 240, '"c"'))
    cache.put(("big", 2), CachedPage(b"y" * 240, '"d"'))
    assert cache.bytes <= 1000 and len(cache._data) <= 3
    cache.put(("huge", 0), CachedPage(b"z" * 600, '"h"'))  # over a quarter of the budget: not cached
    assert cache.get(("huge", 0)) is None
    cache.invalidate()
    assert cache.bytes == 0 and cache.get(("big", 2)) is None


def test_pip_parses_both_formats_identically(hub: HubClient, packages: PackageFactory) -> None:
    """pip's own index parser (the code ``pip install`` runs) reads the same links from HTML and JSON:
    hashes, requires-python, yanked reasons, PEP 658 metadata hashes and (JSON) upload times.

    Each page is parsed for real: pip caches parsed links by page URL, so the cache is switched off
    (``cache_link_parsing=False``), and an unrelated page under the same URL must parse to nothing."""
    from pip._internal.index.collector import IndexContent, parse_links

    alice = _publish_two_versions(hub, packages)
    hub.post("/api/v1/environments/alice/index-env/versions/0.1.0/yank", alice, json={"reason": "old scorer"})
    url = "http://testserver/simple/index-env/"

    def parse(content: bytes, content_type: str) -> dict[str, Any]:
        page = IndexContent(content, content_type, "utf-8", url, cache_link_parsing=False)
        return {link.filename: link for link in parse_links(page)}

    parsed = {}
    for accept in (JSON, "text/html"):
        r = hub.get("/simple/index-env/", headers={"Accept": accept})
        parsed[accept] = parse(r.content, r.headers["content-type"])
    assert parse(b"<html><body><p>unrelated</p></body></html>", "text/html") == {}
    assert parse(b'{"meta": {"api-version": "1.1"}, "name": "x", "files": []}', JSON) == {}
    assert parsed[JSON].keys() == parsed["text/html"].keys() and len(parsed[JSON]) == 4
    for name, j in parsed[JSON].items():
        h = parsed["text/html"][name]
        # The HTML link carries its hash as a URL fragment too; the file URL itself is the same.
        assert j.url_without_fragment == h.url_without_fragment and j.url.startswith("http://testserver/files/")
        assert j.hash_name == h.hash_name == "sha256" and j.hash == h.hash
        assert j.requires_python == h.requires_python == ">=3.10"
        assert j.yanked_reason == h.yanked_reason == ("old scorer" if "0.1.0" in name else None)
        if name.endswith(".whl"):
            assert j.metadata_file_data is not None and h.metadata_file_data is not None
            assert j.metadata_file_data.hashes == h.metadata_file_data.hashes
            meta = hub.get(j.metadata_link().url.replace("http://testserver", ""))  # type: ignore[union-attr]
            assert hashlib.sha256(meta.content).hexdigest() == j.metadata_file_data.hashes["sha256"]
        else:
            assert j.metadata_file_data is None and h.metadata_file_data is None
        assert j.upload_time is not None


def test_head_requests(hub: HubClient, packages: PackageFactory) -> None:
    _publish_two_versions(hub, packages)
    r = hub.client.head("/simple/index-env/")
    assert r.status_code == 200 and r.content == b"" and "etag" in r.headers
    url = hub.get("/simple/index-env/", headers={"Accept": JSON}).json()["files"][0]["url"]
    assert hub.client.head(url).status_code == 200
    assert hub.client.head("/simple/").status_code == 200
    assert (
        hub.get("/api/v1/environments/alice/index-env/downloads").json()["total"] == 0
    )  # HEAD is no download


def test_yank_without_reason_through_pip(tmp_path: Path, packages: PackageFactory) -> None:
    """A version yanked with no reason, as pip itself reads it from a real hub: pip's parser sees it
    yanked with an empty reason in both formats, an unpinned ``pip download`` skips it, and a pin to it
    still gets it (PEP 592)."""
    import subprocess
    import sys

    from pip._internal.index.collector import IndexContent, parse_links

    from hub.testing import run_hub

    with run_hub(tmp_path / "hub") as h:
        with h.client(h.admin_token) as c:
            alice = c.post("/api/v1/users", json={"name": "alice"}).json()["token"]
        with h.client(alice) as c:
            for v in ("0.1.0", "0.2.0"):
                pkg = packages.get("index-env", v)
                r = c.post("/api/v1/environments/alice/index-env/versions",
                           files=[("files", (p.name, p.read_bytes())) for p in (pkg.wheel, pkg.sdist)])  # fmt: skip
                assert r.status_code == 201, r.text
            assert c.post("/api/v1/environments/alice/index-env/versions/0.2.0/yank").status_code == 200
            for accept in (JSON, "text/html"):
                r = c.get("/simple/index-env/", headers={"Accept": accept})
                page = IndexContent(r.content, r.headers["content-type"], "utf-8", f"{h.url}/simple/index-env/",
                                    cache_link_parsing=False)  # fmt: skip
                links = {link.filename: link for link in parse_links(page)}
                assert links["index_env-0.2.0-py3-none-any.whl"].is_yanked
                assert links["index_env-0.2.0-py3-none-any.whl"].yanked_reason == ""
                assert not links["index_env-0.1.0-py3-none-any.whl"].is_yanked

        def download(spec: str) -> tuple[list[str], str]:
            dest = tmp_path / f"dl-{len(list(tmp_path.iterdir()))}"
            res = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest),
                 "--index-url", f"{h.url}/simple/", "--no-cache-dir", "--disable-pip-version-check", spec],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            return sorted(p.name for p in dest.iterdir()), res.stdout + res.stderr

        assert download("index-env")[0] == ["index_env-0.1.0-py3-none-any.whl"]
        files, out = download("index-env==0.2.0")
        assert files == ["index_env-0.2.0-py3-none-any.whl"] and "yanked" in out.lower()


def test_index_cache_never_keeps_a_page_rendered_for_an_older_generation() -> None:
    """A request that read generation 5, then its rows, may finish after a write moved the cache to
    generation 6: its page can be stale there, and is not kept."""
    from hub.index import CachedPage, IndexCache

    class _Stub:
        pass

    cache = IndexCache(_Stub(), max_entries=10)  # type: ignore[arg-type]
    cache.sync(5)
    cache.sync(6)  # a later request saw the write
    cache.put(("project", None, "p", JSON), CachedPage(b"old rows", '"o"'), 5)
    assert cache.get(("project", None, "p", JSON)) is None
    cache.put(("project", None, "p", JSON), CachedPage(b"new rows", '"n"'), 6)
    assert cache.get(("project", None, "p", JSON)) is not None


def test_generation_reader_answers_only_with_reads_started_after_the_call() -> None:
    """A caller that arrives while a read is in flight waits for the next one (that read may predate a
    write the caller saw acknowledged), and everyone who queued behind it shares that next read."""
    import asyncio
    import threading

    from hub.http import GenerationReader

    started = [threading.Event() for _ in range(3)]
    release = [threading.Event() for _ in range(3)]
    calls = 0

    def read() -> int:
        nonlocal calls
        k = calls
        calls += 1
        started[k].set()
        assert release[k].wait(60)
        return 10 + k

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = GenerationReader(read)
        try:
            first = asyncio.ensure_future(reader.current())
            await loop.run_in_executor(None, started[0].wait, 60)  # read 0 is in flight
            later = [asyncio.ensure_future(reader.current()) for _ in range(5)]
            await asyncio.sleep(0)
            release[0].set()
            assert await first == 10
            await loop.run_in_executor(None, started[1].wait, 60)
            release[1].set()
            assert [await f for f in later] == [11] * 5  # not read 0's value, and one read for all
            assert calls == 2 and reader.reads == 2
        finally:
            reader.close()

    asyncio.run(main())


def test_concurrent_index_requests_share_generation_reads(hub: HubClient, packages: PackageFactory) -> None:
    """32 requests at once for cached pages, anonymous and with a token, cost far fewer than 32 reads of
    the generation (one read answers every request queued behind the previous one), and every answer
    is the page itself."""
    import asyncio

    from sqlalchemy import event

    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("batch-env", "1.0.0"), alice, private=True).status_code == 201
    assert hub.get("/simple/batch-env/", alice).status_code == 200  # page and principal now cached
    reads = 0

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        nonlocal reads
        if "hub_state" in statement and "generation" in statement:
            reads += 1

    engine = hub.hub.db.engine
    event.listen(engine, "before_cursor_execute", count)

    async def burst() -> list[Any]:
        import httpx

        transport = httpx.ASGITransport(app=hub.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            auth = {"Authorization": f"Bearer {alice}"}
            return await asyncio.gather(
                *(c.get("/simple/batch-env/", headers=auth) for _ in range(32)),
                *(c.get("/simple/") for _ in range(32)),
            )

    try:
        answers = asyncio.run(burst())
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert [r.status_code for r in answers] == [200] * 64
    assert all("batch_env-1.0.0" in r.text for r in answers[:32])
    assert all("batch-env" not in r.text for r in answers[32:])  # private: not listed for anonymous
    assert reads < 16, reads


def _fast_path(hub: HubClient) -> Any:
    from hub.index import CachedIndexPages

    layer = hub.app.middleware_stack
    while not isinstance(layer, CachedIndexPages):
        layer = layer.app
    return layer


def test_cached_pages_are_answered_before_the_framework_with_every_header(
    hub: HubClient, packages: PackageFactory
) -> None:
    """Cached pages (public, private with a cached token, the project list) are answered by the
    ASGI fast path, with the same headers the routes give (security headers, ETag, Vary, caching),
    HEAD without a body and a 304 for a matching ETag; what memory cannot settle (a wrong token, a
    caller who may not see the page, an unacceptable Accept) still gets the routes' answer."""
    alice = hub.user("alice")
    bob = hub.user("bob")
    assert hub.publish("alice", packages.get("fast-env", "1.0.0"), alice).status_code == 201
    assert hub.publish("alice", packages.get("fast-secret", "1.0.0"), alice, private=True).status_code == 201
    warm = [hub.get("/simple/fast-env/"), hub.get("/simple/fast-secret/", alice), hub.get("/simple/", alice)]
    assert [r.status_code for r in warm] == [200, 200, 200]
    fast = _fast_path(hub)
    before = fast.answered
    public = hub.get("/simple/fast-env/")
    private = hub.get("/simple/fast-secret/", alice)
    listing = hub.get("/simple/", alice)
    head = hub.req("HEAD", "/simple/fast-env/")
    again = hub.get("/simple/fast-env/", headers={"If-None-Match": public.headers["etag"]})
    assert fast.answered == before + 5
    assert public.text == warm[0].text and private.text == warm[1].text and "fast-secret" in listing.text
    for r in (public, private, listing):
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        assert r.headers["vary"] == "Accept, Authorization" and r.headers["etag"]
    assert private.headers["cache-control"] == "private, no-cache"
    assert public.headers["cache-control"] == "public, max-age=0, must-revalidate"
    assert head.status_code == 200 and head.content == b"" and head.headers["etag"] == public.headers["etag"]
    assert again.status_code == 304
    answered = fast.answered
    assert hub.get("/simple/fast-secret/", bob).status_code == 404
    assert hub.get("/simple/fast-secret/").status_code == 404
    assert hub.client.get("/simple/fast-secret/", auth=("x", "vfh_wrong")).status_code == 401
    assert hub.get("/simple/fast-env/", headers={"Accept": "image/png"}).status_code == 406
    assert hub.get("/simple/Fast_Env/", follow_redirects=False).status_code == 301  # memory answers it
    assert fast.answered == answered + 1
