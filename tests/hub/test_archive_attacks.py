"""The archive-attack corpus: every hostile or malformed upload is a 4xx with a clear reason and leaves
nothing behind (no row, no stored file, no temp file)."""

from __future__ import annotations

import io
import zipfile

import pytest

from tests.hub.helpers import HubClient, Member, make_sdist, make_wheel, record_hash

MiB = 1024 * 1024


def _zip_bomb() -> tuple[str, bytes]:
    # 64 MiB of zeros deflates to ~64 KiB: ratio ~1000, far above the limit of 100.
    return make_wheel(members=[Member("attack_env/zeros.bin", b"\0" * (64 * MiB))], compresslevel=9)


def _bad_record_hash() -> tuple[str, bytes]:
    return make_wheel(members=[Member("attack_env/a.py", b"print(1)\n", record_hash=record_hash(b"other"))])


def _record_missing_file() -> tuple[str, bytes]:
    return make_wheel(members=[Member("attack_env/unlisted.py", b"x = 2\n", in_record=False)])


def _no_record() -> tuple[str, bytes]:
    return make_wheel(with_record=False)


def _wheel_with_two_dist_infos() -> tuple[str, bytes]:
    return make_wheel(members=[Member("other-1.0.dist-info/METADATA", b"Name: other\nVersion: 1.0\n")])


def _not_a_zip() -> tuple[str, bytes]:
    return "attack_env-0.1.0-py3-none-any.whl", b"this is not a zip file at all"


