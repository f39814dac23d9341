"""`vf pull` and `vf install` against a hostile hub (a real loopback HTTP server of the test's own):
file names, versions and archives chosen to overwrite the user's `.bashrc`, write outside the target,
plant links or devices, or unpack without bound, and indexes that try dependency confusion. Every
attack fails with one clear error and leaves the home folder, the working folder and the Python
environment as they were."""

from __future__ import annotations

import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hubclient.helpers import VF, fresh_venv
from tests.hubclient.hostile import HostileHub, sdist, wheel

ORIGINAL = "# the user's own shell settings\n"


@pytest.fixture
def evil() -> Iterator[HostileHub]:
    hub = HostileHub()
    yield hub
    hub.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(ORIGINAL)
    return home


def make_vf(tmp_path: Path, hub: HostileHub, *, python: str = sys.executable) -> VF:
    work = tmp_path / "home" / "work" / "deep"
    work.mkdir(parents=True, exist_ok=True)
    return VF(python, tmp_path / "config", hub.url, work, "vfh_" + "a" * 43)


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def refused(res, *words: str) -> str:
    assert res.code != 0, res.text
    lines = [ln for ln in res.err.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: "), res.text
    for w in words:
        assert w in res.err, res.text
    return res.err


GOOD_SDIST = [("evil_env-1.0.0/PKG-INFO", b"Metadata-Version: 2.1\nName: evil-env\nVersion: 1.0.0\n"),
              ("evil_env-1.0.0/evil_env/__init__.py", b"x = 1\n")]


# ------------------------------------------------------------------------------------------- pull
@pytest.mark.parametrize("attack", ["absolute-name", "dotdot-name", "separator-name", "other-project",
                                    "version-path", "version-swap"])
def test_pull_refuses_hostile_names_and_versions(attack: str, evil: HostileHub, home: Path,
                                                 tmp_path: Path) -> None:
    vf = make_vf(tmp_path, evil)
    good = sdist(GOOD_SDIST)
    filename, version, asked = "evil_env-1.0.0.tar.gz", "1.0.0", "1.0.0"
    if attack == "absolute-name":
        filename = str(home / ".bashrc")
    elif attack == "dotdot-name":
        filename = "../../../.bashrc"
    elif attack == "separator-name":
        filename = "evil_env-1.0.0.tar.gz/../../../.bashrc"
    elif attack == "other-project":
        filename = "victim-1.0.0.tar.gz"
    elif attack == "version-path":
        asked, version = "latest", "../../../.bashrc"  # the default folder would be NAME-VERSION
    elif attack == "version-swap":
        version = "6.6.6"
    evil.version_detail("evil", "evil-env", asked, version, filename, good)
    before = snapshot(home)
    target = "evil/evil-env" if asked == "latest" else f"evil/evil-env@{asked}"
    res = vf("pull", target, HOME=str(home))
    refused(res, "refusing")
    assert snapshot(home) == before  # .bashrc untouched, nothing new anywhere under home
    assert (home / ".bashrc").read_text() == ORIGINAL


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _dev(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info


def _zeros(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


@pytest.mark.parametrize("attack", ["dotdot-member", "dotdot-dir", "dotdot-dir-deep", "absolute-member",
                                    "absolute-dir", "symlink-out", "hardlink-out", "device", "outside-top", "bomb",
                                    "link-then-write"])
def test_pull_refuses_hostile_archives(attack: str, evil: HostileHub, home: Path, tmp_path: Path) -> None:
    vf = make_vf(tmp_path, evil)
    members: list = list(GOOD_SDIST)
    if attack == "dotdot-member":
        members.append(("evil_env-1.0.0/../../../../.bashrc", b"echo pwned\n"))
    elif attack == "dotdot-dir":  # a folder member: would land in the working folder
        members.append(_dir("evil_env-1.0.0/../../x/"))
    elif attack == "dotdot-dir-deep":  # ... or above it, in the home folder
        members.append(_dir("evil_env-1.0.0/../../../../x/"))
    elif attack == "absolute-member":
        members.append((str(home / ".bashrc"), b"echo pwned\n"))
    elif attack == "absolute-dir":
        members.append(_dir(str(home / "x") + "/"))
    elif attack == "symlink-out":
        members.append(_link("evil_env-1.0.0/rc", str(home / ".bashrc"), tarfile.SYMTYPE))
    elif attack == "hardlink-out":
        members.append(_link("evil_env-1.0.0/rc", str(home / ".bashrc"), tarfile.LNKTYPE))
    elif attack == "device":
        members.append(_dev("evil_env-1.0.0/null"))
    elif attack == "outside-top":
        members.append(("other-9.9/.bashrc", b"echo pwned\n"))
    elif attack == "bomb":  # 64 MiB of zeros packs into ~64 KiB: refused on its header, before unpacking
        members.append(_zeros("evil_env-1.0.0/zeros.bin", 64 << 20))
    elif attack == "link-then-write":
        members.append(_link("evil_env-1.0.0/sub", str(home), tarfile.SYMTYPE))
        members.append(("evil_env-1.0.0/sub/.bashrc", b"echo pwned\n"))
    evil.version_detail("evil", "evil-env", "1.0.0", "1.0.0", "evil_env-1.0.0.tar.gz", sdist(members))
    before_home = snapshot(home)
    res = vf("pull", "evil/evil-env@1.0.0", HOME=str(home))
    refused(res, "refusing evil_env-1.0.0.tar.gz")
    assert snapshot(home) == before_home
    # Nothing half-written: no target folder, no temporary folder left in the working folder.
    assert list(vf.cwd.iterdir()) == []


def test_pull_of_an_honest_archive_works_and_names_come_from_the_checked_version(evil: HostileHub, home: Path,
                                                                                 tmp_path: Path) -> None:
    vf = make_vf(tmp_path, evil)
    evil.version_detail("evil", "evil-env", "latest", "1.0.0", "evil_env-1.0.0.tar.gz", sdist(GOOD_SDIST))
    res = vf("pull", "evil/evil-env", HOME=str(home))
    assert res.code == 0, res.text
    assert sorted(p.name for p in vf.cwd.iterdir()) == ["evil-env-1.0.0"]
    assert (vf.cwd / "evil-env-1.0.0" / "evil_env" / "__init__.py").read_text() == "x = 1\n"


def test_member_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.hub_client import files
    from verifiers.hub_client.api import HubClientError

    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(sdist([("p-1.0/PKG-INFO", b"x"), ("p-1.0/big", b"y" * 5000)]))
    monkeypatch.setattr(files, "MAX_MEMBER_BYTES", 4096)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(HubClientError, match="limit"):
        files.safe_extract_sdist(archive, dest, top=("p", "1.0"))


# ---------------------------------------------------------------------------------------- install
@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    return fresh_venv(tmp_path_factory.mktemp("venv") / "venv")


def _installed(python: str, module: str) -> bool:
    import subprocess

    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


@pytest.mark.parametrize("attack", ["absolute-name", "dotdot-name", "other-project", "not-an-archive",
                                    "bad-digest"])
def test_install_refuses_hostile_index_pages(attack: str, evil: HostileHub, home: Path, tmp_path: Path,
                                             venv_python: str) -> None:
    vf = make_vf(tmp_path, evil, python=venv_python)
    data = wheel("evil-env", "1.0.0")
    filename = "evil_env-1.0.0-py3-none-any.whl"
    if attack == "absolute-name":
        filename = str(home / ".bashrc")
    elif attack == "dotdot-name":
        filename = "../../../.bashrc"
    elif attack == "other-project":
        filename = "victim-1.0.0-py3-none-any.whl"
    elif attack == "not-an-archive":
        filename = "evil_env-1.0.0.sh"
    evil.project_page("evil", "evil-env", [(filename, data)])
    if attack == "bad-digest":
        page = evil.routes["/evil/simple/evil-env/"]
        evil.routes["/evil/simple/evil-env/"] = (page[0], page[1], page[2].replace(b'"sha256": "', b'"sha256": "../'))
    before = snapshot(home)
    res = vf("install", "evil/evil-env", HOME=str(home))
    refused(res, "refusing")
    assert snapshot(home) == before
    assert not _installed(venv_python, "evil_env")


def test_install_refuses_dependency_confusion(evil: HostileHub, home: Path, tmp_path: Path,
                                              venv_python: str) -> None:
    """Two ways to make a dependency resolve from an index other than the expected one."""
    vf = make_vf(tmp_path, evil, python=venv_python)
    env = wheel("evil-env", "1.0.0", requires=["helper-lib>=1.0"])
    evil.project_page("evil", "evil-env", [("evil_env-1.0.0-py3-none-any.whl", env)])

    # 1. The hub tells vf it does not host the dependency, but serves it to pip through an index that
    #    pip's own settings list (the old advice: --extra-index-url): pip would take it from the hub.
    evil.html_page("/pipview/simple/helper-lib/", "helper-lib",
                   [("helper_lib-9.9.0-py3-none-any.whl", wheel("helper-lib", "9.9.0"))])
    res = vf("install", "evil/evil-env", PIP_EXTRA_INDEX_URL=f"{evil.url}/pipview/simple/")
    refused(res, "dependency confusion", "helper-lib", "from the hub")
    assert not _installed(venv_python, "evil_env") and not _installed(venv_python, "helper_lib")

    # 2. Published by the same owner: a hub dependency, fetched from the hub by hash and handed to pip
    #    as a file, so another index serving a higher version of that name is never consulted.
    evil.project_page("evil", "helper-lib", [("helper_lib-1.0.0-py3-none-any.whl", wheel("helper-lib", "1.0.0"))])
    seen = len(evil.requests)
    res = vf("install", "evil/evil-env", PIP_EXTRA_INDEX_URL=f"{evil.url}/pipview/simple/")
    assert res.code == 0, res.text
    assert "installed evil/evil-env==1.0.0" in res.out and "installed evil/helper-lib==1.0.0" in res.out
    probe = "import importlib.metadata as m; print(m.version('helper-lib'))"
    assert vf.python_run(probe).out.strip() == "1.0.0"
    assert not [p for p in evil.requests[seen:] if p.startswith("/pipview/")]

    # 3. Install commands of the wrong shape (needs_access_extras not a list of names): one clear refusal
    for bad in (5, "gpu", [{"x": 1}]):
        evil.json("/api/v1/environments/evil/evil-env/versions/1.0.0",
                  {"id": "evil/evil-env", "version": "1.0.0", "check": {"status": "passed"},
                   "install_commands": {"needs_access_extras": bad}})
        res = vf("install", "evil/evil-env")
        refused(res, "unusable install commands")


def test_a_squatted_dependency_name_comes_from_the_public_index(evil: HostileHub, tmp_path: Path) -> None:
    """Someone published an environment named like the public package the environment depends on
    (under another owner, at a higher version). The environment's owner does not publish that name,
    so it is no hub dependency: it comes from the user's index, the squatter's file is never fetched,
    and the install neither fails nor calls it ambiguous."""
    python = fresh_venv(tmp_path / "venv")
    vf = make_vf(tmp_path, evil, python=python)
    evil.project_page("alice", "alice-env", [("alice_env-1.0.0-py3-none-any.whl",
                                              wheel("alice-env", "1.0.0", requires=["helper-lib>=1.0"]))])
    evil.project_page(None, "helper-lib", [("helper_lib-9.9.0-py3-none-any.whl", wheel("helper-lib", "9.9.0"))])
    evil.project_page("mallory", "helper-lib", [("helper_lib-9.9.0-py3-none-any.whl",
                                                 wheel("helper-lib", "9.9.0"))])
    squatted = {p for p in evil.routes if p.startswith("/files/") and "helper_lib-9.9.0" in p}
    public = HostileHub()  # the public index, another server
    try:
        public.html_page("/simple/helper-lib/", "helper-lib",
                         [("helper_lib-1.0.0-py3-none-any.whl", wheel("helper-lib", "1.0.0"))])
        res = vf("install", "alice/alice-env", PIP_INDEX_URL=f"{public.url}/simple/")
        assert res.code == 0, res.text
        assert "ambiguous" not in res.text and "dependency confusion" not in res.text
        probe = "import importlib.metadata as m; print(m.version('helper-lib'))"
        assert vf.python_run(probe).out.strip() == "1.0.0"
        assert "/simple/helper-lib/" in public.requests
        assert not squatted & set(evil.requests)
    finally:
        public.close()


def test_plain_http_to_a_remote_hub_is_warned_about_loudly(tmp_path: Path) -> None:
    from verifiers.hub_client.files import insecure_warning

    assert insecure_warning("http://hub.example.org") and insecure_warning("http://192.0.2.7:8080")
    for url in ("https://hub.example.org", "http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:80"):
        assert insecure_warning(url) is None, url
    vf = VF(sys.executable, tmp_path / "cfg", "http://hub.example.org:1", tmp_path)
    res = vf("whoami")
    assert "WARNING" in res.err and "plain HTTP" in res.err and "https://" in res.err
    res = vf("whoami", VF_HUB_URL="https://hub.example.org:1")
    assert "WARNING" not in res.err


def test_install_without_a_token_from_a_hub_that_challenges_every_miss(evil: HostileHub, tmp_path: Path) -> None:
    """A hub set to answer anonymous index misses with 401 (VF_HUB_INDEX_AUTH_CHALLENGE): without a
    token, a 401 for a dependency means "not on the hub", as a 404 would."""
    python = fresh_venv(tmp_path / "venv")
    evil.miss = (401, "application/json", b'{"detail": "authentication required"}')
    evil.project_page("evil", "evil-env", [("evil_env-1.0.0-py3-none-any.whl",
                                            wheel("evil-env", "1.0.0", requires=["packaging"]))])
    vf = VF(python, tmp_path / "config", evil.url, tmp_path)
    res = vf("install", "evil/evil-env")
    assert res.code == 0, res.text
    assert "/evil/simple/packaging/" in evil.requests and _installed(python, "evil_env")


# ------------------------------------------------------------------------------------------- info
def test_info_refuses_advice_that_mixes_indexes(evil: HostileHub, tmp_path: Path) -> None:
    """A hostile hub advises the old, exploitable command (its own index plus the public one, pip
    picking the highest version across both): `vf info` refuses to print it; honest advice prints."""
    vf = make_vf(tmp_path, evil)
    mixed = f"pip install --index-url {evil.url}/evil/simple/ --extra-index-url https://pypi.org/simple/ evil-env==1.0.0"
    honest = {"vf": "vf install evil/evil-env@1.0.0", "uv": f"uv add --index hub={evil.url}/evil/simple/ evil-env==1.0.0",
              "pip": [f"pip install --isolated --index-url {evil.url}/evil/simple/ evil-env==1.0.0"], "note": None}
    base = "/api/v1/environments/evil/evil-env"
    evil.json(base, {"id": "evil/evil-env", "description": "", "latest_version": "1.0.0", "downloads": 0,
                     "stars": 0, "tags": [], "install_commands": honest})
    evil.json(f"{base}/versions", [{"version": "1.0.0", "created_at": "2026-12-01T00:00:00", "files": [],
                                    "yanked": False}])
    evil.json(f"{base}/evals", [])
    evil.json(f"{base}/versions/1.0.0", {"id": "evil/evil-env", "version": "1.0.0", "files": [],
                                         "install_commands": {**honest, "pip": [mixed]}})
    res = vf("info", "evil/evil-env")
    refused(res, "mixes package indexes", "--extra-index-url")
    assert "pypi.org" not in res.out
    evil.json(f"{base}/versions/1.0.0", {"id": "evil/evil-env", "version": "1.0.0", "files": [],
                                         "install_commands": honest})
    res = vf("info", "evil/evil-env")
    assert res.code == 0 and honest["pip"][0] in res.out, res.text
