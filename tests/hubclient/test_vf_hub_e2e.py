"""`vf login / push / install / pull / search / info / yank / star` and `vf eval --push`, end to end:
a real hub process, `vf` as subprocesses, pip/uv installing into fresh virtual environments."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess
from tests.hubclient.helpers import create_user, write_env_package


def one_line_error(res) -> str:
    """A failure is one `error:` line (plus an optional hint line) and a non-zero exit."""
    assert res.code != 0, res.text
    lines = [ln for ln in res.err.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: "), res.text
    assert len(lines) <= 2 and all(ln.startswith(("error: ", "hint: ")) for ln in lines), res.text
    return res.err


def test_login_whoami_logout(hub: HubProcess, make_vf) -> None:
    token = create_user(hub, "lena")
    vf = make_vf()
    res = vf("login", "--token", token)
    assert res.code == 0 and "as lena" in res.out
    cfg = vf.config_dir / "hub.json"
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
    assert stat.S_IMODE(vf.config_dir.stat().st_mode) == 0o700
    assert json.loads(cfg.read_text())["token"] == token
    assert vf("whoami").out.startswith("lena on ")
    # The token can come on stdin too (scripts), and a wrong one is refused without being saved.
    assert "as lena" in vf("login", input=token + "\n").out
    err = one_line_error(vf("login", "--token", "vfh_wrong"))
    assert "refused the token" in err and json.loads(cfg.read_text())["token"] == token
    assert vf("logout").out.strip() == "logged out"
    assert not cfg.exists()
    assert "not logged in" in one_line_error(vf("whoami"))
    # A stored token is never sent to another hub than the one it was saved for.
    vf("login", "--token", token)
    assert "not logged in" in one_line_error(vf("whoami", VF_HUB_URL="http://127.0.0.1:9"))


def test_push_filters_secrets_is_idempotent_and_immutable(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    vf = make_vf(create_user(hub, "pia"))
    pkg = write_env_package(tmp_path, "pia-counting", extra_files={
        ".env": "OPENAI_API_KEY=sk-secret\n",
        "keys/deploy.pem": "-----BEGIN PRIVATE KEY-----\n",
        ".gitignore": "scratch/\n*.log\n",
        "scratch/notes.txt": "private notes",
        "run.log": "log",
        "outputs/evals/r/results.jsonl": "{}\n",
        "data/table.csv": "a,b\n1,2\n",
    })
    res = vf("push", str(pkg))
    assert res.code == 0, res.text
    assert "published pia/pia-counting@1.0.0" in res.out
    assert f"{hub.url}/pia/pia-counting" in res.out and "vf install pia/pia-counting@1.0.0" in res.out
    assert "left out (looks like a secret): .env" in res.out
    # What the hub stores holds the package and its data, and none of the secrets or ignored files.
    files = httpx.get(f"{hub.url}/api/v1/environments/pia/pia-counting/versions/1.0.0/source", timeout=30).json()
    names = {f["path"] if isinstance(f, dict) else f for f in files["files"]}
    assert {"pyproject.toml", "README.md", "pia_counting/__init__.py", "data/table.csv"} <= names
    for leaked in (".env", "keys/deploy.pem", "scratch/notes.txt", "run.log", "outputs/evals/r/results.jsonl"):
        assert leaked not in names
    # Identical content again: a no-op.
    again = vf("push", str(pkg))
    assert again.code == 0 and "identical content: nothing to do" in again.out
    # Different content under the same version: refused, with the hint to bump.
    (pkg / "README.md").write_text("# changed\n")
    err = one_line_error(vf("push", str(pkg)))
    assert "already published with different content" in err and "--bump patch" in err
    bumped = vf("push", str(pkg), "--bump", "patch")
    assert bumped.code == 0 and "published pia/pia-counting@1.0.1" in bumped.out
    assert 'version = "1.0.1"' in (pkg / "pyproject.toml").read_text()
    versions = [v["version"] for v in httpx.get(f"{hub.url}/api/v1/environments/pia/pia-counting/versions").json()]
    assert sorted(versions) == ["1.0.0", "1.0.1"]


def _stored_file(hub: HubProcess, filename: str) -> Path:
    found = list(hub.data_dir.rglob(filename))
    assert len(found) == 1, found
    return found[0]


def test_install_lock_tamper_and_pull(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    token = create_user(hub, "quinn")
    author = make_vf(token)
    pkg = write_env_package(tmp_path, "quinn-env", "2.0.0")
    assert author("push", str(pkg)).code == 0
    assert author("push", str(pkg), "--bump", "minor").code == 0  # 2.1.0

    user = make_vf(token, venv=True)
    lock = user.cwd / "vf.lock"
    res = user("install", "quinn/quinn-env@2.0.0", "--lock", str(lock))
    assert res.code == 0, res.text
    assert "installed quinn/quinn-env==2.0.0" in res.out
    text = lock.read_text()
    assert 'id = "quinn/quinn-env"' in text and 'version = "2.0.0"' in text and "sha256 = " in text
    probe = "import importlib.metadata as m, quinn_env; print(m.version('quinn-env'), quinn_env.__file__)"
    out = user.python_run(probe).out
    assert out.startswith("2.0.0 ") and str(user.python).rsplit("/bin/", 1)[0] in out

    # The lock reproduces exactly that file in another environment, even though 2.1.0 is newer.
    other = make_vf(token, venv=True)
    res = other("install", "--lock", str(lock))
    assert res.code == 0 and "installed quinn/quinn-env==2.0.0" in res.out
    # Tampering with the stored file on the hub makes the locked install fail before pip runs.
    stored = _stored_file(hub, "quinn_env-2.0.0-py3-none-any.whl")
    original = stored.read_bytes()
    third = make_vf(token, venv=True, register_project=True)
    try:
        stored.write_bytes(original + b"tampered")
        err = one_line_error(third("install", "--lock", str(lock)))
        assert "sha256 mismatch" in err
        assert third.python_run("import quinn_env").code != 0  # nothing was installed
    finally:
        stored.write_bytes(original)

    # Without a version: the newest; with uv as the installer.
    res = third("install", "quinn/quinn-env", "--installer", "uv")
    assert res.code == 0 and "quinn/quinn-env==2.1.0" in res.out, res.text
    assert third.python_run(probe).out.startswith("2.1.0 ")
    assert third("uninstall", "quinn/quinn-env").code == 0
    assert third.python_run("import quinn_env").code != 0

    # pull: the source, safely extracted.
    dest = user.cwd / "src"
    res = user("pull", "quinn/quinn-env@2.0.0", str(dest))
    assert res.code == 0 and "pulled quinn/quinn-env@2.0.0" in res.out
    assert (dest / "pyproject.toml").is_file() and (dest / "quinn_env" / "__init__.py").is_file()
    assert "already exists" in one_line_error(user("pull", "quinn/quinn-env@2.0.0", str(dest)))


def test_private_environment(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    owner_token, other_token = create_user(hub, "rita"), create_user(hub, "sam")
    owner = make_vf(owner_token, venv=True)
    pkg = write_env_package(tmp_path, "rita-secret-env", description="hidden environment")
    res = owner("push", str(pkg), "--private")
    assert res.code == 0, res.text
    for vf in (make_vf(other_token, venv=True), make_vf(None, venv=True)):
        assert "not found" in one_line_error(vf("info", "rita/rita-secret-env"))
        assert "not found" in one_line_error(vf("install", "rita/rita-secret-env"))
        assert "rita-secret-env" not in vf("search", "hidden", "--json").out
    assert "rita/rita-secret-env" in owner("search", "hidden", "--json").out
    res = owner("install", "rita/rita-secret-env")
    assert res.code == 0, res.text
    assert owner.python_run("import rita_secret_env").code == 0


def test_yank_unyank_and_star(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    token = create_user(hub, "tom")
    vf = make_vf(token, venv=True)
    pkg = write_env_package(tmp_path, "tom-env", "1.0.0")
    assert vf("push", str(pkg)).code == 0
    assert vf("push", str(pkg), "--bump", "patch").code == 0
    res = vf("yank", "tom/tom-env@1.0.1", "--reason", "wrong answers")
    assert res.code == 0 and "yanked tom/tom-env@1.0.1 (wrong answers)" in res.out
    info = vf("info", "tom/tom-env").out
    assert "yes: wrong answers" in info
    # latest skips the yanked version; pinning it still installs it, with a warning.
    assert "tom/tom-env==1.0.0" in vf("install", "tom/tom-env").out
    pinned = vf("install", "tom/tom-env@1.0.1")
    assert pinned.code == 0 and "warning: tom/tom-env 1.0.1 is yanked (wrong answers)" in pinned.out
    assert vf("unyank", "tom/tom-env@1.0.1").code == 0
    assert "tom/tom-env==1.0.1" in vf("install", "tom/tom-env").out
    assert "names no version" in one_line_error(vf("yank", "tom/tom-env"))
    # Only maintainers yank.
    outsider = make_vf(create_user(hub, "uma"))
    assert "not allowed" in one_line_error(outsider("yank", "tom/tom-env@1.0.0"))
    assert outsider("star", "tom/tom-env").code == 0
    detail = httpx.get(f"{hub.url}/api/v1/environments/tom/tom-env", timeout=30).json()
    assert detail["stars"] == 1
    assert outsider("star", "tom/tom-env", "--remove").code == 0
    assert httpx.get(f"{hub.url}/api/v1/environments/tom/tom-env", timeout=30).json()["stars"] == 0


def test_user_errors_are_one_line(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    token = create_user(hub, "vic")
    vf = make_vf(token)
    pkg = write_env_package(tmp_path, "vic-words", "0.3.0")
    assert vf("push", str(pkg)).code == 0
    err = one_line_error(vf("info", "vic/vic-wrds"))
    assert "not found" in err and "did you mean vic/vic-words?" in err
    err = one_line_error(vf("install", "vic/vic-words@9.9"))
    assert "has no version 9.9" in err and "0.3.0" in err
    err = one_line_error(vf("search", VF_HUB_URL="http://127.0.0.1:9"))
    assert "cannot reach the hub" in err
    assert "refused the token" in one_line_error(vf("whoami", VF_HUB_TOKEN="vfh_not_a_token"))
    # Packages that cannot be published.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no pyproject.toml" in one_line_error(vf("push", str(empty)))
    broken = write_env_package(tmp_path, "vic-broken")
    (broken / "README.md").unlink()
    assert "no README.md" in one_line_error(vf("push", str(broken)))
    nobuild = write_env_package(tmp_path, "vic-nobuild")
    text = (nobuild / "pyproject.toml").read_text().replace('"verifiers>=0.1.9"', '"verifiers>=0.1.9", "not a requirement!"')
    (nobuild / "pyproject.toml").write_text(text)
    assert "does not build" in one_line_error(vf("push", str(nobuild), "--no-import-check"))
    noimport = write_env_package(tmp_path, "vic-noimport")
    (noimport / "vic_noimport" / "__init__.py").write_text("import not_a_module_anywhere\n")
    assert "cannot import module vic_noimport" in one_line_error(vf("push", str(noimport)))
    # Nothing of the failed pushes reached the hub.
    for name in ("vic-broken", "vic-nobuild", "vic-noimport"):
        assert httpx.get(f"{hub.url}/api/v1/environments/vic/{name}", timeout=30).status_code == 404


class KillingProxy:
    """A loopback TCP proxy that SIGKILLs the client process once it has forwarded ``limit`` bytes
    of the request: a network failure in the middle of an upload, as a user would meet it."""

    def __init__(self, upstream_port: int, limit: int) -> None:
        self.upstream_port = upstream_port
        self.limit = limit
        self.forwarded = 0
        self.pid: int | None = None
        self.killed = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upload: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if upload:
                    self.forwarded += len(data)
                    if self.forwarded > self.limit and self.pid and not self.killed.is_set():
                        os.kill(self.pid, signal.SIGKILL)
                        self.killed.set()
                        break
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_interrupted_push_leaves_the_hub_unchanged_and_can_be_rerun(hub: HubProcess, make_vf,
                                                                    tmp_path: Path) -> None:
    token = create_user(hub, "wes")
    vf = make_vf(token)
    # An incompressible payload makes the upload long enough to be cut in the middle.
    pkg = write_env_package(tmp_path, "wes-big", extra_files={"wes_big/blob.bin": os.urandom(6 * 1024 * 1024)})
    proxy = KillingProxy(hub.port, limit=3 * 1024 * 1024)
    try:
        proc = subprocess.Popen([vf.python, "-m", "verifiers.cli", "push", str(pkg)], cwd=vf.cwd,
                                env=vf.env(VF_HUB_URL=f"http://127.0.0.1:{proxy.port}"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proxy.pid = proc.pid
        proc.wait(timeout=300)
        assert proxy.killed.is_set() and proc.returncode == -signal.SIGKILL
    finally:
        proxy.close()
    assert httpx.get(f"{hub.url}/api/v1/environments/wes/wes-big", timeout=30).status_code == 404
    # the hub notices the dropped connection in its own time (slower on a loaded machine): wait for
    # its clean-up by polling, with a deadline only as a guard against a hang
    deadline = time.monotonic() + 120
    while list(hub.data_dir.rglob("wes_big-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(hub.data_dir.rglob("wes_big-*"))
    res = vf("push", str(pkg))
    assert res.code == 0 and "published wes/wes-big@1.0.0" in res.out, res.text
    ver = httpx.get(f"{hub.url}/api/v1/environments/wes/wes-big/versions/1.0.0", timeout=30).json()
    assert sorted(f["kind"] for f in ver["files"]) == ["sdist", "wheel"]


def test_load_environment_installs_only_when_allowed_and_eval_push(hub: HubProcess, make_vf,
                                                                   tmp_path: Path) -> None:
    from verifiers.testing import ScriptedServer, reply

    token = create_user(hub, "xena")
    vf = make_vf(token, venv=True)
    pkg = write_env_package(tmp_path, "xena-say", "1.2.0",
                            reward_body="return 1.0 if answer in str(completion) else 0.0")
    assert vf("push", str(pkg)).code == 0
    load = "import verifiers as vf; env = vf.load_environment('xena/xena-say@1.2.0'); print(type(env).__name__)"
    res = vf.python_run(load)
    assert res.code != 0 and "VF_AUTO_INSTALL=1" in res.err
    res = vf.python_run(load, VF_AUTO_INSTALL="1")
    assert res.code == 0 and res.out.strip() == "SingleTurnEnv", res.err
    # Installed now: no permission needed to load it again.
    assert vf.python_run(load).code == 0

    with ScriptedServer(lambda request: reply("the answer is 0 1 2 3")) as srv:
        res = vf("eval", "xena/xena-say@1.2.0", "-b", srv.base_url, "-n", "4", "-r", "1", "--push",
                 "--push-samples", "-o", str(tmp_path / "runs"))
    assert res.code == 0, res.text
    assert "pushed to the hub: xena/xena-say@1.2.0" in res.out
    board = httpx.get(f"{hub.url}/api/v1/environments/xena/xena-say/leaderboard", timeout=30).json()
    assert len(board) == 1 and board[0]["version"] == "1.2.0" and board[0]["num_rollouts"] == 4
    assert board[0]["avg_reward"] == 1.0 and (board[0]["num_errors"], board[0]["num_infra_errors"]) == (0, 0)
    evals = httpx.get(f"{hub.url}/api/v1/environments/xena/xena-say/evals", timeout=30).json()
    assert len(evals[0]["summary"]["samples"]) == 4
    assert "latest eval results" in vf("info", "xena/xena-say").out
    # --push needs a saved run.
    assert "drop --no-save" in one_line_error(vf("eval", "xena/xena-say@1.2.0", "--no-save", "--push",
                                                 "-b", "http://127.0.0.1:9/v1"))


def test_pull_refuses_hostile_archives(tmp_path: Path) -> None:
    from verifiers.hub_client.api import HubClientError
    from verifiers.hub_client.pull import safe_extract_sdist

    def archive(name: str, members: list[tarfile.TarInfo]) -> Path:
        path = tmp_path / f"{name}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for m in members:
                tar.addfile(m, __import__("io").BytesIO(b"x" * m.size) if m.isfile() else None)
        return path

    def file(name: str) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size = 1
        return ti

    link = tarfile.TarInfo("pkg-1.0/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    dev = tarfile.TarInfo("pkg-1.0/dev")
    dev.type = tarfile.CHRTYPE
    for name, members in {
        "traversal": [file("pkg-1.0/../../escape.txt")],
        "absolute": [file("/tmp/absolute.txt")],
        "symlink": [link],
        "device": [dev],
    }.items():
        dest = tmp_path / f"out-{name}"
        dest.mkdir()
        with pytest.raises(HubClientError, match="refusing"):
            safe_extract_sdist(archive(name, members), dest)
    assert not (tmp_path.parent / "escape.txt").exists() and not Path("/tmp/absolute.txt").exists()
    ok = archive("ok", [file("pkg-1.0/a/b.txt"), file("pkg-1.0/PKG-INFO")])
    dest = tmp_path / "ok-out"
    dest.mkdir()
    assert sorted(safe_extract_sdist(ok, dest)) == ["PKG-INFO", "a/b.txt"]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _with_deps(pkg: Path, deps: list[str]) -> Path:
    text = (pkg / "pyproject.toml").read_text()
    listed = ", ".join(f'"{d}"' for d in deps)
    (pkg / "pyproject.toml").write_text(text.replace('dependencies = ["verifiers>=0.1.9"]', f"dependencies = [{listed}]"))
    return pkg


def test_push_bump_changes_pyproject_only_after_the_hub_accepts(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    token = create_user(hub, "bea")
    r = httpx.post(f"{hub.url}/api/v1/tokens", json={"scope": "read", "name": "read-only"}, headers=_auth(token),
                   timeout=30)
    assert r.status_code == 201, r.text
    writer, reader = make_vf(token), make_vf(r.json()["token"])
    pkg = write_env_package(tmp_path, "bea-env", "1.0.0")
    assert writer("push", str(pkg)).code == 0
    (pkg / "README.md").write_text("# bea-env\n\nchanged\n")
    pyproject = (pkg / "pyproject.toml").read_text()
    for _attempt in range(2):  # a refused push, retried, bumps nothing
        err = one_line_error(reader("push", str(pkg), "--bump", "patch"))
        assert "not allowed" in err, err
        assert (pkg / "pyproject.toml").read_text() == pyproject
    versions = httpx.get(f"{hub.url}/api/v1/environments/bea/bea-env/versions", timeout=30).json()
    assert [v["version"] for v in versions] == ["1.0.0"]
    res = writer("push", str(pkg), "--bump", "patch")
    assert res.code == 0 and "published bea/bea-env@1.0.1" in res.out and "version bumped to 1.0.1" in res.out
    assert 'version = "1.0.1"' in (pkg / "pyproject.toml").read_text()
    ver = httpx.get(f"{hub.url}/api/v1/environments/bea/bea-env/versions/1.0.1", timeout=30).json()
    assert ver["version"] == "1.0.1"


def test_listings_print_whole_ids_when_piped_and_take_json(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    owner = "a-rather-long-owner-name"
    name = "an-environment-with-a-long-descriptive-name"
    full = f"{owner}/{name}"
    vf = make_vf(create_user(hub, owner))
    assert vf("push", str(write_env_package(tmp_path, name, description="zebra crossing words"))).code == 0
    for columns in ("40", "200"):  # a pipe gets whole ids whatever the terminal width says
        out = vf("search", "zebra", COLUMNS=columns).out
        row = next((ln for ln in out.splitlines() if ln.startswith(full + "\t")), None)
        assert row is not None, out
        assert row.split("\t")[1:3] == ["public", "1.0.0"]
        info = vf("info", full, COLUMNS=columns).out
        assert info.splitlines()[0] == full and f"install: vf install {full}@1.0.0" in info
        assert "\n1.0.0\t" in info  # the versions listing, tab-separated
    found = json.loads(vf("search", "zebra", "--json").out)
    assert [e["id"] for e in found["items"]] == [full]
    detail = json.loads(vf("info", full, "--json").out)
    assert detail["environment"]["id"] == full and [v["version"] for v in detail["versions"]] == ["1.0.0"]
    assert detail["install"]["vf"] == f"vf install {full}@1.0.0" and detail["evals"] == []


def test_listing_on_a_terminal_keeps_ids_whole() -> None:
    import io

    from rich.console import Console

    from verifiers.cli.render import listing

    rows = [["someone/an-environment-with-a-long-descriptive-name", "1.0.0", "a description " * 8]]
    for width in (50, 160):
        buf = io.StringIO()
        listing(Console(file=buf, force_terminal=True, width=width, color_system=None), ["environment", "latest",
                "description"], rows, title="1 environment(s)")
        assert rows[0][0] in buf.getvalue(), buf.getvalue()
        assert ("\t" in buf.getvalue()) == (width == 50)  # narrow: whole values, tab-separated


def test_info_install_commands_never_mix_indexes_and_work_with_a_token(hub: HubProcess, make_vf,
                                                                       tmp_path: Path) -> None:
    """The commands `vf info` prints for a private environment with a hub dependency, run as printed
    with a real pip and a real uv (the token from VF_HUB_TOKEN), and `vf install` of the same."""
    import shutil
    import sys

    token = create_user(hub, "ines")
    owner = make_vf(token)
    helper = write_env_package(tmp_path, "ines-helper", "0.2.0")
    main = _with_deps(write_env_package(tmp_path, "ines-main", "1.0.0"), ["verifiers>=0.1.9", "ines-helper>=0.1"])
    tool = _with_deps(write_env_package(tmp_path, "ines-tool", "1.0.0"), ["ines-helper>=0.1"])
    for pkg in (helper, main, tool):
        res = owner("push", str(pkg), "--private")
        assert res.code == 0, res.text
    advice = json.loads(owner("info", "ines/ines-main", "--json").out)["install"]
    commands = [advice["vf"], advice["uv"], *advice["pip"]]
    assert not any("--extra-index-url" in c for c in commands), commands
    index = f"http://__token__:${{VF_HUB_TOKEN}}@127.0.0.1:{hub.port}/ines/simple/"
    # The hub writes these (its env page shows the same): public dependencies from the public index
    # alone (verifiers is already installed here, so pip needs no network), then the hub alone.
    assert advice["pip"] == ["pip install --isolated --index-url https://pypi.org/simple/ 'verifiers>=0.1.9'",
                             f'pip install --isolated --index-url "{index}" ines-main==1.0.0']
    assert "VF_HUB_TOKEN" in advice["note"]

    # pip, as printed, into a fresh environment, with the token in VF_HUB_TOKEN.
    user = make_vf(None, venv=True)
    env = user.env(VF_HUB_TOKEN=token)
    for line in advice["pip"]:
        cmd = line.replace("pip install", f"{shlex_quote(user.python)} -m pip install", 1)
        proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, cwd=user.cwd, timeout=300)
        assert proc.returncode == 0, proc.stderr
    probe = "import importlib.metadata as m; print(m.version('ines-main'), m.version('ines-helper'))"
    assert user.python_run(probe).out.split() == ["1.0.0", "0.2.0"]

    # uv, as printed, into a fresh virtual environment (the README's .venv, no uv project): the
    # public dependency from the public index alone (verifiers is already installed there, so uv
    # needs no network), then the environment and its hub dependency from the hub index alone, the
    # token from VF_HUB_TOKEN.
    tool_advice = json.loads(owner("info", "ines/ines-tool", "--json").out)["install"]
    assert tool_advice["uv"] == ("uv pip install --no-config --index-url https://pypi.org/simple/ 'verifiers>=0.1.9' && "
                                 f'uv pip install --no-config --index-url "{index}" ines-tool==1.0.0')
    assert advice["uv"] == " && ".join(line.replace("pip install --isolated", "uv pip install --no-config", 1)
                                       for line in advice["pip"])
    uv_user = make_vf(None, venv=True, register_project=True)
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    cmd = tool_advice["uv"].replace("uv pip install", f"{shlex_quote(uv)} pip install --python {shlex_quote(uv_user.python)}")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=uv_user.cwd, timeout=300,
                          env={**uv_user.env(VF_HUB_TOKEN=token), "UV_PYTHON_DOWNLOADS": "never",
                               "UV_CACHE_DIR": str(tmp_path / "uv-cache")})
    assert proc.returncode == 0, proc.stderr
    probe_tool = "import importlib.metadata as m; print(m.version('ines-tool'), m.version('ines-helper'))"
    assert uv_user.python_run(probe_tool).out.split() == ["1.0.0", "0.2.0"]
    assert token not in proc.stdout + proc.stderr

    # vf install: the hub dependency comes from the hub, pinned by hash, and the lock pins it too.
    other = make_vf(token, venv=True)
    lock = other.cwd / "vf.lock"
    res = other("install", "ines/ines-main", "--lock", str(lock))
    assert res.code == 0, res.text
    assert "installed ines/ines-main==1.0.0" in res.out and "installed ines/ines-helper==0.2.0" in res.out
    assert other.python_run(probe).out.split() == ["1.0.0", "0.2.0"]
    assert 'id = "ines/ines-helper"' in lock.read_text() and 'id = "ines/ines-main"' in lock.read_text()


def test_vf_install_takes_the_environments_a_package_loads_by_id_from_the_hub_only(
    hub: HubProcess, make_vf, tmp_path: Path
) -> None:
    """``[tool.verifiers] environments`` (a mixture's members): ``vf install`` takes them from the same
    owner on the hub; one the owner does not publish fails the install before pip runs (it is never
    looked up on a public index), and nothing is installed."""
    token = create_user(hub, "iris")
    owner = make_vf(token)
    member = write_env_package(tmp_path, "iris-member", "0.3.0")
    mix = write_env_package(tmp_path, "iris-mix", "1.0.0")
    orphan = write_env_package(tmp_path, "iris-orphan", "1.0.0")
    for pkg, loads in ((mix, '["iris-member>=0.3"]'), (orphan, '["iris-member", "iris-absent"]')):
        text = (pkg / "pyproject.toml").read_text()
        (pkg / "pyproject.toml").write_text(text.replace("[tool.verifiers.eval]", f"[tool.verifiers]\nenvironments = {loads}\n\n[tool.verifiers.eval]"))
    for pkg in (member, mix, orphan):
        res = owner("push", str(pkg))
        assert res.code == 0, res.text
    user = make_vf(token, venv=True)
    res = user("install", "iris/iris-mix")
    assert res.code == 0, res.text
    assert "installed iris/iris-mix==1.0.0" in res.out and "installed iris/iris-member==0.3.0" in res.out
    probe = "import importlib.metadata as m; print(m.version('iris-mix'), m.version('iris-member'))"
    assert user.python_run(probe).out.split() == ["1.0.0", "0.3.0"]
    res = user("install", "iris/iris-orphan")
    assert res.code != 0 and "iris-absent" in res.err and "does not publish" in res.err, res.text
    gone = "import importlib.util as u; print(u.find_spec('iris_orphan') is None)"
    assert user.python_run(gone).out.strip() == "True"


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def test_readme_plain_pip_line_works_as_written(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    """The README's plain-pip line names a package its commands push first, and installs it (and its
    dependencies resolve) with the hub as the only index, as `vf info` advises."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    m = re.search(r"^pip install --isolated --index-url http://127\.0\.0\.1:8080/(\w+)/simple/ ([\w-]+) ", readme, re.M)
    assert m, "the README has no plain-pip line"
    owner, name = m.groups()
    pushed = re.search(rf"^vf push environments/{name}\b", readme, re.M)
    assert pushed and pushed.start() < m.start(), f"the README does not push {name} before installing it"
    # the README's package is a classic one (vf init's default is a v1 taskset): vf push checks it with vf check
    assert re.search(rf"^vf init {name} --classic\b", readme, re.M), f"the README never creates {name}"
    assert not re.search(r"^pip install .*--extra-index-url", readme, re.M)

    author = make_vf(create_user(hub, owner))
    res = author("init", name, "--classic", "--path", str(tmp_path))
    assert res.code == 0, res.text
    res = author("push", str(tmp_path / name))
    assert res.code == 0, res.text
    advice = json.loads(author("info", f"{owner}/{name}", "--json").out)["install"]
    assert advice["pip"][-1].startswith(m.group(0).replace("127.0.0.1:8080", f"127.0.0.1:{hub.port}").strip())

    user = make_vf(None, venv=True)
    line = m.group(0).strip().replace("http://127.0.0.1:8080", hub.url)
    cmd = [user.python, "-m", *line.split()]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=user.cwd, env=user.env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    module = name.replace("-", "_")
    probe = f"import importlib.metadata as m, {module}; print(m.version({name!r}), {module}.__file__)"
    out = user.python_run(probe).out
    assert out.startswith("0.1.0 ") and str(user.python).rsplit("/bin/", 1)[0] in out, out


