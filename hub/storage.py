"""File storage behind one interface: a local folder (default) or S3-compatible object storage.

Keys are content addressed (``files/<sha[:2]>/<sha>/<filename>``), so a stored object never changes.
Writes are atomic: the local store writes a temp file, fsyncs it and renames it into place; S3 makes an
object visible only when its upload completes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

from hub.settings import Settings

CHUNK = 1024 * 1024


class Storage(Protocol):
    """What the hub needs from a file store."""

    def put(self, key: str, src: IO[bytes]) -> None:
        """Store the bytes read from ``src`` (from its current position) under ``key``, atomically."""

    def open(self, key: str) -> IO[bytes]:
        """A readable, seekable binary file with the object's bytes (caller closes it)."""

    def iter_bytes(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        """The object's bytes in chunks, for streaming responses."""

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> Iterator[str]: ...

    def modified_at(self, key: str) -> float:
        """When the object was written (epoch seconds); lets garbage collection spare fresh uploads."""


def _check_key(key: str) -> str:
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in key or "\x00" in key:
        raise ValueError(f"invalid storage key: {key!r}")
    return key


class LocalStorage:
    """Files under one folder; temp files live in ``<root>/.tmp`` so renames stay on one filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp = self.root / ".tmp"
        self.tmp.mkdir(exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put(self, key: str, src: IO[bytes]) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=self.tmp, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp_name, dest)
            dir_fd = os.open(dest.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise

    def open(self, key: str) -> IO[bytes]:
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError:
            raise KeyError(key) from None

    def iter_bytes(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        with self.open(key) as fh:
            while chunk := fh.read(chunk_size):
                yield chunk

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        p = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
        # Remove now-empty parent folders up to the root, so a rejected upload leaves nothing.
        for parent in p.parents:
            if parent == self.root or self.root not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:
                break

    def modified_at(self, key: str) -> float:
        return self._path(key).stat().st_mtime

    def keys(self, prefix: str = "") -> Iterator[str]:
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and self.tmp not in path.parents:
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    yield key


class S3Storage:
    """Objects in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO, ...) through boto3."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str = "us-east-1",
        prefix: str = "",
        create_bucket: bool = True,
    ) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
                max_pool_connections=50,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        if create_bucket:
            self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    def _key(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def put(self, key: str, src: IO[bytes]) -> None:
        # upload_fileobj streams in parts; the object appears only once the upload completes.
        self.client.upload_fileobj(src, self.bucket, self._key(key))

    def open(self, key: str) -> IO[bytes]:
        from botocore.exceptions import ClientError

        out = tempfile.SpooledTemporaryFile(max_size=8 * CHUNK)
        try:
            self.client.download_fileobj(self.bucket, self._key(key), out)
        except ClientError as exc:
            out.close()
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise KeyError(key) from None
            raise
        out.seek(0)
        return out  # type: ignore[return-value]

    def iter_bytes(self, key: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise KeyError(key) from None
            raise
        body = obj["Body"]
        try:
            yield from body.iter_chunks(chunk_size)
        finally:
            body.close()

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError:
            return False

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def modified_at(self, key: str) -> float:
        head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        return float(head["LastModified"].timestamp())

    def keys(self, prefix: str = "") -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            for item in page.get("Contents", []):
                yield item["Key"][len(self.prefix) :]


def make_storage(settings: Settings) -> Storage:
    """The one place where the storage backend is chosen from settings."""
    if settings.storage == "s3":
        return S3Storage(
            settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=(
                settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else None
            ),
            region=settings.s3_region,
            prefix=settings.s3_prefix,
            create_bucket=settings.s3_create_bucket,
        )
    return LocalStorage(settings.resolved_storage_path)


def file_key(sha256: str, filename: str) -> str:
    """The content address of a distribution file: its URL path under ``/files/``."""
    return f"files/{sha256[:2]}/{sha256}/{filename}"


def blob_key(sha256: str, filename: str, nonce: str) -> str:
    """Where one upload stores a file: under its content address, plus a nonce of that upload.

    The nonce makes every upload's blob its own, so a failed or redundant upload deletes exactly what it
    wrote and never a blob a concurrent upload of the same bytes is about to reference.
    """
    return f"files/{sha256[:2]}/{sha256}/{nonce}/{filename}"


def is_blob_of(key: str, sha256: str, filename: str) -> bool:
    """True if storage ``key`` holds the file with this content address."""
    head = f"files/{sha256[:2]}/{sha256}/"
    return key.startswith(head) and key.endswith("/" + filename) and key.count("/") == 4
