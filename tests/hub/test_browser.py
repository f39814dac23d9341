"""The hub's web pages in a real headless Chromium (Debian's, driven by playwright).

A running hub (``python -m hub serve`` subprocess) holds public and private environments with READMEs
and eval results; the browser searches from the home page, follows links to an environment, reads the
rendered README and the leaderboard, and signs in with a token to see a private environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from hub.testing import HubProcess, run_hub
from tests.support.envpkg import BuiltPackage, build_env_package
from tests.support.services import start_chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]

README = """\
# Arithmetic drills

Solve **sums** and products; the reward is 1.0 for an exact answer.

- single-turn
- exact-match reward

```python
env = load_environment(num_examples=5)
```

| split | rows |
|-------|------|
| train | 1000 |

<script>window.__pwned = "script";</script>
<img src="x" onerror="window.__pwned = 'img'">
"""


@dataclass
class Site:
    hub: HubProcess
    alice: str
    math: BuiltPackage
    code: BuiltPackage
    secret: BuiltPackage


def _publish(hub: HubProcess, token: str, pkg: BuiltPackage, private: bool = False) -> None:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (pkg.wheel, pkg.sdist)]
    with hub.client(token) as c:
        r = c.post(
            f"/api/v1/environments/alice/{pkg.normalized}/versions",
            files=files,
            data={"private": "true" if private else "false"},
        )
    assert r.status_code in (200, 201), r.text


def _eval(
    hub: HubProcess, token: str, env: str, version: str, model: str, reward: float, temp: float
) -> None:
    metadata = {
        "env_id": env,
        "model": model,
        "avg_reward": reward,
        "num_examples": 5,
        "rollouts_per_example": 4,
        "num_rollouts": 20,
        "sampling_args": {"temperature": temp, "max_tokens": 256},
    }
    with hub.client(token) as c:
        r = c.post(
            f"/api/v1/environments/alice/{env}/versions/{version}/evals",
            json={"metadata": metadata, "summary": {"avg_reward": reward}},
        )
    assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("hub-web")
    hub = run_hub(root / "data")
    try:
        with hub.client(hub.admin_token) as c:
            alice = c.post("/api/v1/users", json={"name": "alice"}).json()["token"]
        math = build_env_package(
            root / "m",
            "vfweb-arith-drills",
            "1.2.0",
            readme=README,
            description="Arithmetic drills with exact-match reward",
            tags=["math", "arithmetic"],
        )
        code = build_env_package(
            root / "c", "vfweb-unit-tests", "0.3.0", description="Write code that passes tests", tags=["code"]
        )
        secret = build_env_package(
            root / "s",
            "vfweb-secret-sauce",
            "0.1.0",
            readme="# Secret sauce\n\nOnly alice sees this.\n",
            description="A private environment",
            tags=["math"],
        )
        _publish(hub, alice, math)
        _publish(hub, alice, code)
        _publish(hub, alice, secret, private=True)
        _eval(hub, alice, math.normalized, "1.2.0", "model-small", 0.41, 0.7)
        _eval(hub, alice, math.normalized, "1.2.0", "model-small", 0.55, 1.0)  # its best run
        _eval(hub, alice, math.normalized, "1.2.0", "model-large", 0.83, 0.6)
        yield Site(hub, alice, math, code, secret)
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    session = start_chromium()
    try:
        yield session.browser
    finally:
        session.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context: BrowserContext = browser.new_context()  # fresh cookies per test
    context.set_default_timeout(20_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def _listed(page: Page) -> list[str]:
    return [t.strip() for t in page.locator(".env-list a.env-name").all_inner_texts()]


def test_home_page_search_finds_by_word_prefix(site: Site, page: Page) -> None:
    response = page.goto(site.hub.url + "/")
    assert response is not None and response.status == 200
    assert sorted(_listed(page)) == ["alice/vfweb-arith-drills", "alice/vfweb-unit-tests"]  # no private one
    page.fill("#q", "arith")
    page.press("#q", "Enter")
    page.wait_for_url(re.compile(r"[?&]q=arith"))
    expect(page.locator("#result-count")).to_have_text("1 environment")
    assert _listed(page) == ["alice/vfweb-arith-drills"]
    # A search that matches only the private environment shows nothing to an anonymous visitor.
    page.fill("#q", "sauce")
    page.press("#q", "Enter")
    page.wait_for_url(re.compile(r"[?&]q=sauce"))
    expect(page.locator("#result-count")).to_have_text("0 environments")
    assert _listed(page) == []


def test_tag_link_filters_the_list(site: Site, page: Page) -> None:
    page.goto(site.hub.url + "/")
    page.locator(".tags a.tag", has_text="code").first.click()
    page.wait_for_url(re.compile(r"[?&]tag=code"))
    assert _listed(page) == ["alice/vfweb-unit-tests"]


def test_environment_page_renders_readme_and_leaderboard(site: Site, page: Page) -> None:
    page.goto(site.hub.url + "/?q=drills")
    page.locator("a.env-name", has_text="vfweb-arith-drills").click()
    page.wait_for_url(re.compile(r"/alice/vfweb-arith-drills$"))
    expect(page.locator("#env-title")).to_contain_text("alice/vfweb-arith-drills")
    expect(page.locator("#shown-version")).to_have_text("1.2.0")

    readme = page.locator("#readme")
    expect(readme.locator("h1")).to_have_text("Arithmetic drills")
    expect(readme.locator("strong")).to_have_text("sums")
    assert readme.locator("li").all_inner_texts() == ["single-turn", "exact-match reward"]
    expect(readme.locator("pre code")).to_contain_text("load_environment(num_examples=5)")
    expect(readme.locator("table td").first).to_have_text("train")
    # The README is sanitised: neither the script tag nor the event handler ran or survived.
    assert page.evaluate("window.__pwned === undefined")
    assert readme.locator("script").count() == 0
    assert readme.locator("[onerror]").count() == 0

    rows = page.locator("#leaderboard tbody tr")
    expect(rows).to_have_count(2)  # best run per model
    first, second = rows.nth(0), rows.nth(1)
    assert first.locator("td.model").inner_text() == "model-large"
    assert first.locator("td.reward").inner_text() == "0.8300"
    assert second.locator("td.model").inner_text() == "model-small"
    assert second.locator("td.reward").inner_text() == "0.5500"
    assert '"temperature": 1.0' in second.inner_text() or '"temperature":1.0' in second.inner_text()

    expect(page.locator("#install")).to_contain_text("vfweb-arith-drills")
    expect(page.locator("#files")).to_contain_text(site.math.wheel.name)


def test_private_environment_after_signing_in_with_a_token(site: Site, page: Page) -> None:
    url = site.hub.url
    response = page.goto(url + "/alice/vfweb-secret-sauce")
    assert response is not None and response.status == 404
    assert "Only alice sees this" not in page.content()

    # A wrong token is refused and leaves us anonymous.
    page.goto(url + "/signin")
    page.fill("#token", "vfh_not-a-real-token-" + "x" * 20)
    page.click("#signin-form button[type=submit]")
    expect(page.locator("#signin-error")).to_be_visible()
    expect(page.locator("#signin-link")).to_be_visible()

    page.fill("#token", site.alice)
    page.click("#signin-form button[type=submit]")
    page.wait_for_url(url + "/")
    expect(page.locator("#whoami")).to_have_text("alice")
    # The session cookie is HttpOnly: page scripts cannot read the token.
    assert site.alice not in page.evaluate("document.cookie")

    page.fill("#q", "sauce")
    page.press("#q", "Enter")
    page.wait_for_url(re.compile(r"[?&]q=sauce"))
    assert _listed(page) == ["alice/vfweb-secret-sauce"]
    expect(page.locator(".env-card .badge.private")).to_have_count(1)
    page.locator("a.env-name", has_text="vfweb-secret-sauce").click()
    page.wait_for_url(re.compile(r"/alice/vfweb-secret-sauce$"))
    expect(page.locator("#readme h1")).to_have_text("Secret sauce")
    expect(page.locator("#readme")).to_contain_text("Only alice sees this.")

    # Signing out hides it again.
    page.locator("form[action$='/signout'] button").click()
    page.wait_for_url(url + "/")
    response = page.goto(url + "/alice/vfweb-secret-sauce")
    assert response is not None and response.status == 404


def test_owner_page_lists_public_environments(site: Site, page: Page, tmp_path: Path) -> None:
    response = page.goto(site.hub.url + "/alice")
    assert response is not None and response.status == 200
    assert sorted(_listed(page)) == ["alice/vfweb-arith-drills", "alice/vfweb-unit-tests"]
    page.screenshot(path=str(tmp_path / "owner.png"))  # rendering works end to end (fonts, CSS)
    assert (tmp_path / "owner.png").stat().st_size > 1000


def test_api_docs_render_offline(site: Site, page: Page) -> None:
    """/docs renders Swagger UI from files the hub serves itself (this machine has no CDN access),
    listing the API's operations from /openapi.json."""
    external: list[str] = []
    page.on("request", lambda req: external.append(req.url) if not req.url.startswith(site.hub.url) else None)
    page.goto(f"{site.hub.url}/docs")
    expect(page.locator(".swagger-ui .title")).to_contain_text("Environments Hub")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/v1/environments" in p for p in paths), paths
    assert external == [], external


