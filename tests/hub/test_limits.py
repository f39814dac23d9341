"""Resource bounds of a running hub against anonymous, huge, slow and many clients (issue 22, high 2 and
medium 5), each written as the attack over raw sockets against a real ``python -m hub serve``.

The hub's answer is the event these tests wait for: a bounded hub answers (413, 401, 408, 429) or
closes the connection while the attacker is still sending, an unbounded one keeps reading and waiting.
Socket timeouts are generous liveness guards, never the measure. See hub/README.md ("Limits") for the
policies pinned here and benchmarks/hub_limits.py for the memory measured under the same attacks.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess, run_hub
from tests.hub.helpers import Member, make_wheel

MiB = 1024 * 1024
BIG = 300 * MiB  # what the review's anonymous clients declared

# One hub for the tests that share nothing: short header, body and send timeouts, so that the slow
# clients below are cut off soon; every honest request of these tests sends at loopback speed.
FAST_CUTOFF = {
    "VF_HUB_HEADER_TIMEOUT_SECONDS": "2",
    "VF_HUB_BODY_TIMEOUT_SECONDS": "2",
    "VF_HUB_BODY_MIN_BYTES_PER_SECOND": "65536",
    "VF_HUB_SEND_TIMEOUT_SECONDS": "2",
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    with run_hub(tmp_path_factory.mktemp("limits-hub"), extra_env=FAST_CUTOFF) as h:
        yield h


def _user(h: HubProcess, name: str) -> str:
    with h.client(h.admin_token) as c:
        r = c.post("/api/v1/users", json={"name": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def _connect(h: HubProcess, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", h.port), timeout=60, source_address=(source, 0))


def _request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _status(sock: socket.socket) -> int | None:
    """The status of the server's answer, or None when it closed the connection without one."""
    data = b""
    while b"\r\n" not in data:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ", 2)[1])


def _answered(sock: socket.socket) -> bool:
    """Whether the server has answered (or closed) by now, without waiting."""
    return bool(select.select([sock], [], [], 0)[0])


def _send_until_answered(sock: socket.socket, chunks: Iterator[bytes]) -> int:
    """Send ``chunks`` until the server answers or closes; the bytes sent."""
    sent = 0
    for chunk in chunks:
        if _answered(sock):
            break
        try:
            sock.sendall(chunk)
        except OSError:  # the server closed its side while we were sending
            break
        sent += len(chunk)
    return sent


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


