"""Helpers for the hub tests: an in-process client with account helpers, a package factory, and
builders for hand-made (and hostile) archives."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from hub.app import create_app
from hub.testing import make_settings
from tests.support.envpkg import BuiltPackage, build_env_package


class HubClient:
    """A hub app in this process plus helpers to create users and publish packages."""

    def __init__(self, app: Any, client: TestClient, admin_token: str, data_dir: Path) -> None:
        self.app = app
        self.client = client
        self.admin_token = admin_token
        self.data_dir = data_dir

    @classmethod
    def create(
        cls, data_dir: Path, *, database_url: str | None, admin_token: str, **settings: Any
    ) -> HubClient:
        app = create_app(
            make_settings(data_dir, database_url=database_url, admin_token=admin_token, **settings)
        )
        client = TestClient(app, raise_server_exceptions=True)
        client.__enter__()
        return cls(app, client, admin_token, data_dir)

    @property
    def hub(self) -> Any:
        return self.app.state.hub

    def close(self) -> None:
        self.client.__exit__(None, None, None)

    # requests -------------------------------------------------------------------------------
    def req(self, method: str, url: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.request(method, url, headers=headers, **kw)

    def get(self, url: str, token: str | None = None, **kw: Any) -> httpx.Response:
        return self.req("GET", url, token, **kw)

    def post(self, url: str, token: str | None = None, **kw: Any) -> httpx.Response:
        return self.req("POST", url, token, **kw)

    # accounts ---------------------------------------------------------------------------------
    def user(self, name: str) -> str:
        r = self.post("/api/v1/users", self.admin_token, json={"name": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def token(self, owner_token: str, **body: Any) -> str:
        r = self.post("/api/v1/tokens", owner_token, json=body)
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def org(self, admin_token: str, name: str, members: dict[str, str] | None = None) -> None:
        r = self.post("/api/v1/orgs", admin_token, json={"name": name})
        assert r.status_code == 201, r.text
        for user, role in (members or {}).items():
            r = self.req("PUT", f"/api/v1/orgs/{name}/members/{user}", admin_token, json={"role": role})
            assert r.status_code == 200, r.text

    # publishing -------------------------------------------------------------------------------
    def publish(
        self,
        owner: str,
        pkg: BuiltPackage,
        token: str,
        *,
        private: bool | None = None,
        which: tuple[str, ...] = ("wheel", "sdist"),
        name: str | None = None,
    ) -> httpx.Response:
        paths = [getattr(pkg, w) for w in which]
        return self.publish_files(
            owner, name or pkg.normalized, [(p.name, p.read_bytes()) for p in paths], token, private=private
        )

    def publish_files(
        self,
        owner: str,
        name: str,
        files: list[tuple[str, bytes]],
        token: str,
        *,
        private: bool | None = None,
    ) -> httpx.Response:
        data = {} if private is None else {"private": "true" if private else "false"}
        multipart = [("files", (fn, content, "application/octet-stream")) for fn, content in files]
        return self.post(f"/api/v1/environments/{owner}/{name}/versions", token, files=multipart, data=data)

    # inspection -------------------------------------------------------------------------------
    def row_counts(self) -> dict[str, int]:
        from sqlalchemy import text

        with self.hub.db.engine.connect() as conn:
            return {
                t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() or 0)
                for t in ("environments", "versions", "files")
            }

    def stored_keys(self) -> list[str]:
        return list(self.hub.storage.keys("files/"))

    def temp_files(self) -> list[Path]:
        return [p for p in self.hub.tmp_dir.iterdir()]


class PackageFactory:
    """Builds (and caches) real environment packages with hatchling."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[tuple[Any, ...], BuiltPackage] = {}

    def get(self, name: str, version: str = "0.1.0", **kw: Any) -> BuiltPackage:
        key = (name, version, tuple(sorted((k, repr(v)) for k, v in kw.items())))
        if key not in self._cache:
            work = self.root / f"p{len(self._cache)}"
            self._cache[key] = build_env_package(work, name, version, **kw)
        return self._cache[key]