@pytest.mark.parametrize("width", [1280, 390])
def test_install_commands_fit_their_box_and_copy(site: Site, browser: Browser, width: int) -> None:
    """Each install command wraps inside its box (no side-scroll, nothing past the column), and its
    copy button puts exactly the command on the clipboard."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(20_000)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.hub.url)
    try:
        page = context.new_page()
        page.goto(site.hub.url + "/alice/vfweb-arith-drills")
        for box in ("install-vf", "install", "install-uv"):
            pre = page.locator(f"#{box}")
            geometry = pre.evaluate(
                """e => { const r = e.getBoundingClientRect(), col = e.closest('aside').getBoundingClientRect();
                         return {scroll: e.scrollWidth, client: e.clientWidth, right: r.right,
                                 colRight: col.right, vw: document.documentElement.clientWidth}; }"""
            )
            assert geometry["scroll"] <= geometry["client"], (box, geometry)
            assert geometry["right"] <= geometry["colRight"] + 0.5 <= geometry["vw"] + 0.5, (box, geometry)
            button = page.locator(f'button[data-copy="{box}"]')
            expect(button).to_be_visible()
            button.click()
            expect(button).to_have_text("Copied")
            copied = page.evaluate("navigator.clipboard.readText()")
            assert copied == pre.text_content() and "vfweb-arith-drills" in copied, (box, copied)
        # the uv line is long: unwrapped, it would be wider than its box at these widths
        unwrapped = page.locator("#install-uv").evaluate(
            """e => { const c = e.cloneNode(true); c.style.whiteSpace = 'pre'; c.style.width = 'max-content';
                     e.parentNode.appendChild(c); const w = c.scrollWidth; c.remove(); return [w, e.clientWidth]; }"""
        )
        assert unwrapped[0] > unwrapped[1], unwrapped
        assert page.evaluate("window.__pwned === undefined")
    finally:
        context.close()
