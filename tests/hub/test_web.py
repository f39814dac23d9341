"""Server-rendered pages: home/search with tags, environment page (README, install command, versions
with yanked marked, files, leaderboard, downloads), owner page, source pages, sign-in with a token."""

from __future__ import annotations

from html.parser import HTMLParser

from tests.hub.helpers import HubClient, PackageFactory

H = {"Accept": "text/html"}


class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.ids: dict[str, str] = {}
        self._stack: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._stack.append(dict(attrs).get("id"))

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        self.parts.append(data)
        for i in self._stack:
            if i:
                self.ids[i] = self.ids.get(i, "") + data

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def page(hub: HubClient, url: str, **kw) -> Text:  # type: ignore[no-untyped-def]
    r = hub.client.get(url, headers=H, **kw)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html")
    t = Text()
    t.feed(r.text)
    return t


def _seed(hub: HubClient, packages: PackageFactory) -> str:
    alice = hub.user("alice")
    for v in ("1.0.0", "1.1.0"):
        pkg = packages.get(
            "web-env",
            v,
            readme="# Web env\n\nSolve **puzzles** fast.\n",
            tags=["puzzle", "logic"],
            description="Logic puzzles.",
        )
        assert hub.publish("alice", pkg, alice).status_code == 201
    hub.post("/api/v1/environments/alice/web-env/versions/1.0.0/yank", alice, json={"reason": "bad answers"})
    for model, avg in (("tiny-a", 0.25), ("tiny-b", 0.75)):
        hub.post(
            "/api/v1/environments/alice/web-env/versions/1.1.0/evals",
            alice,
            json={
                "metadata": {
                    "model": model,
                    "avg_reward": avg,
                    "num_rollouts": 8,
                    "sampling_args": {"temperature": 0.5},
                }
            },
        )
    assert (
        hub.publish(
            "alice", packages.get("hidden-env", "0.1.0", description="Hidden thing."), alice, private=True
        ).status_code
        == 201
    )
    return alice


def test_home_search_and_tags(hub: HubClient, packages: PackageFactory) -> None:

    _seed(hub, packages)
    home = page(hub, "/")
    assert "alice/web-env" in home.text and "Logic puzzles." in home.text
    assert "puzzle" in home.text and "alice/hidden-env" not in home.text
    assert "1 environment" in home.ids["result-count"]
    found = page(hub, "/", params={"q": "puzz"})
    assert "alice/web-env" in found.text
    none = page(hub, "/", params={"q": "zzzz"})
    assert "No environments found." in none.text
    tagged = page(hub, "/", params={"tag": "logic"})
    assert "alice/web-env" in tagged.text


def test_environment_page(hub: HubClient, packages: PackageFactory) -> None:

    _seed(hub, packages)
    hub.get("/simple/web-env/")
    p = page(hub, "/alice/web-env")
    assert "Web env" in p.ids["readme"] and "puzzles" in p.ids["readme"]
    assert (
        p.ids["install"].splitlines()[-1]
        == "pip install --isolated --index-url http://testserver/alice/simple/ web-env==1.1.0"
        and "--extra-index-url" not in p.ids["install"]
    )
    assert p.ids["install-uv"] == "uv pip install --no-config --index-url http://testserver/alice/simple/ web-env==1.1.0"
    assert p.ids["install-vf"] == "vf install alice/web-env@1.1.0"
    assert p.ids["shown-version"] == "1.1.0"
    assert "1.0.0" in p.ids["versions"] and "yanked" in p.ids["versions"]
    assert "web_env-1.1.0-py3-none-any.whl" in p.ids["files"]
    lb = p.ids["leaderboard"]
    assert lb.index("tiny-b") < lb.index("tiny-a") and "0.7500" in lb
    assert "downloads" in p.ids["downloads"]
    raw = hub.client.get("/alice/web-env", headers=H).text
    assert "<strong>puzzles</strong>" in raw
    old = page(hub, "/alice/web-env", params={"version": "1.0.0"})
    assert old.ids["shown-version"] == "1.0.0" and "bad answers" in old.text
    owner = page(hub, "/alice")
    assert "alice/web-env" in owner.text and "alice/hidden-env" not in owner.text
    src = page(hub, "/alice/web-env/source/1.1.0")
    assert "pyproject.toml" in src.ids["source-files"]
    f = page(hub, "/alice/web-env/source/1.1.0/web_env/__init__.py")
    assert "def load_environment" in f.ids["source-content"]
    headers = hub.client.get("/alice/web-env", headers=H).headers
    csp = headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp  # only the hub's static copy.js
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    missing = hub.client.get("/alice/no-such-env", headers=H)
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]


def test_sign_in_shows_private_pages(hub: HubClient, packages: PackageFactory) -> None:

    alice = _seed(hub, packages)
    assert hub.client.get("/alice/hidden-env", headers=H).status_code == 404
    # Without the form's CSRF token (a cross-site post), sign-in is refused.
    assert hub.client.post("/signin", data={"token": alice}, headers=H).status_code == 403
    hub.client.get("/signin", headers=H)
    csrf = hub.client.cookies["vfhub_csrf"]
    bad = hub.client.post("/signin", data={"token": "vfh_nope", "csrf": csrf}, headers=H)
    assert bad.status_code == 401 and "invalid" in bad.text
    r = hub.client.post("/signin", data={"token": alice, "csrf": csrf}, headers=H, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie
    p = page(hub, "/alice/hidden-env")
    assert "Hidden thing." in p.text and "private" in p.text
    assert "alice/hidden-env" in page(hub, "/").text
    assert page(hub, "/").ids["whoami"] == "alice"
    # The cookie only serves pages: the API still needs a token header.
    assert hub.client.get("/api/v1/environments/alice/hidden-env").status_code == 404
    hub.client.post("/signout", data={"csrf": csrf}, headers=H)
    assert hub.client.get("/alice/hidden-env", headers=H).status_code == 404
