"""Storage backends, each against the local folder AND a real S3-compatible server (SeaweedFS):
round trips, atomic writes, key validation; and the hub end to end on S3."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.storage import LocalStorage, S3Storage, Storage, file_key
from tests.hub.helpers import HubClient, Member, PackageFactory, make_wheel
from tests.support.services import S3Bucket


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "files")
    b: S3Bucket = request.getfixturevalue("s3_bucket")
    return S3Storage(
        b.bucket,
        endpoint_url=b.endpoint_url,
        access_key_id=b.access_key,
        secret_access_key=b.secret_key,
        region=b.region,
        prefix="hubfiles",
    )


class FailingReader(io.RawIOBase):
    """Yields some bytes, then fails, as a dropped connection or full disk would."""

    def __init__(self, good: int) -> None:
        self.left = good

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        if self.left <= 0:
            raise OSError("connection lost")
        n = min(len(b), self.left, 64 * 1024)
        b[:n] = b"x" * n
        self.left -= n
        return n


def test_round_trip(storage: Storage) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    sha = hashlib.sha256(data).hexdigest()
    key = file_key(sha, "pkg-1.0-py3-none-any.whl")
    assert not storage.exists(key)
    storage.put(key, io.BytesIO(data))
    assert storage.exists(key)
    with storage.open(key) as fh:
        assert fh.read() == data
    assert b"".join(storage.iter_bytes(key, 100_000)) == data
    storage.put(file_key("ab" * 32, "other.tar.gz"), io.BytesIO(b"small"))
    assert sorted(storage.keys("files/")) == sorted([key, file_key("ab" * 32, "other.tar.gz")])
    storage.delete(key)
    assert not storage.exists(key)
    with pytest.raises(KeyError):
        storage.open(key)
    assert list(storage.keys("files/")) == [file_key("ab" * 32, "other.tar.gz")]


def test_failed_write_leaves_nothing(storage: Storage) -> None:
    key = file_key("cd" * 32, "broken.whl")
    with pytest.raises(Exception):  # noqa: B017 - boto wraps the reader's error in its own types
        storage.put(key, FailingReader(2 * 1024 * 1024))
    assert not storage.exists(key)
    assert list(storage.keys("files/")) == []
    if isinstance(storage, LocalStorage):
        assert list(storage.tmp.iterdir()) == []


@pytest.mark.parametrize("key", ["../escape", "/abs/key", "files//double", "files/./x", "a\\b", ""])
def test_invalid_keys_refused(storage: Storage, key: str) -> None:
    with pytest.raises(ValueError):
        storage.put(key, io.BytesIO(b"x"))


@pytest.fixture
def s3_hub(tmp_path: Path, s3_bucket: S3Bucket) -> Iterator[HubClient]:
    h = HubClient.create(
        tmp_path / "hub",
        database_url=None,
        admin_token="vfh_" + secrets.token_urlsafe(32),
        storage="s3",
        s3_endpoint_url=s3_bucket.endpoint_url,
        s3_bucket=s3_bucket.bucket,
        s3_access_key_id=s3_bucket.access_key,
        s3_secret_access_key=s3_bucket.secret_key,
        s3_region=s3_bucket.region,
    )
    try:
        yield h
    finally:
        h.close()


def test_hub_on_s3_end_to_end(s3_hub: HubClient, packages: PackageFactory) -> None:
    hub = s3_hub
    assert isinstance(hub.hub.storage, S3Storage)
    alice = hub.user("alice")
    pkg = packages.get("s3-env", "1.0.0", readme="# On S3\n")
    assert hub.publish("alice", pkg, alice).status_code == 201
    assert not (hub.data_dir / "files").exists() or not any((hub.data_dir / "files").rglob("*.whl"))
    doc = hub.get("/simple/s3-env/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}).json()
    for f in doc["files"]:
        body = hub.get(f["url"]).content
        assert hashlib.sha256(body).hexdigest() == f["hashes"]["sha256"]
    assert len(hub.stored_keys()) == 2
    src = hub.get("/api/v1/environments/alice/s3-env/versions/1.0.0/source/README.md")
    assert src.text == "# On S3\n"
    assert hub.get("/api/v1/environments/alice/s3-env/downloads").json()["total"] == 2
    # A rejected upload leaves no object behind on S3 either.
    bad = make_wheel("s3-env", "2.0.0", members=[Member("../evil.py", b"x")])
    assert hub.publish_files("alice", "s3-env", [bad], alice).status_code == 400
    assert len(hub.stored_keys()) == 2
    assert hub.temp_files() == []


def test_gc_removes_only_old_unreferenced_blobs(
    storage: Storage, tmp_path: Path, packages: PackageFactory
) -> None:
    """``hub gc`` on the local folder and on S3: referenced blobs stay, fresh orphans (an upload in
    flight) stay, old orphans go."""
    from hub.core import Hub

    hub = HubClient.create(tmp_path / "gc", database_url=None, admin_token="vfh_" + secrets.token_urlsafe(32))
    try:
        core: Hub = hub.hub
        # The same hub logic over either backend: the services that store and collect blobs use it.
        core.storage = core.publishing.storage = core.blobs.storage = storage
        # ... paired with this database as a first start would pair it (gc refuses an unknown storage).
        from hub.core import STORAGE_MARKER

        storage.put(STORAGE_MARKER, io.BytesIO(str(core.blobs.recorded_storage_id()).encode()))
        alice = hub.user("alice")
        assert hub.publish("alice", packages.get("gc-env", "1.0.0"), alice).status_code == 201
        published = sorted(storage.keys("files/"))
        assert len(published) == 2
        orphan = file_key("ef" * 32, "orphan.whl")
        storage.put(orphan, io.BytesIO(b"left by a crash"))
        assert core.blobs.gc_orphans(min_age_seconds=3600) == 0  # too fresh: might be an upload in flight
        assert core.blobs.gc_orphans(min_age_seconds=0) == 1
        assert sorted(storage.keys("files/")) == published
        doc = hub.get("/api/v1/environments/alice/gc-env/versions/1.0.0").json()
        assert all(storage.exists(k) for k in published) and len(doc["files"]) == 2
    finally:
        hub.close()


def test_blob_keys_are_content_addressed_and_per_upload() -> None:
    from hub.storage import blob_key, is_blob_of

    sha = "ab" * 32
    a, b = blob_key(sha, "x-1.0-py3-none-any.whl", "n1"), blob_key(sha, "x-1.0-py3-none-any.whl", "n2")
    assert a != b and a.startswith(file_key(sha, "")[:-1])
    assert is_blob_of(a, sha, "x-1.0-py3-none-any.whl") and is_blob_of(b, sha, "x-1.0-py3-none-any.whl")
    assert not is_blob_of(a, "cd" * 32, "x-1.0-py3-none-any.whl")
    assert not is_blob_of(a, sha, "y-1.0-py3-none-any.whl")
    assert not is_blob_of(file_key(sha, "x-1.0-py3-none-any.whl"), sha, "x-1.0-py3-none-any.whl")