def _truncated_zip() -> tuple[str, bytes]:
    name, data = make_wheel()
    return name, data[: len(data) // 2]


def _duplicate_member() -> tuple[str, bytes]:
    name, data = make_wheel()
    buf = io.BytesIO(data)
    with zipfile.ZipFile(buf, "a") as zf, pytest.warns(UserWarning):
        zf.writestr("attack_env/__init__.py", "evil = True\n")
    return name, buf.getvalue()


CORPUS = {
    "wheel-path-traversal": lambda: make_wheel(members=[Member("../../etc/evil.py", b"x")]),
    "wheel-traversal-inside": lambda: make_wheel(members=[Member("attack_env/../../evil.py", b"x")]),
    "wheel-absolute-path": lambda: make_wheel(members=[Member("/etc/evil.py", b"x")]),
    "wheel-backslash": lambda: make_wheel(members=[Member("attack_env\\..\\evil.py", b"x")]),
    "wheel-symlink": lambda: make_wheel(
        members=[Member("attack_env/link", kind="symlink", target="/etc/passwd")]
    ),
    "wheel-device-file": lambda: make_wheel(members=[Member("attack_env/dev", kind="chr")]),
    "wheel-zip-bomb": _zip_bomb,
    "wheel-bad-record-hash": _bad_record_hash,
    "wheel-file-not-in-record": _record_missing_file,
    "wheel-without-record": _no_record,
    "wheel-two-dist-infos": _wheel_with_two_dist_infos,
    "wheel-metadata-name-mismatch": lambda: make_wheel(metadata_name="other-env"),
    "wheel-metadata-version-mismatch": lambda: make_wheel(metadata_version="9.9.9"),
    "wheel-not-a-zip": _not_a_zip,
    "wheel-truncated": _truncated_zip,
    "wheel-duplicate-member": _duplicate_member,
    "sdist-path-traversal": lambda: make_sdist(members=[Member("attack_env-0.1.0/../../evil.py", b"x")]),
    "sdist-absolute-path": lambda: make_sdist(members=[Member("/tmp/evil.py", b"x")]),
    "sdist-symlink": lambda: make_sdist(
        members=[Member("attack_env-0.1.0/link", kind="symlink", target="/etc/passwd")]
    ),
    "sdist-hardlink": lambda: make_sdist(
        members=[Member("attack_env-0.1.0/hl", kind="hardlink", target="/etc/passwd")]
    ),
    "sdist-char-device": lambda: make_sdist(members=[Member("attack_env-0.1.0/tty", kind="chr")]),
    "sdist-block-device": lambda: make_sdist(members=[Member("attack_env-0.1.0/sda", kind="blk")]),
    "sdist-fifo": lambda: make_sdist(members=[Member("attack_env-0.1.0/pipe", kind="fifo")]),
    "sdist-outside-top-folder": lambda: make_sdist(members=[Member("elsewhere/x.py", b"x")]),
    "sdist-wrong-top-folder": lambda: make_sdist(top="other-0.1.0"),
    "sdist-no-pkg-info": lambda: make_sdist(with_pkg_info=False),
    "sdist-pkg-info-name-mismatch": lambda: make_sdist(pkg_info_name="someone-else"),
    "sdist-gzip-bomb": lambda: make_sdist(members=[Member("attack_env-0.1.0/zeros.bin", b"\0" * (64 * MiB))]),
    "sdist-not-gzip": lambda: ("attack_env-0.1.0.tar.gz", b"plain text, not gzip"),
    "unsupported-extension": lambda: ("attack_env-0.1.0.zip", make_wheel()[1]),
    "bad-filename": lambda: ("not-a-wheel.whl", make_wheel()[1]),
    "filename-with-path": lambda: ("../attack_env-0.1.0-py3-none-any.whl", make_wheel()[1]),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_attack_is_rejected_and_leaves_nothing(hub: HubClient, case: str) -> None:

    alice = hub.user("alice")
    filename, data = CORPUS[case]()
    r = hub.publish_files("alice", "attack-env", [(filename, data)], alice)
    assert 400 <= r.status_code < 500, (case, r.status_code, r.text)
    assert r.status_code != 404
    detail = r.json()["detail"]
    assert isinstance(detail, str) and len(detail) > 5
    assert hub.row_counts() == {"environments": 0, "versions": 0, "files": 0}
    assert hub.stored_keys() == []
    assert hub.temp_files() == []
    # The same attack through the legacy upload API.
    r = hub.client.post(
        "/legacy/",
        data={":action": "file_upload"},
        files={"content": (filename, data)},
        auth=("__token__", alice),
    )
    assert 400 <= r.status_code < 500, (case, r.status_code, r.text)
    assert hub.row_counts() == {"environments": 0, "versions": 0, "files": 0}
    assert hub.stored_keys() == [] and hub.temp_files() == []


def test_reasons_are_specific(hub: HubClient) -> None:

    alice = hub.user("alice")
    expect = {
        "wheel-path-traversal": "traversal",
        "wheel-absolute-path": "absolute",
        "wheel-symlink": "symbolic link",
        "sdist-hardlink": "hard link",
        "sdist-char-device": "device",
        "wheel-zip-bomb": "zip bomb",
        "sdist-gzip-bomb": "bomb",
        "wheel-bad-record-hash": "RECORD hash mismatch",
        "wheel-without-record": "RECORD",
        "wheel-metadata-name-mismatch": "names",
    }
    for case, needle in expect.items():
        filename, data = CORPUS[case]()
        r = hub.publish_files("alice", "attack-env", [(filename, data)], alice)
        assert needle in r.json()["detail"], (case, r.json())


def test_size_limits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    hub = HubClient.create(
        tmp_path / "hub",
        database_url=None,
        admin_token="vfh_" + "a" * 43,
        max_file_bytes=200_000,
        max_request_bytes=1_000_000,
        max_member_bytes=50_000,
    )
    try:
        alice = hub.user("alice")
        # A file over the per-file limit: 413.
        big = make_wheel(members=[Member("attack_env/big.bin", bytes(range(256)) * 1200)], compresslevel=0)
        r = hub.publish_files("alice", "attack-env", [big], alice)
        assert r.status_code == 413, r.text
        # A member over the per-member limit (in a small archive): 413.
        member = make_wheel(members=[Member("attack_env/m.bin", b"ab" * 40_000)])
        r = hub.publish_files("alice", "attack-env", [member], alice)
        assert r.status_code == 413, r.text
        # A request over the request limit is refused before it is read.
        r = hub.publish_files("alice", "attack-env", [("attack_env-0.1.0.tar.gz", b"x" * 1_100_000)], alice)
        assert r.status_code == 413
        assert hub.row_counts() == {"environments": 0, "versions": 0, "files": 0}
        assert hub.stored_keys() == [] and hub.temp_files() == []
    finally:
        hub.close()
