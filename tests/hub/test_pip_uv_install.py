"""Real ``pip install`` and ``uv pip install`` from a running hub, into fresh virtual environments.

The hub is the uvicorn subprocess production runs (``python -m hub serve``). Packages are real wheels
and sdists built by hatchling; the installers are the real pip (from the test venv, ``--python`` into
the fresh venv) and the real uv. Each installer sees only the indexes given on its command line
(config files and find-links are switched off), so a pass proves the hub served the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from hub.testing import HubProcess, S3Config, run_hub
from tests.support.envpkg import BuiltPackage, build_env_package
from tests.support.services import start_postgres, start_s3

pytestmark = pytest.mark.slow

UV = Path(sys.executable).parent / "uv"
PREFIX = "vfe2e"  # names nobody publishes on public indexes, so a hit can only come from our hub


def _uv() -> str:
    if UV.exists():
        return str(UV)
    found = shutil.which("uv")
    if found:
        return found
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "uv>=0.4"], check=True, timeout=600)
    return str(UV)


def normal_index_urls() -> list[str]:
    """The indexes this machine's pip is configured with (``pip config list``), PyPI by default.

    The hub serves only environments; their other dependencies come from the user's normal index,
    which we hand to pip and uv as ``--extra-index-url`` exactly as a user would.
    """
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    index = "https://pypi.org/simple"
    extras: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        value = value.strip().strip("'\"")
        if key.endswith(".index-url"):
            index = value
        elif key.endswith(".extra-index-url"):
            extras.extend(value.split())
    env_index = os.environ.get("PIP_INDEX_URL")
    if env_index:
        index = env_index
    extras.extend(os.environ.get("PIP_EXTRA_INDEX_URL", "").split())
    urls: list[str] = []
    for u in [index, *extras]:
        if u and u not in urls:
            urls.append(u)
    return urls


def isolated_env(cache_dir: Path) -> dict[str, str]:
    """No pip/uv configuration from the machine: only command-line indexes count."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "UV_NO_CONFIG": "1",
            "UV_CACHE_DIR": str(cache_dir),
            "UV_PYTHON_DOWNLOADS": "never",
        }
    )
    if os.environ.get("PIP_CERT"):
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    return env