# ------------------------------------------------------------------------------------ body limits
CONTENT_TYPES = [None, "text/plain", "application/octet-stream", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=xyz", "application/json"]  # fmt: skip
SMALL_ROUTES = [("POST", "/api/v1/environments"), ("POST", "/api/v1/tokens"), ("POST", "/signin"),
                ("PUT", "/api/v1/environments/alice/x/star"), ("POST", "/api/v1/check-jobs/claim"),
                ("GET", "/simple/"), ("POST", "/api/v1/environments/alice/x/versions/1.0/evals")]  # fmt: skip


def test_a_big_body_is_refused_from_its_length_whatever_the_content_type(shared: HubProcess) -> None:
    """Only the two upload routes take big bodies. Everywhere else, whatever ``Content-Type`` says, with
    credentials or without, a body declared larger than ``max_body_bytes`` is 413 before a byte of it
    is sent (the review's anonymous 300 MiB bodies were read whole before the 401)."""
    admin = shared.admin_token
    for method, path in SMALL_ROUTES:
        for ctype in CONTENT_TYPES:
            for token in (None, admin):
                headers = {**_auth(token), "Content-Length": str(BIG)}
                if ctype:
                    headers["Content-Type"] = ctype
                with _connect(shared) as sock:
                    sock.sendall(_request_head(method, path, headers))
                    assert _status(sock) == 413, (method, path, ctype, token is not None)


def _chunked(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    piece = b"%x\r\n" % size + b"a" * size + b"\r\n"
    for _ in range(total // size):
        yield piece
    yield b"0\r\n\r\n"


def test_a_streamed_body_is_counted_as_it_arrives(shared: HubProcess) -> None:
    """A chunked body (no length to refuse it by) is counted as it arrives: 413 once past the route's
    bound, while the client is still sending, on a credentialed API route and on the anonymous sign-in."""
    for path, token, ctype in (("/api/v1/orgs", shared.admin_token, "text/plain"),
                               ("/signin", None, "application/x-www-form-urlencoded")):  # fmt: skip
        with _connect(shared) as sock:
            sock.sendall(_request_head("POST", path, {**_auth(token), "Content-Type": ctype,
                                                      "Transfer-Encoding": "chunked"}))  # fmt: skip
            sent = _send_until_answered(sock, _chunked(64 * MiB))
            assert _status(sock) == 413, path
            assert sent < 64 * MiB


def _write_operations(h: HubProcess) -> list[tuple[str, str]]:
    spec = httpx.get(h.url + "/openapi.json", timeout=60).json()
    ops = []
    for path, methods in spec["paths"].items():
        for method in methods:
            if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                concrete = path
                for param in ("owner", "name", "org", "user", "version", "job_id", "eval_id", "token_id"):
                    concrete = concrete.replace("{" + param + "}", "1" if param.endswith("id") else "x")
                assert "{" not in concrete, path
                ops.append((method.upper(), concrete))
    return ops


def test_credentials_are_checked_before_any_body(shared: HubProcess) -> None:
    """Every write route of the API (JSON, multipart or none) and /legacy/ answers an anonymous or
    wrong-token request with a body 401 before a byte of the body arrives: nobody's body is read, or
    even waited for, before the hub knows who sends it."""
    import secrets

    ops = _write_operations(shared)
    assert ("POST", "/legacy/") in ops and ("POST", "/api/v1/environments") in ops
    for method, path in ops:
        for token in (None, "vfh_" + secrets.token_urlsafe(32)):
            headers = {**_auth(token), "Content-Type": "application/json", "Content-Length": "1000"}
            with _connect(shared) as sock:
                sock.sendall(_request_head(method, path, headers))
                assert _status(sock) == 401, (method, path, token is not None)


# ------------------------------------------------------------------------------ slow and big heads
def test_slow_and_idle_connections_are_cut_off_while_others_are_served(shared: HubProcess) -> None:
    """A client that opens a connection and sends nothing, or sends its headers a byte at a time
    (slowloris), is cut off after ``header_timeout_seconds``; meanwhile everyone else is served."""
    idle = _connect(shared)
    slow = _connect(shared)
    slow.sendall(b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:
        dripped = 0
        with httpx.Client(base_url=shared.url, timeout=60) as c:
            while not (_answered(idle) and _answered(slow)) and dripped < 600:
                assert c.get("/healthz").status_code == 200
                if not _answered(slow):
                    slow.sendall(b"X")  # one more byte of a header name that never ends
                dripped += 1
                time.sleep(0.1)
        assert _status(idle) in (None, 408)
        assert _status(slow) in (None, 408)
        assert dripped < 600, "the slow clients were never cut off"
    finally:
        idle.close()
        slow.close()


def test_an_oversized_head_is_refused_while_it_is_sent(shared: HubProcess) -> None:
    """A request line or header block larger than ``max_header_bytes`` is refused (431, or 400 from
    the parser) while it is still being sent: the server never buffers it."""
    for prefix in (b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", b"GET /"):
        with _connect(shared) as sock:
            sock.sendall(prefix)
            sent = _send_until_answered(sock, iter([b"a" * 65536] * 256))  # 16 MiB of one header
            assert sent < 16 * MiB, prefix
            assert _status(sock) in (None, 400, 431), prefix


# -------------------------------------------------------------------------------- trickled bodies
def _upload_head(path: str, token: str, declared: int) -> tuple[bytes, bytes]:
    boundary = "vfb0undary"
    head = _request_head("POST", path, {**_auth(token), "Content-Length": str(declared),
                                        "Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    part = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="x-1.0.tar.gz"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()  # fmt: skip
    return head, part


def _publish(
    h: HubProcess, token: str, owner: str, name: str, files: list[tuple[str, bytes]]
) -> httpx.Response:
    with h.client(token) as c:
        return c.post(f"/api/v1/environments/{owner}/{name}/versions",
                      files=[("files", (fn, content, "application/octet-stream")) for fn, content in files])  # fmt: skip


def test_a_trickled_body_is_cut_off_and_its_upload_slot_freed(shared: HubProcess) -> None:
    """An upload whose body trickles in slower than ``body_min_bytes_per_second`` (after a grace of
    ``body_timeout_seconds``) gets 408 and loses its connection; the slot it held serves the next
    upload. The same bound holds on the anonymous sign-in form."""
    alice = _user(shared, "trickle")
    path = "/api/v1/environments/trickle/trickle-env/versions"
    for p, token in ((path, alice), ("/legacy/", alice), ("/signin", None)):
        if token:
            head, part = _upload_head(p, token, 50 * MiB)
        else:
            head = _request_head("POST", p, {"Content-Type": "application/x-www-form-urlencoded",
                                             "Content-Length": "500000"})  # fmt: skip
            part = b"token="
        with _connect(shared) as sock:
            sock.sendall(head + part)
            drips = 0
            while not _answered(sock) and drips < 3000:  # 100 bytes every 20 ms: 5 KB/s
                try:
                    sock.sendall(b"a" * 100)
                except OSError:
                    break
                drips += 1
                time.sleep(0.02)
            assert _status(sock) == 408, p
    r = _publish(shared, alice, "trickle", "trickle-env", [make_wheel("trickle-env", "1.0")])
    assert r.status_code == 201, r.text
    assert not list((shared.data_dir / "tmp").glob("upload-*"))


# ------------------------------------------------------------------------------------- fair slots
def test_one_users_trickled_uploads_cannot_stop_another_users_upload(tmp_path: Path) -> None:
    """Eight stalled uploads of one user (every slot of the worker, before per-user shares) take only
    that user's share (``max_uploads_per_user``); another user's upload goes through."""
    with run_hub(tmp_path / "hub") as h:  # default slots (8) and shares (2)
        alice, bob = _user(h, "alice"), _user(h, "bob")
        stalled = []
        try:
            for _ in range(8):
                sock = _connect(h)
                head, part = _upload_head("/api/v1/environments/alice/a-env/versions", alice, 50 * MiB)
                sock.sendall(head + part + b"\0" * 65536)
                stalled.append(sock)
            wheel = make_wheel("a-env", "1.0")
            for _ in range(600):  # until the server holds alice's stalled uploads (polled, not timed)
                if _publish(h, alice, "alice", "a-env", [wheel]).status_code == 429:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("alice's uploads never filled her share")
            r = _publish(h, bob, "bob", "b-env", [make_wheel("b-env", "1.0")])
            assert r.status_code == 201, r.text
        finally:
            for sock in stalled:
                sock.close()


# --------------------------------------------------------------------------------------- big files
@pytest.fixture(scope="module")
def big_file(shared: HubProcess) -> str:
    """A 16 MiB (incompressible) wheel published on the shared hub; its download URL."""
    import os

    owner = _user(shared, "bigfile")
    wheel = make_wheel("big-file-env", "1.0", [Member("big_file_env/blob.bin", os.urandom(16 * MiB))],
                       compresslevel=0)  # fmt: skip
    r = _publish(shared, owner, "bigfile", "big-file-env", [wheel])
    assert r.status_code == 201, r.text
    with shared.client() as c:
        url = c.get("/api/v1/environments/bigfile/big-file-env/versions/1.0").json()["files"][0]["url"]
    return url if url.startswith("http") else shared.url + url


def _bytes_read(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/PID/io")


def test_head_of_a_big_file_never_reads_it(shared: HubProcess, big_file: str) -> None:
    """HEAD answers a file's headers (its length included) without reading the file: three HEADs of a
    16 MiB file make the hub process read far less than the file once (``rchar`` of /proc/PID/io)."""
    with httpx.Client(timeout=60) as c:
        size = int(c.get(big_file).headers["content-length"])
        before = _bytes_read(shared.process.pid)
        for _ in range(3):
            r = c.head(big_file)
            assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) == size
        read = _bytes_read(shared.process.pid) - before
    assert size > 16 * MiB and read < MiB, read


def test_a_client_that_stops_reading_is_cut_off(shared: HubProcess, big_file: str) -> None:
    """A download whose client stops reading (the server's sends block) is dropped after
    ``send_timeout_seconds``: the client finds the connection closed before the file's end. Others
    are served meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", shared.port))
    path = big_file.split(str(shared.port), 1)[1]
    with sock:
        sock.sendall(_request_head("GET", path, {}))
        for _ in range(1200):  # until the hub says it dropped a stalled response (polled)
            if "response stalled" in shared.logs():
                break
            with httpx.Client(base_url=shared.url, timeout=60) as c:
                assert c.get("/healthz").status_code == 200
            time.sleep(0.1)
        else:
            raise AssertionError("the stalled download was never cut off")
        got = 0
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
    assert got < 16 * MiB


# ---------------------------------------------------------------------------------- many connections
def test_one_address_cannot_hold_every_connection(tmp_path: Path) -> None:
    """Beyond ``max_connections_per_client`` open connections from one address, its next connection is
    refused with 429; other addresses are served; a closed connection frees its place."""
    env = {"VF_HUB_MAX_CONNECTIONS_PER_CLIENT": "4", "VF_HUB_HEADER_TIMEOUT_SECONDS": "600"}
    with run_hub(tmp_path / "hub", extra_env=env) as h:
        held = [_connect(h, "127.0.0.2") for _ in range(4)]
        try:
            for sock in held:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # headers never finished
            with _connect(h, "127.0.0.2") as extra:
                extra.sendall(_request_head("GET", "/healthz", {}))
                assert _status(extra) == 429
            with httpx.Client(base_url=h.url, timeout=60) as c:  # from 127.0.0.1
                assert c.get("/healthz").status_code == 200
            held.pop().close()
            for _ in range(600):  # until the server has seen the close (polled)
                with _connect(h, "127.0.0.2") as again:
                    again.sendall(_request_head("GET", "/healthz", {"Connection": "close"}))
                    if _status(again) == 200:
                        break
                time.sleep(0.05)
            else:
                raise AssertionError("the closed connection's place never came back")
        finally:
            for sock in held:
                sock.close()


def test_only_the_upload_routes_take_big_bodies(tmp_path: Path) -> None:
    """The middleware's list of big-body routes is exactly the multipart routes of the API: a new
    upload route cannot be forgotten (it would get 413), nor can a small route take big bodies."""
    from hub.app import create_app, is_upload_route, needs_credentials
    from hub.testing import make_settings

    spec = create_app(make_settings(tmp_path)).openapi()
    seen = 0
    for path, ops in spec["paths"].items():
        concrete = path.replace("{owner}", "alice").replace("{name}", "env")
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {})
            assert is_upload_route(method.upper(), concrete) == ("multipart/form-data" in content), (method, path)
            if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                assert needs_credentials(method.upper(), concrete), (method, path)
            seen += "multipart/form-data" in content
    assert seen == 2
    assert not needs_credentials("POST", "/signin") and not is_upload_route("POST", "/signin")
