"""The JSON API: search, detail, versions and latest, README sanitising, source browsing, stars,
evals and the leaderboard, accounts."""

from __future__ import annotations

from tests.hub.helpers import HubClient, PackageFactory, make_sdist, make_wheel


def _seed(hub: HubClient, packages: PackageFactory) -> str:
    alice = hub.user("alice")
    bob = hub.user("bob")
    specs = [
        ("alice", alice, "gsm8k-math", "Grade school math word problems.", ["math", "reasoning"]),
        ("alice", alice, "wordle-game", "Play wordle in several turns.", ["game", "multi-turn"]),
        ("bob", bob, "math-proofs", "Check proofs with a judge.", ["math", "judge"]),
        ("bob", bob, "code-tests", "Write code that passes unit tests.", ["code", "sandbox"]),
    ]
    for owner, tok, name, desc, tags in specs:
        r = hub.publish(owner, packages.get(name, "1.0.0", description=desc, tags=tags), tok)
        assert r.status_code == 201, r.text
    return alice


def test_search_text_tags_owner_sort_pagination(hub: HubClient, packages: PackageFactory) -> None:
    _seed(hub, packages)

    def ids(**params: object) -> list[str]:
        r = hub.get("/api/v1/environments", params=params)
        assert r.status_code == 200, r.text
        return [i["id"] for i in r.json()["items"]]

    assert sorted(ids(q="math")) == ["alice/gsm8k-math", "bob/math-proofs"]
    assert ids(q="gsm") == ["alice/gsm8k-math"]  # prefix match on a name part
    assert ids(q="proofs judge") == ["bob/math-proofs"]  # every word must match
    assert ids(q="unit tests") == ["bob/code-tests"]  # description
    assert ids(q="sandbox") == ["bob/code-tests"]  # tags
    assert ids(q="nothing-like-this") == []
    assert ids(q="'\"*)(  OR 1=1 --") == []  # query syntax is never interpreted
    assert sorted(ids(tag="math")) == ["alice/gsm8k-math", "bob/math-proofs"]
    assert ids(tag=["math", "judge"]) == ["bob/math-proofs"]
    assert sorted(ids(owner="alice")) == ["alice/gsm8k-math", "alice/wordle-game"]
    assert ids(sort="name") == ["bob/code-tests", "alice/gsm8k-math", "bob/math-proofs", "alice/wordle-game"]
    page1 = hub.get("/api/v1/environments", params={"sort": "name", "per_page": 3}).json()
    page2 = hub.get("/api/v1/environments", params={"sort": "name", "per_page": 3, "page": 2}).json()
    assert page1["total"] == page2["total"] == 4
    assert [i["id"] for i in page1["items"] + page2["items"]] == ids(sort="name")
    assert hub.get("/api/v1/environments", params={"per_page": 1000}).status_code == 422
    assert hub.get("/api/v1/environments", params={"sort": "bogus"}).status_code == 422
    # Sort by downloads and by stars.
    doc = hub.get("/simple/wordle-game/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}).json()
    hub.get(doc["files"][0]["url"])
    assert ids(sort="downloads")[0] == "alice/wordle-game"
    bob = hub.user("carol")
    assert hub.req("PUT", "/api/v1/environments/bob/code-tests/star", bob).json() == {
        "starred": True,
        "stars": 1,
    }
    assert hub.req("PUT", "/api/v1/environments/bob/code-tests/star", bob).json()["stars"] == 1  # idempotent
    assert ids(sort="stars")[0] == "bob/code-tests"
    assert hub.get("/api/v1/environments/bob/code-tests", bob).json()["starred"] is True
    assert hub.req("DELETE", "/api/v1/environments/bob/code-tests/star", bob).json() == {
        "starred": False,
        "stars": 0,
    }
    # Updated: the most recent publish comes first.
    assert ids(sort="updated")[0] == "bob/code-tests"


def test_versions_latest_and_prereleases(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    for v in ("1.0.0", "1.10.0", "1.9.0", "2.0.0rc1"):
        assert hub.publish("alice", packages.get("ver-env", v), alice).status_code == 201
    vs = hub.get("/api/v1/environments/alice/ver-env/versions").json()
    assert [v["version"] for v in vs] == ["2.0.0rc1", "1.10.0", "1.9.0", "1.0.0"]
    assert [v["prerelease"] for v in vs] == [True, False, False, False]
    assert hub.get("/api/v1/environments/alice/ver-env/versions/latest").json()["version"] == "1.10.0"
    assert hub.get("/api/v1/environments/alice/ver-env").json()["latest_version"] == "1.10.0"
    # Non-normalised version strings resolve to the normalised one.
    assert hub.get("/api/v1/environments/alice/ver-env/versions/2.0.0-rc.1").json()["version"] == "2.0.0rc1"
    assert hub.get("/api/v1/environments/alice/ver-env/versions/not a version").status_code == 400
    assert hub.get("/api/v1/environments/alice/ver-env/versions/3.0").status_code == 404
    for v in ("1.10.0", "1.9.0", "1.0.0"):
        hub.post(f"/api/v1/environments/alice/ver-env/versions/{v}/yank", alice, json={"reason": "old"})
    # Only a pre-release is left un-yanked: latest falls back to it.
    assert hub.get("/api/v1/environments/alice/ver-env/versions/latest").json()["version"] == "2.0.0rc1"
    hub.post("/api/v1/environments/alice/ver-env/versions/2.0.0rc1/yank", alice)
    assert hub.get("/api/v1/environments/alice/ver-env/versions/latest").status_code == 404
    assert hub.get("/api/v1/environments/alice/ver-env").json()["latest_version"] is None


def test_readme_is_sanitised(hub: HubClient, packages: PackageFactory) -> None:

    alice = hub.user("alice")
    evil = (
        "# Title\n\n<script>alert('x')</script>\n\n<img src=x onerror=alert(1)>\n\n"
        '[click](javascript:alert(1))\n\n<a href="javascript:alert(2)">a</a>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n'
    )
    assert hub.publish("alice", packages.get("readme-env", "1.0.0", readme=evil), alice).status_code == 201
    html = hub.get("/api/v1/environments/alice/readme-env/readme").json()["html"]
    assert "<h1>Title</h1>" in html and "<table>" in html
    low = html.lower()
    assert "<script" not in low and "onerror" not in low and 'href="javascript' not in low


def test_a_readme_too_long_for_markdown_is_shown_as_text() -> None:
    """Past the cached size a README is escaped text, not markdown: no upload buys seconds of CPU on
    every anonymous view (markdown costs about 10 us a character)."""
    from hub.render import CACHE_MAX_SOURCE, render_readme

    short = render_readme("# Title\n\n[x](https://a.example)", "text/markdown")
    assert "<h1>Title</h1>" in short and "<a href" in short
    hostile = "[x<script>" * (CACHE_MAX_SOURCE // 5)
    out = render_readme(hostile, "text/markdown")
    assert out.startswith("<pre>") and "<script" not in out and "&lt;script&gt;" in out


def test_source_browsing(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("src-env", "1.0.0"), alice).status_code == 201
    files = hub.get("/api/v1/environments/alice/src-env/versions/1.0.0/source").json()["files"]
    paths = [f["path"] for f in files]
    assert "pyproject.toml" in paths and "src_env/__init__.py" in paths
    r = hub.get("/api/v1/environments/alice/src-env/versions/latest/source/src_env/__init__.py")
    assert r.status_code == 200 and "def load_environment" in r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert (
        hub.get("/api/v1/environments/alice/src-env/versions/1.0.0/source/../../etc/passwd").status_code
        == 404
    )
    assert hub.get("/api/v1/environments/alice/src-env/versions/1.0.0/source/missing.py").status_code == 404
    # A wheel-only version has no source to browse.
    assert hub.publish("alice", packages.get("src-env", "1.1.0"), alice, which=("wheel",)).status_code == 201
    assert hub.get("/api/v1/environments/alice/src-env/versions/1.1.0/source").status_code == 404


def test_evals_and_leaderboard_ordering(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    bob = hub.user("bob")
    for v in ("1.0.0", "1.1.0"):
        assert hub.publish("alice", packages.get("lb-env", v), alice).status_code == 201
    runs = [
        (alice, "1.0.0", "model-a", 0.50, 40, {"temperature": 0.7}),
        (alice, "1.1.0", "model-a", 0.75, 40, {"temperature": 0.2}),
        (bob, "1.1.0", "model-b", 0.75, 80, {"temperature": 1.0}),
        (bob, "1.0.0", "model-c", 0.90, 10, {}),
        (alice, "1.1.0", "model-c", 0.10, 100, {}),
    ]
    for tok, ver, model, avg, n, sampling in runs:
        md = {
            "model": model,
            "avg_reward": avg,
            "num_rollouts": n,
            "sampling_args": sampling,
            "num_examples": n // 2,
            "rollouts_per_example": 2,
            "env_id": "lb-env",
        }
        r = hub.post(
            f"/api/v1/environments/alice/lb-env/versions/{ver}/evals",
            tok,
            json={"metadata": md, "summary": {"note": "ok"}},
        )
        assert r.status_code == 201, r.text
    # a run's error counts are stored and shown (infrastructure failures are not in avg_reward)
    md = {"model": "model-d", "avg_reward": 0.2, "num_rollouts": 12, "num_errors": 5, "num_infra_errors": 4}
    r = hub.post("/api/v1/environments/alice/lb-env/versions/1.0.0/evals", bob, json={"metadata": md})
    assert r.status_code == 201 and (r.json()["num_errors"], r.json()["num_infra_errors"]) == (5, 4), r.text
    row_d = next(r for r in hub.get("/api/v1/environments/alice/lb-env/leaderboard").json() if r["model"] == "model-d")
    assert (row_d["num_errors"], row_d["num_infra_errors"]) == (5, 4)
    assert "5 (4 infra)" in hub.get("/alice/lb-env").text
    for bad in ({"num_errors": 13}, {"num_errors": 2, "num_infra_errors": 3}, {"num_errors": -1}):
        r = hub.post("/api/v1/environments/alice/lb-env/versions/1.0.0/evals", bob,
                     json={"metadata": {**md, **bad}})  # fmt: skip
        assert r.status_code == 422, bad
    assert hub.req("DELETE", f"/api/v1/environments/alice/lb-env/evals/{row_d['eval_id']}", bob).status_code == 204
    lb = hub.get("/api/v1/environments/alice/lb-env/leaderboard").json()
    assert lb[0]["num_errors"] is None  # posted without counts
    assert [(r["model"], r["avg_reward"], r["version"], r["rank"]) for r in lb] == [
        ("model-c", 0.90, "1.0.0", 1),
        ("model-b", 0.75, "1.1.0", 2),  # ties on reward: more rollouts first
        ("model-a", 0.75, "1.1.0", 3),
    ]
    assert lb[2]["sampling_args"] == {"temperature": 0.2} and lb[2]["num_rollouts"] == 40
    assert lb[1]["submitter"] == "bob"
    evs = hub.get("/api/v1/environments/alice/lb-env/evals", params={"version": "1.0.0"}).json()
    assert sorted(e["model"] for e in evs) == ["model-a", "model-c"]
    assert evs[0]["summary"] == {"note": "ok"}
    # Validation: model and a finite avg_reward are required.
    for md in (
        {"avg_reward": 1},
        {"model": "m"},
        {"model": "m", "avg_reward": "high"},
        {"model": "", "avg_reward": 1},
        {"model": "m", "avg_reward": True},
        {"model": "m", "avg_reward": 1, "num_rollouts": -1},
    ):
        r = hub.post("/api/v1/environments/alice/lb-env/versions/1.0.0/evals", alice, json={"metadata": md})
        assert r.status_code == 422, md
    r = hub.post(
        "/api/v1/environments/alice/lb-env/versions/9.9.9/evals",
        alice,
        json={"metadata": {"model": "m", "avg_reward": 1}},
    )
    assert r.status_code == 404
    # Deleting the best result of model-c promotes its next best.
    best_c = next(
        e for e in hub.get("/api/v1/environments/alice/lb-env/evals").json() if e["avg_reward"] == 0.9
    )
    assert (
        hub.req("DELETE", f"/api/v1/environments/alice/lb-env/evals/{best_c['id']}", alice).status_code == 204
    )
    lb = hub.get("/api/v1/environments/alice/lb-env/leaderboard").json()
    assert [r["model"] for r in lb] == ["model-b", "model-a", "model-c"]


def test_accounts(hub: HubClient) -> None:
    alice = hub.user("alice")
    assert hub.get("/api/v1/whoami", alice).json()["name"] == "alice"
    assert hub.get("/api/v1/whoami").status_code == 401
    assert hub.post("/api/v1/users", alice, json={"name": "mallory"}).status_code == 403
    assert hub.post("/api/v1/users", hub.admin_token, json={"name": "Alice"}).status_code == 409
    assert hub.post("/api/v1/users", hub.admin_token, json={"name": "bad name!"}).status_code == 400
    assert hub.post("/api/v1/users", hub.admin_token, json={"name": "simple"}).status_code == 400
    owner = hub.get("/api/v1/owners/alice").json()
    assert owner["kind"] == "user" and owner["environments"] == []
    assert hub.get("/api/v1/owners/nobody").status_code == 404


def test_create_private_env_then_publish(hub: HubClient) -> None:
    alice = hub.user("alice")
    r = hub.post(
        "/api/v1/environments", alice, json={"owner": "alice", "name": "Attack_Env", "private": True}
    )
    assert r.status_code == 201 and r.json()["name"] == "attack-env" and r.json()["private"] is True
    assert (
        hub.post("/api/v1/environments", alice, json={"owner": "alice", "name": "attack-env"}).status_code
        == 409
    )
    assert hub.publish_files("alice", "attack-env", [make_wheel(), make_sdist()], alice).status_code == 201
    assert hub.get("/api/v1/environments/alice/attack-env").status_code == 404
    assert hub.get("/api/v1/environments/alice/attack-env", alice).json()["latest_version"] == "0.1.0"
    r = hub.req("PATCH", "/api/v1/environments/alice/attack-env", alice, json={"private": False})
    assert r.status_code == 200
    assert hub.get("/api/v1/environments/alice/attack-env").status_code == 200
    assert "attack-env" in hub.get("/simple/").text


def test_did_you_mean_hints_only_visible_names(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    assert hub.publish("alice", packages.get("math-env", "1.0.0"), alice).status_code == 201
    assert hub.publish("alice", packages.get("math-envs", "1.0.0"), alice, private=True).status_code == 201
    r = hub.get("/api/v1/environments/alice/mth-env")
    assert r.status_code == 404 and "did you mean alice/math-env?" in r.json()["detail"]
    assert "math-envs" not in r.json()["detail"]
    assert "alice/math-envs" in hub.get("/api/v1/environments/alice/mth-env", alice).json()["detail"]
    assert "did you mean" not in hub.get("/api/v1/environments/alice/zzzzzz").json()["detail"]


def test_install_commands_are_the_hubs_one_set(hub: HubClient, packages: PackageFactory) -> None:
    """One set of install commands (environment and version detail, the page shows the same): the same
    owner's environments come from the owner's index with the environment, everything else (another
    owner's environment too) from the public index first; private: the token from VF_HUB_TOKEN."""
    alice, bob = hub.user("alice"), hub.user("bob")
    assert hub.publish("bob", packages.get("bob-util", "1.0.0"), bob).status_code == 201
    helper = packages.get("alice-helper", "0.2.0", dependencies=["numpy>=1"])
    assert hub.publish("alice", helper, alice, private=True).status_code == 201
    env = packages.get("alice-main", "1.0.0", dependencies=["alice-helper>=0.1", "bob-util", "regex"])
    assert hub.publish("alice", env, alice, private=True).status_code == 201

    version = hub.get("/api/v1/environments/alice/alice-main/versions/1.0.0", alice).json()["install_commands"]
    detail = hub.get("/api/v1/environments/alice/alice-main", alice).json()
    assert detail["install_commands"] == version and detail["install"] == " && ".join(version["pip"])
    assert version == {
        "vf": "vf install alice/alice-main@1.0.0",
        "uv": "uv pip install --no-config --index-url https://pypi.org/simple/ bob-util regex 'numpy>=1' && "
              'uv pip install --no-config --index-url "http://__token__:${VF_HUB_TOKEN}@testserver/alice/simple/" '
              "alice-main==1.0.0",
        "pip": ["pip install --isolated --index-url https://pypi.org/simple/ bob-util regex 'numpy>=1'",
                'pip install --isolated --index-url "http://__token__:${VF_HUB_TOKEN}@testserver/alice/simple/" '
                "alice-main==1.0.0"],
        "note": "private: export VF_HUB_TOKEN=<a read token> for uv and pip; vf install uses your vf login",
        "needs_access": False,
        "needs_access_extras": [],
    }
    assert alice not in str(version)


def test_every_json_route_declares_its_response_model(hub: HubClient) -> None:
    """Each /api/v1 route that answers JSON declares its schema (file routes declare their media type; a
    delete of an eval result answers 204 with no body)."""
    spec = hub.get("/openapi.json").json()
    missing = []
    for path, ops in spec["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, op in ops.items():
            ok = [c for c, r in op["responses"].items() if c.startswith("2")]
            if ok == ["204"]:
                continue
            content = op["responses"][ok[0]].get("content", {})
            if content and "application/json" not in content:  # a file
                continue
            schema = content.get("application/json", {}).get("schema", {})
            if "$ref" not in schema.get("items", schema):  # a model (or a list of one), not a bare dict
                missing.append(f"{method.upper()} {path}")
    assert missing == []