def with_token(url: str, token: str) -> str:
    """``http://__token__:TOKEN@host/...``: how pip and uv users pass a hub token (HTTP Basic)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"__token__:{token}@{parts.netloc}"))


@dataclass
class Installer:
    tool: str
    work: Path

    def install(
        self,
        *requirements: str,
        index_url: str,
        extra_index_urls: tuple[str, ...] = (),
        expect_ok: bool = True,
    ) -> tuple[Path, subprocess.CompletedProcess[str]]:
        venv = self.work / f"venv-{secrets.token_hex(4)}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        py = str(venv / "bin" / "python")
        extra: list[str] = []
        for u in extra_index_urls:
            extra += ["--extra-index-url", u]
        cache = self.work / f"cache-{secrets.token_hex(4)}"
        if self.tool == "pip":
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "--python",
                py,
                "install",
                "--no-cache-dir",
                "--index-url",
                index_url,
                *extra,
                *requirements,
            ]
        else:
            cmd = [_uv(), "pip", "install", "--python", py, "--index-url", index_url, *extra, *requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=isolated_env(cache))
        if expect_ok:
            assert proc.returncode == 0, f"{self.tool} failed:\n{proc.stdout}\n{proc.stderr}"
        else:
            assert proc.returncode != 0, f"{self.tool} unexpectedly succeeded:\n{proc.stdout}\n{proc.stderr}"
        return venv, proc


def installed(venv: Path) -> dict[str, str]:
    """``{normalised name: version}`` of what is installed in ``venv``."""
    code = (
        "import importlib.metadata as m, json, re;"
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
        " for d in m.distributions()}))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def run_in(venv: Path, code: str) -> str:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# --------------------------------------------------------------------------------------------------
# the hub and its content


@dataclass
class Published:
    hub: HubProcess
    alice: str  # alice's write token
    bob: str  # another user: must not see alice's private environment
    public: BuiltPackage
    private: BuiltPackage
    withdep: BuiltPackage
    yanky: list[BuiltPackage]


def publish_api(
    hub: HubProcess, token: str, owner: str, pkg: BuiltPackage, private: bool | None = None
) -> None:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (pkg.wheel, pkg.sdist)]
    data = {} if private is None else {"private": "true" if private else "false"}
    with hub.client(token) as c:
        r = c.post(f"/api/v1/environments/{owner}/{pkg.normalized}/versions", files=files, data=data)
    assert r.status_code in (200, 201), r.text


def publish_twine(hub: HubProcess, token: str, pkg: BuiltPackage) -> None:
    """The standard upload protocol, spoken by the real twine."""
    twine = Path(sys.executable).parent / "twine"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    proc = subprocess.run(
        [
            str(twine),
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--repository-url",
            f"{hub.url}/legacy/",
            "-u",
            "__token__",
            "-p",
            token,
            str(pkg.wheel),
            str(pkg.sdist),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def populate(hub: HubProcess, build_dir: Path) -> Published:
    with hub.client(hub.admin_token) as c:
        alice = c.post("/api/v1/users", json={"name": "alice"}).json()["token"]
        bob = c.post("/api/v1/users", json={"name": "bob"}).json()["token"]
    public = build_env_package(
        build_dir / "pub", f"{PREFIX}-public", "0.1.0", readme="# Public\n\nAnyone may install me.\n"
    )
    private = build_env_package(build_dir / "priv", f"{PREFIX}_Private", "0.2.0")
    withdep = build_env_package(
        build_dir / "dep", f"{PREFIX}-withdep", "1.0.0", dependencies=["six>=1.16", f"{PREFIX}-public>=0.1"]
    )
    yanky = [build_env_package(build_dir / f"y{v}", f"{PREFIX}-yanky", v) for v in ("1.0.0", "1.1.0")]
    publish_twine(hub, alice, public)
    publish_api(hub, alice, "alice", private, private=True)
    publish_api(hub, alice, "alice", withdep)
    for y in yanky:
        publish_api(hub, alice, "alice", y)
    with hub.client(alice) as c:
        r = c.post(
            f"/api/v1/environments/alice/{PREFIX}-yanky/versions/1.1.0/yank", json={"reason": "broken"}
        )
        assert r.status_code == 200, r.text
    return Published(hub, alice, bob, public, private, withdep, yanky)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """An embedded hub (SQLite + local files), as ``vf hub serve`` starts it."""
    root = tmp_path_factory.mktemp("hub-e2e")
    hub = run_hub(root / "data")
    try:
        yield populate(hub, root / "build")
    finally:
        hub.stop()


@pytest.fixture(params=["pip", "uv"])
def installer(request: pytest.FixtureRequest, tmp_path: Path) -> Installer:
    return Installer(request.param, tmp_path)


# --------------------------------------------------------------------------------------------------
# tests


def test_public_environment_installs_and_imports(published: Published, installer: Installer) -> None:
    venv, _ = installer.install(f"{PREFIX}-public", index_url=f"{published.hub.url}/simple/")
    assert installed(venv)[f"{PREFIX}-public"] == "0.1.0"
    assert run_in(venv, "import vfe2e_public as m; print(m.load_environment()['version'])") == "0.1.0"


def test_per_owner_index_installs_the_same_file(published: Published, installer: Installer) -> None:
    venv, _ = installer.install(f"{PREFIX}-public==0.1.0", index_url=f"{published.hub.url}/alice/simple/")
    assert installed(venv)[f"{PREFIX}-public"] == "0.1.0"


def test_private_environment_needs_the_token(published: Published, installer: Installer) -> None:
    hub = published.hub
    name = f"{PREFIX}-private"
    # Anonymous: the environment does not exist as far as the index is concerned.
    _, proc = installer.install(name, index_url=f"{hub.url}/simple/", expect_ok=False)
    assert "0.2.0" not in proc.stdout
    # Another user's valid token does not open it either.
    installer.install(name, index_url=with_token(f"{hub.url}/simple/", published.bob), expect_ok=False)
    # A wrong token is refused.
    installer.install(name, index_url=with_token(f"{hub.url}/simple/", "vfh_" + "x" * 40), expect_ok=False)
    # The owner's token, as Basic auth in the index URL, installs it from both index roots.
    venv, _ = installer.install(name, index_url=with_token(f"{hub.url}/simple/", published.alice))
    assert installed(venv)[name] == "0.2.0"
    venv, _ = installer.install(name, index_url=with_token(f"{hub.url}/alice/simple/", published.alice))
    assert run_in(venv, "import vfe2e_private; print(vfe2e_private.VERSION)") == "0.2.0"


def test_read_only_token_limited_to_the_environment_installs_it(
    published: Published, installer: Installer
) -> None:
    with published.hub.client(published.alice) as c:
        r = c.post(
            "/api/v1/tokens", json={"name": "ci", "scope": "read", "environment": f"alice/{PREFIX}-private"}
        )
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    venv, _ = installer.install(
        f"{PREFIX}-private", index_url=with_token(f"{published.hub.url}/simple/", token)
    )
    assert installed(venv)[f"{PREFIX}-private"] == "0.2.0"


def test_non_hub_dependency_resolves_from_the_normal_index(
    published: Published, installer: Installer
) -> None:
    extras = tuple(normal_index_urls())
    venv, _ = installer.install(
        f"{PREFIX}-withdep", index_url=f"{published.hub.url}/simple/", extra_index_urls=extras
    )
    have = installed(venv)
    assert have[f"{PREFIX}-withdep"] == "1.0.0"
    assert have[f"{PREFIX}-public"] == "0.1.0"  # the hub dependency, from the hub
    assert "six" in have  # the non-hub dependency, from the normal index
    # Without the normal index the dependency cannot resolve: the hub does not proxy other projects.
    installer.install(f"{PREFIX}-withdep", index_url=f"{published.hub.url}/simple/", expect_ok=False)


def test_yanked_version_is_skipped_unless_pinned(published: Published, installer: Installer) -> None:
    url = f"{published.hub.url}/simple/"
    venv, _ = installer.install(f"{PREFIX}-yanky", index_url=url)
    assert installed(venv)[f"{PREFIX}-yanky"] == "1.0.0"
    venv, _ = installer.install(f"{PREFIX}-yanky==1.1.0", index_url=url)
    assert installed(venv)[f"{PREFIX}-yanky"] == "1.1.0"
    # Un-yanking makes it the newest choice again.
    with published.hub.client(published.alice) as c:
        assert c.post(f"/api/v1/environments/alice/{PREFIX}-yanky/versions/1.1.0/unyank").status_code == 200
    try:
        venv, _ = installer.install(f"{PREFIX}-yanky", index_url=url)
        assert installed(venv)[f"{PREFIX}-yanky"] == "1.1.0"
    finally:
        with published.hub.client(published.alice) as c:
            r = c.post(
                f"/api/v1/environments/alice/{PREFIX}-yanky/versions/1.1.0/yank", json={"reason": "broken"}
            )
            assert r.status_code == 200


def test_downloads_by_installers_are_counted(published: Published, tmp_path: Path) -> None:
    with httpx.Client(base_url=published.hub.url) as c:
        before = c.get(f"/api/v1/environments/alice/{PREFIX}-public/downloads").json()["total"]
    Installer("pip", tmp_path).install(f"{PREFIX}-public", index_url=f"{published.hub.url}/simple/")
    with httpx.Client(base_url=published.hub.url) as c:
        after = c.get(f"/api/v1/environments/alice/{PREFIX}-public/downloads").json()["total"]
    assert after == before + 1


@pytest.mark.postgres
@pytest.mark.s3
def test_production_hub_postgres_s3_two_workers(tmp_path: Path) -> None:
    """The production shape: PostgreSQL, S3-compatible storage (SeaweedFS), several uvicorn workers."""
    pg = start_postgres()
    s3 = start_s3()
    try:
        storage = S3Config(
            endpoint_url=s3.endpoint_url,
            bucket=s3.create_bucket(),
            access_key_id=s3.access_key,
            secret_access_key=s3.secret_key,
            region=s3.region,
        )
        hub = run_hub(tmp_path / "data", database_url=pg.create_database(), storage=storage, workers=2)
        try:
            pub = populate(hub, tmp_path / "build")
            # The files really live in the bucket, not on the local disk.
            from hub.storage import is_blob_of

            keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket=storage.bucket).get("Contents", [])}
            wheel = pub.public.wheel
            assert any(is_blob_of(k, hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel.name) for k in keys)
            assert not list((tmp_path / "data").rglob(wheel.name))
            for tool in ("pip", "uv"):
                inst = Installer(tool, tmp_path / tool)
                inst.work.mkdir()
                venv, _ = inst.install(
                    f"{PREFIX}-withdep",
                    index_url=f"{hub.url}/simple/",
                    extra_index_urls=tuple(normal_index_urls()),
                )
                assert installed(venv)[f"{PREFIX}-public"] == "0.1.0"
                venv, _ = inst.install(
                    f"{PREFIX}-private", index_url=with_token(f"{hub.url}/simple/", pub.alice)
                )
                assert installed(venv)[f"{PREFIX}-private"] == "0.2.0"
                inst.install(f"{PREFIX}-private", index_url=f"{hub.url}/simple/", expect_ok=False)
        finally:
            hub.stop()
    finally:
        s3.stop()
        pg.stop()
