"""The hub under resource attacks: worker memory and honest service while anonymous and slow clients push.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/hub_limits.py [--workers 4] [--big 4] [--slow 200] [--trickle 16]

Starts PostgreSQL (``tests/support/services.py``) and a real hub (``python -m hub serve``, default
settings, ``--workers`` uvicorn workers), then, all at once:

* ``--big`` anonymous clients each send a 300 MiB body to a non-upload route (``POST
  /api/v1/environments``, ``Content-Type: text/plain``; half with a length, half chunked), as fast as
  loopback takes it, until the hub answers or closes;
* ``--slow`` slowloris clients: half open a connection and send nothing, half send a request head a
  byte every half second;
* ``--trickle`` uploads of one user whose bodies trickle at 1 KB/s;
* one honest client that keeps reading ``/healthz`` and ``/simple/`` and publishing versions as
  another user.

It reports each worker's RSS before and its peak (``VmHWM``) after, what each attacker got, and
what the honest client got. To measure another checkout (e.g. the hub before these limits), run this
script with ``PYTHONPATH`` pointing at it: ``run_hub`` starts the hub found on the import path.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Not this folder (its hub.py would shadow the package), and the checkout PYTHONPATH names if any.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from hub.testing import run_hub  # noqa: E402
from tests.hub.helpers import make_wheel  # noqa: E402
from tests.support.services import start_postgres  # noqa: E402

MiB = 1024 * 1024


def worker_pids(pid: int) -> list[int]:
    """The uvicorn workers of the hub process ``pid`` (its children that are hub workers)."""
    import psutil

    kids = psutil.Process(pid).children(recursive=True)
    workers = [k.pid for k in kids if "spawn_main" in " ".join(k.cmdline())]
    return workers or [pid]


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def answer(sock: socket.socket) -> str:
    """What the hub answered on ``sock``: its status code, 'closed' or 'reset'."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                return "closed"
            data += chunk
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "no answer"
    return data.split(b" ", 2)[1].decode()


def answered(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def big_body(port: int, chunked: bool, out: list[str]) -> None:
    head = "POST /api/v1/environments HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {300 * MiB}\r\n\r\n"
    piece = b"a" * MiB
    if chunked:
        piece = b"%x\r\n" % len(piece) + piece + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        s.sendall(head.encode())
        sent = 0
        try:
            while sent < 300 and not answered(s):
                s.sendall(piece)
                sent += 1
            if chunked and not answered(s):
                s.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        out.append(f"{answer(s)} after {sent} MiB sent")


def slowloris(port: int, drip: bool, stop: threading.Event, out: list[str]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        start = time.monotonic()
        try:
            if drip:
                s.sendall(b"GET /simple/ HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set() and not answered(s):
                if drip:
                    s.sendall(b"X")
                stop.wait(0.5)
        except OSError:
            pass
        held = time.monotonic() - start
        out.append(f"{answer(s) if answered(s) else 'held'} ({'drip' if drip else 'idle'}, {held:.0f}s)")


def trickle(port: int, token: str, stop: threading.Event, out: list[str]) -> None:
    boundary = "b0und"
    head = (f"POST /api/v1/environments/mallory/m-env/versions HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {100 * MiB}\r\n\r\n"
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="m_env-1.0.tar.gz"\r\n\r\n')  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        start = time.monotonic()
        s.sendall(head.encode())
        try:
            while not stop.is_set() and not answered(s):
                s.sendall(b"a" * 100)
                stop.wait(0.1)
        except OSError:
            pass
        held = time.monotonic() - start
        out.append(f"{answer(s) if answered(s) else 'held'} ({held:.0f}s)")


def honest(url: str, token: str, stop: threading.Event, out: collections.Counter[str]) -> None:
    n = 0
    with httpx.Client(base_url=url, timeout=30) as c:
        while not stop.is_set():
            for path in ("/healthz", "/simple/"):
                try:
                    out[f"GET {path} {c.get(path).status_code}"] += 1
                except httpx.HTTPError as exc:
                    out[f"GET {path} {type(exc).__name__}"] += 1
            if n % 10 == 0:
                fn, data = make_wheel("h-env", f"1.{n}")
                try:
                    r = c.post("/api/v1/environments/honest/h-env/versions", headers={"Authorization": f"Bearer {token}"},
                               files=[("files", (fn, data, "application/octet-stream"))])  # fmt: skip
                    out[f"upload {r.status_code}"] += 1
                except httpx.HTTPError as exc:
                    out[f"upload {type(exc).__name__}"] += 1
            n += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--big", type=int, default=4, help="anonymous 300 MiB bodies")
    ap.add_argument("--slow", type=int, default=200, help="slowloris connections")
    ap.add_argument("--trickle", type=int, default=16, help="trickled uploads of one user")
    ap.add_argument("--hold", type=float, default=45.0, help="seconds the slow attackers keep going")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import tempfile

    pg = start_postgres()
    work = Path(tempfile.mkdtemp(prefix="hub-limits-"))
    try:
        url = pg.create_database("hub_limits")
        limits_on = {"VF_HUB_RATE_LIMIT_ENABLED": "1"}  # the production default (run_hub turns it off)
        with run_hub(work / "hub", database_url=url, workers=args.workers, extra_env=limits_on) as h:
            with h.client(h.admin_token) as c:
                mallory = c.post("/api/v1/users", json={"name": "mallory"}).json()["token"]
                good = c.post("/api/v1/users", json={"name": "honest"}).json()["token"]
            with httpx.Client(base_url=h.url, timeout=30) as c:  # warm every worker a little
                for _ in range(50):
                    c.get("/simple/")
            pids = worker_pids(h.process.pid)
            before = {p: status_kib(p, "VmRSS") for p in pids}
            stop = threading.Event()
            big: list[str] = []
            slow: list[str] = []
            trickled: list[str] = []
            served: collections.Counter[str] = collections.Counter()
            threads = [threading.Thread(target=honest, args=(h.url, good, stop, served))]
            threads += [
                threading.Thread(target=big_body, args=(h.port, i % 2 == 1, big)) for i in range(args.big)
            ]
            threads += [threading.Thread(target=slowloris, args=(h.port, i % 2 == 1, stop, slow))
                        for i in range(args.slow)]  # fmt: skip
            threads += [threading.Thread(target=trickle, args=(h.port, mallory, stop, trickled))
                        for _ in range(args.trickle)]  # fmt: skip
            t0 = time.monotonic()
            for t in threads:
                t.start()
            stop.wait(args.hold)
            stop.set()
            for t in threads:
                t.join(timeout=600)
            elapsed = time.monotonic() - t0
            after = {p: status_kib(p, "VmRSS") for p in pids}
            peak = {p: status_kib(p, "VmHWM") for p in pids}
    finally:
        pg.stop()
    result: dict[str, Any] = {
        "workers": len(pids),
        "rss_before_mib": [round(before[p] / 1024) for p in pids],
        "rss_peak_mib": [round(peak[p] / 1024) for p in pids],
        "rss_after_mib": [round(after[p] / 1024) for p in pids],
        "big_bodies": collections.Counter(b.split(" after")[0] for b in big),
        "big_bodies_detail": big,
        "slowloris": collections.Counter(
            s.split(" (")[0] + " (" + s.split(" (")[1].split(",")[0] + ")" for s in slow
        ),
        "trickled_uploads": collections.Counter(t.split(" (")[0] for t in trickled),
        "honest_client": dict(served),
        "seconds": round(elapsed, 1),
    }
    print(json.dumps(result, indent=2, default=dict))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=dict))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