def _needs_behind_extra(top: Path, middle: Path, extra: str, bottom: Path) -> None:
    """Rewrite the packages' ``pyproject.toml``: ``top`` needs ``middle[extra]``, and ``middle``'s
    ``extra`` needs ``bottom``."""
    plain = 'dependencies = ["verifiers>=0.1.9"]'
    pyproject = middle / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        plain, f'{plain}\noptional-dependencies = {{{extra} = ["{bottom.name}>=1"]}}'
    ))  # fmt: skip
    pyproject = top / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(plain, f'dependencies = ["verifiers>=0.1.9", "{middle.name}[{extra}]"]'))


def test_vf_install_takes_a_dependency_behind_an_extra_from_the_hub(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    """jane-x needs ``jane-b[extra1]``; jane-b's ``extra1`` needs jane-c, also jane's: vf install
    pins jane-c from the hub by sha256 (pip would otherwise look it up on the public index, where
    anyone may hold the name), and the install resolves through pip with no other index."""
    token = create_user(hub, "jane")
    owner = make_vf(token)
    c = write_env_package(tmp_path, "jane-c", "1.0.0")
    b = write_env_package(tmp_path, "jane-b", "1.0.0")
    x = write_env_package(tmp_path, "jane-x", "1.0.0")
    _needs_behind_extra(x, b, "extra1", c)
    for pkg in (c, b, x):
        res = owner("push", str(pkg))
        assert res.code == 0, res.text
    user = make_vf(token, venv=True)
    res = user("install", "jane/jane-x")
    assert res.code == 0, res.text
    assert "installed jane/jane-c==1.0.0" in res.out, res.out
    probe = "import importlib.metadata as m; print(m.version('jane-x'), m.version('jane-b'), m.version('jane-c'))"
    assert user.python_run(probe).out.split() == ["1.0.0", "1.0.0", "1.0.0"]
    # the same shape with the dependency behind the extra private to jane: another user's vf install
    # is refused before anything is installed (pip would take jane-d from the public index)
    d = write_env_package(tmp_path, "jane-d", "1.0.0")
    b2 = write_env_package(tmp_path, "jane-b2", "1.0.0")
    y = write_env_package(tmp_path, "jane-y", "1.0.0")
    _needs_behind_extra(y, b2, "gpu", d)
    for pkg, flags in ((d, ["--private"]), (b2, []), (y, [])):
        res = owner("push", str(pkg), *flags)
        assert res.code == 0, res.text
    kim = make_vf(create_user(hub, "kim"), venv=True)
    res = kim("install", "jane/jane-y")
    assert res.code != 0 and "jane/jane-b2 1.0.0 with the extra(s) gpu asked of it depends on a private" in res.text, res.text
    assert kim.python_run("import importlib.util as u; print(u.find_spec('jane_y'))").out.strip() == "None"