# --------------------------------------------------------------------------------------------------
# hand-made archives


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass
class Member:
    """One archive member. ``kind``: file, dir, symlink, hardlink, chr, blk, fifo."""

    name: str
    data: bytes = b""
    kind: str = "file"
    target: str = ""
    in_record: bool = True
    record_hash: str | None = None


def make_wheel(
    name: str = "attack-env",
    version: str = "0.1.0",
    members: list[Member] | None = None,
    *,
    metadata_name: str | None = None,
    metadata_version: str | None = None,
    with_record: bool = True,
    compresslevel: int = 6,
    requires: list[str] | None = None,
) -> tuple[str, bytes]:
    """A wheel (filename, bytes) whose RECORD lists its members unless told otherwise; ``requires``
    become its ``Requires-Dist`` lines."""
    dist = name.replace("-", "_")
    di = f"{dist}-{version}.dist-info"
    deps = "".join(f"Requires-Dist: {r}\n" for r in requires or [])
    meta = (
        f"Metadata-Version: 2.1\nName: {metadata_name or name}\nVersion: {metadata_version or version}\n"
        f"Summary: hand-made test archive\n{deps}\n"
    ).encode()
    all_members = [Member(f"{dist}/__init__.py", b"X = 1\n"), *(members or [])]
    all_members += [
        Member(f"{di}/METADATA", meta),
        Member(
            f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    ]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as zf:
        record_rows = []
        for m in all_members:
            zi = zipfile.ZipInfo(m.name, date_time=(2024, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            if m.kind == "symlink":
                zi.external_attr = 0o120777 << 16
                zf.writestr(zi, m.target)
            elif m.kind == "chr":
                zi.external_attr = 0o020644 << 16
                zf.writestr(zi, m.data)
            else:
                zi.external_attr = 0o100644 << 16
                zf.writestr(zi, m.data)
            if m.in_record:
                record_rows.append(f"{m.name},{m.record_hash or record_hash(m.data)},{len(m.data)}")
        if with_record:
            record_rows.append(f"{di}/RECORD,,")
            zf.writestr(
                zipfile.ZipInfo(f"{di}/RECORD", date_time=(2024, 1, 1, 0, 0, 0)),
                "\n".join(record_rows) + "\n",
            )
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


def make_sdist(
    name: str = "attack-env",
    version: str = "0.1.0",
    members: list[Member] | None = None,
    *,
    pkg_info_name: str | None = None,
    top: str | None = None,
    with_pkg_info: bool = True,
    requires: list[str] | None = None,
    pyproject: str | None = None,
) -> tuple[str, bytes]:
    """An sdist (filename, bytes) with a PKG-INFO (``requires`` its ``Requires-Dist`` lines), a
    ``pyproject.toml`` (``pyproject`` replaces the default one) and the given extra members."""
    dist = name.replace("-", "_")
    top = top if top is not None else f"{dist}-{version}"
    deps = "".join(f"Requires-Dist: {r}\n" for r in requires or [])
    pkg_info = f"Metadata-Version: 2.1\nName: {pkg_info_name or name}\nVersion: {version}\nSummary: hand-made test archive\n{deps}\n".encode()
    project = pyproject if pyproject is not None else f'[project]\nname = "{name}"\nversion = "{version}"\n'
    base = [Member(f"{top}/pyproject.toml", project.encode())]
    if with_pkg_info:
        base.append(Member(f"{top}/PKG-INFO", pkg_info))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in [*base, *(members or [])]:
            ti = tarfile.TarInfo(m.name)
            ti.mtime = 1_700_000_000
            if m.kind == "file":
                ti.size = len(m.data)
                tar.addfile(ti, io.BytesIO(m.data))
                continue
            ti.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
                "blk": tarfile.BLKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[m.kind]
            ti.linkname = m.target
            tar.addfile(ti)
    return f"{dist}-{version}.tar.gz", buf.getvalue()
