"""Publishing through the API and the legacy upload API: metadata from the archive, immutability,
idempotence, one file at a time, mismatches, and real ``twine upload``."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from hub.testing import run_hub
from tests.hub.helpers import HubClient, PackageFactory, make_sdist, make_wheel


def test_metadata_read_from_the_archive(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    pkg = packages.get(
        "meta-env",
        "1.2.0",
        tags=["Math", "tool_use"],
        dependencies=["verifiers>=0.1.9", "sympy>=1.12"],
        description="Solve equations.",
        readme="# Meta env\n\nSolve *equations*.\n",
        eval_defaults={"num_examples": 7, "rollouts_per_example": 3, "model": "tiny"},
        requires_python=">=3.11",
    )
    r = hub.publish("alice", pkg, alice)
    assert r.status_code == 201, r.text
    v = hub.get("/api/v1/environments/alice/meta-env/versions/1.2.0").json()
    assert v["summary"] == "Solve equations."
    assert v["requires_python"] == ">=3.11"
    assert sorted(v["dependencies"]) == ["sympy>=1.12", "verifiers>=0.1.9"]
    assert v["tags"] == ["math", "tool-use"]
    assert v["eval_defaults"] == {"num_examples": 7, "rollouts_per_example": 3, "model": "tiny"}
    assert v["license"] == "Apache-2.0"
    assert v["content_hash"].startswith("sha256:")
    kinds = sorted(f["kind"] for f in v["files"])
    assert kinds == ["sdist", "wheel"]
    env = hub.get("/api/v1/environments/alice/meta-env").json()
    assert env["description"] == "Solve equations."
    assert env["tags"] == ["math", "tool-use"]
    assert env["latest_version"] == "1.2.0"
    readme = hub.get("/api/v1/environments/alice/meta-env/readme").json()
    assert "<h1>Meta env</h1>" in readme["html"] and "<em>equations</em>" in readme["html"]


def test_immutable_versions_and_idempotent_reupload(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    pkg = packages.get("immut-env", "1.0.0")
    assert hub.publish("alice", pkg, alice).status_code == 201
    again = hub.publish("alice", pkg, alice)
    assert again.status_code == 200
    assert all(f["created"] is False for f in again.json()["files"])
    # Same version, different bytes: 409, and the stored file is unchanged.
    other = packages.get("immut-env", "1.0.0", description="changed")
    before = hub.row_counts()
    r = hub.publish("alice", other, alice)
    assert r.status_code == 409
    assert "immutable" in r.json()["detail"]
    assert hub.row_counts() == before
    stored = hub.get("/api/v1/environments/alice/immut-env/versions/1.0.0").json()["files"]
    assert {f["sha256"] for f in stored} == {
        __import__("hashlib").sha256(p.read_bytes()).hexdigest() for p in (pkg.wheel, pkg.sdist)
    }
    assert len(hub.stored_keys()) == 2


def test_one_file_at_a_time(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    pkg = packages.get("split-env", "0.3.0", tags=["split"], eval_defaults={"num_examples": 2})
    r = hub.publish("alice", pkg, alice, which=("wheel",))
    assert r.status_code == 201 and r.json()["created_version"] is True
    v = hub.get("/api/v1/environments/alice/split-env/versions/0.3.0").json()
    assert [f["kind"] for f in v["files"]] == ["wheel"]
    assert v["content_hash"] is None
    r = hub.publish("alice", pkg, alice, which=("sdist",))
    assert r.status_code == 201 and r.json()["created_version"] is False
    v = hub.get("/api/v1/environments/alice/split-env/versions/0.3.0").json()
    assert sorted(f["kind"] for f in v["files"]) == ["sdist", "wheel"]
    assert v["content_hash"].startswith("sha256:")
    assert v["eval_defaults"] == {"num_examples": 2}


def test_request_mismatches(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    pkg = packages.get("right-env", "1.0.0")
    r = hub.publish("alice", pkg, alice, name="wrong-env")
    assert r.status_code == 400 and "right-env" in r.json()["detail"]
    # Files of two different releases in one request.
    other = packages.get("right-env", "1.0.1")
    r = hub.publish_files(
        "alice",
        "right-env",
        [(pkg.wheel.name, pkg.wheel.read_bytes()), (other.sdist.name, other.sdist.read_bytes())],
        alice,
    )
    assert r.status_code == 400 and "different releases" in r.json()["detail"]
    # Not a distribution at all.
    r = hub.publish_files("alice", "right-env", [("notes.txt", b"hello")], alice)
    assert r.status_code == 400
    # Read-only tokens and strangers cannot publish.
    ro = hub.token(alice, scope="read")
    assert hub.publish("alice", pkg, ro).status_code == 403
    bob = hub.user("bob")
    assert hub.publish("alice", pkg, bob).status_code == 403
    assert hub.publish("alice", pkg, None).status_code == 401  # type: ignore[arg-type]
    assert hub.row_counts() == {"environments": 0, "versions": 0, "files": 0}
    assert hub.stored_keys() == [] and hub.temp_files() == []


def test_org_members_publish_by_role(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    writer = hub.user("wendy")
    reader = hub.user("rita")
    hub.org(alice, "acme", {"wendy": "write", "rita": "read"})
    pkg = packages.get("acme-env", "1.0.0")
    assert hub.publish("acme", pkg, reader).status_code == 403
    assert hub.publish("acme", pkg, writer).status_code == 201
    assert hub.get("/api/v1/environments/acme/acme-env").json()["owner"] == "acme"
    # An owner-limited token can publish only under that owner.
    scoped = hub.token(writer, owner="acme")
    assert hub.publish("wendy", packages.get("wendy-env", "1.0.0"), scoped).status_code == 403
    assert hub.publish("acme", packages.get("acme-env", "1.0.1"), scoped).status_code == 201


def test_legacy_upload_form(hub: HubClient, packages: PackageFactory) -> None:
    alice = hub.user("alice")
    pkg = packages.get("legacy-env", "2.0.0")
    import hashlib

    data = pkg.wheel.read_bytes()
    form = {
        ":action": "file_upload",
        "protocol_version": "1",
        "name": "legacy-env",
        "version": "2.0.0",
        "filetype": "bdist_wheel",
        "sha256_digest": hashlib.sha256(data).hexdigest(),
    }
    r = hub.client.post(
        "/legacy/", data=form, files={"content": (pkg.wheel.name, data)}, auth=("__token__", alice)
    )
    assert r.status_code == 200, r.text
    assert hub.get("/api/v1/environments/alice/legacy-env").json()["latest_version"] == "2.0.0"
    # Wrong digest: rejected, nothing stored.
    sd = pkg.sdist.read_bytes()
    bad = dict(form, filetype="sdist", sha256_digest="0" * 64)
    r = hub.client.post(
        "/legacy/", data=bad, files={"content": (pkg.sdist.name, sd)}, auth=("__token__", alice)
    )
    assert r.status_code == 400 and "sha256" in r.json()["detail"]
    # Form fields must match the archive.
    bad = dict(form, filetype="sdist", sha256_digest=hashlib.sha256(sd).hexdigest(), version="2.0.1")
    r = hub.client.post(
        "/legacy/", data=bad, files={"content": (pkg.sdist.name, sd)}, auth=("__token__", alice)
    )
    assert r.status_code == 400
    assert hub.row_counts()["files"] == 1
    # No credentials: 401 with a Basic challenge (twine then prompts).
    r = hub.client.post("/legacy/", data=form, files={"content": (pkg.wheel.name, data)})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")


def test_twine_and_uv_publish_against_a_running_hub(tmp_path: Path, packages: PackageFactory) -> None:
    """The real ``twine upload`` and ``uv publish`` (subprocesses) publish to ``/legacy/``; a re-upload is
    idempotent and a changed file with the same name is refused."""
    with run_hub(tmp_path / "hub") as h:
        r = h.client(h.admin_token).post("/api/v1/users", json={"name": "tess"})
        token = r.json()["token"]
        pkg = packages.get("twine-env", "0.4.0", tags=["twine"])
        env = {
            **os.environ,
            "TWINE_USERNAME": "__token__",
            "TWINE_PASSWORD": token,
            "TWINE_NON_INTERACTIVE": "1",
        }
        cmd = [
            sys.executable,
            "-m",
            "twine",
            "upload",
            "--disable-progress-bar",
            "--repository-url",
            f"{h.url}/legacy/",
            str(pkg.wheel),
            str(pkg.sdist),
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        with h.client() as c:
            v = c.get("/api/v1/environments/tess/twine-env/versions/0.4.0").json()
            assert sorted(f["kind"] for f in v["files"]) == ["sdist", "wheel"]
            assert v["tags"] == ["twine"]
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        changed = packages.get("twine-env", "0.4.0", description="other bytes")
        cmd2 = [*cmd[:-2], str(changed.wheel)]
        refused = subprocess.run(cmd2, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0
        assert "409" in refused.stdout + refused.stderr
        # uv publish speaks the same protocol.
        upkg = packages.get("uvpub-env", "0.2.0", tags=["uv"])
        uv = Path(sys.executable).parent / "uv"
        out = subprocess.run(
            [
                str(uv),
                "publish",
                "--publish-url",
                f"{h.url}/legacy/",
                "--username",
                "__token__",
                "--password",
                token,
                str(upkg.wheel),
                str(upkg.sdist),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        with h.client() as c:
            v = c.get("/api/v1/environments/tess/uvpub-env/versions/latest").json()
            assert v["version"] == "0.2.0" and sorted(f["kind"] for f in v["files"]) == ["sdist", "wheel"]
        bad_env = dict(env, TWINE_PASSWORD="vfh_not-a-token")
        denied = subprocess.run(cmd, env=bad_env, capture_output=True, text=True, timeout=120)
        assert denied.returncode != 0
        assert token not in h.logs()


def test_handmade_archives_are_accepted_when_well_formed(hub: HubClient) -> None:
    """Sanity for the attack corpus: the hand-made builders produce valid uploads when not tampered."""

    alice = hub.user("alice")
    r = hub.publish_files("alice", "attack-env", [make_wheel(), make_sdist()], alice)
    assert r.status_code == 201, r.text


def test_rejected_identical_upload_never_removes_the_published_file(
    hub: HubClient, packages: PackageFactory
) -> None:
    """Blobs are stored per upload (content address + nonce): a rejected or redundant upload of the same
    bytes deletes only what it wrote itself, never the file a release references."""
    alice = hub.user("alice")
    mallory = hub.user("mallory")
    pkg = packages.get("shared-bytes", "1.0.0")
    assert hub.publish("alice", pkg, alice).status_code == 201
    keys = sorted(hub.stored_keys())
    assert hub.publish("alice", pkg, mallory).status_code == 403
    assert hub.publish("mallory", pkg, mallory).status_code == 403
    assert hub.publish("alice", pkg, alice).status_code == 200
    assert sorted(hub.stored_keys()) == keys
    doc = hub.get("/simple/shared-bytes/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}).json()
    for f in doc["files"]:
        assert hashlib.sha256(hub.get(f["url"]).content).hexdigest() == f["hashes"]["sha256"]
