"""Benchmark: our Environments Hub against pypiserver, side by side in the same run.

What it measures (all on loopback, on this machine, in one run so both sides see the same load):

1. Simple-index page throughput (requests/s) under concurrent load: the same generated environment
   packages served by our hub (uvicorn, one worker and several workers) and by pypiserver (its default
   server, and under gunicorn with the same worker count, the way its docs deploy it). Load comes from
   ``wrk`` when present, else an aiohttp loop; the duration is bounded.
   Hub pages are also measured authenticated (the token as the Basic password, what ``vf install`` and
   private pips send), next to the same pages anonymous.
   ``/healthz`` (pypiserver's ``/health``) is measured beside them: a route with no index work, so a
   change in the pages' ratio that the health check does not show is the index route's own.
   ``--packages 1 --versions 1.0.0 --skip-install --skip-search --workers 1 --connections 32`` is the
   measurement of issue 22 (one release, ``/simple/NAME/``).
2. Wall time of ``pip install`` (and ``uv pip install``) of one environment with hub-only dependencies
   from each index, each into a fresh virtual environment, median of 3.
3. Search latency p50/p95 over 10,000 environments on SQLite and on PostgreSQL (seeded directly
   through the hub's models).
4. A hub worker's resident memory with 10,000 environments (after search and index traffic).
5. Peak resident memory of a hub worker while it receives a 100 MB upload (peak reset just before).

Usage: ``python benchmarks/hub.py [--quick] [--json FILE]`` (``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Run as `python benchmarks/hub.py`, this file's folder comes first on sys.path and would shadow the
# `hub` package with this very script; put the repository root there instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))

from tests.support.envpkg import BuiltPackage, build_env_package  # noqa: E402
from tests.support.services import free_port, start_postgres  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent
ADMIN_TOKEN = "vfh_bench" + os.urandom(16).hex()  # hub tokens start with "vfh_"
WORDS = (
    "math arithmetic algebra geometry logic puzzle sudoku chess code python sql regex search "
    "retrieval wiki trivia reasoning planning game maze grid graph path tool calculator browser "
    "translation summarization poetry story dialogue negotiation agent multi turn single verify "
    "proof theorem lean unit tests json schema parsing extraction classification sentiment"
).split()


# ------------------------------------------------------------------------------------------------
# processes


@dataclass
class Server:
    """A server subprocess in its own process group, with the URL it serves."""

    name: str
    base_url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    own_group: bool = True  # started in its own session: signal the whole group (workers included)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.own_group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=10)

    def worker_pids(self) -> list[int]:
        """The processes that serve requests: children when there are any (multi-worker), else itself."""
        kids = _children(self.proc.pid)
        return kids or [self.proc.pid]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def start_server(name: str, args: Sequence[str], url: str, ready_path: str, log_dir: Path,
                 env: dict[str, str] | None = None, timeout: float = 90.0) -> Server:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(args), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True, cwd=log_dir,
        )
    server = Server(name=name, base_url=url, proc=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + ready_path, timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(f"{name} not ready in {timeout}s:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, val = line.split(":", 1)
            out[key] = int(val.split()[0])
    return out


def reset_peak_rss(pid: int) -> None:
    """Reset VmHWM so that the next reading is the peak of what follows (Linux clear_refs, value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


# ------------------------------------------------------------------------------------------------
# packages


def build_packages(work: Path, count: int, versions: Sequence[str]) -> list[BuiltPackage]:
    """``count`` environments with ``len(versions)`` releases each (wheel + sdist per release).

    Environment 0 depends on environments 1-3 so that installing it makes the resolver fetch several
    index pages and files, as installing a real environment with dependencies does.
    """
    built: list[BuiltPackage] = []
    for i in range(count):
        name = f"benchenv-{i:03d}"
        deps = [f"benchenv-{j:03d}>=0.1" for j in (1, 2, 3)] if i == 0 and count > 3 else []
        tags = random.Random(i).sample(WORDS, 3)
        for v in versions:
            built.append(build_env_package(
                work / name, name, v, dependencies=deps, tags=tags,
                description=f"Benchmark environment {i}: {' '.join(tags)}",
            ))
    return built


# ------------------------------------------------------------------------------------------------
# load generation


@dataclass
class LoadResult:
    tool: str
    requests_per_s: float
    requests: int
    errors: int
    p50_ms: float | None = None
    p99_ms: float | None = None


def _wrk_latency_ms(text: str, pct: str) -> float | None:
    m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not m:
        return None
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    return float(m.group(1)) * scale


def load_wrk(base_url: str, paths: Sequence[str], duration: float, connections: int, threads: int,
             work: Path, headers: dict[str, str] | None = None) -> LoadResult:
    lua = work / f"paths-{os.getpid()}-{time.monotonic_ns()}.lua"
    quoted = ",\n".join(json.dumps(p) for p in paths)
    hdrs = "".join(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}\n" for k, v in (headers or {}).items())
    lua.write_text(
        f"local paths = {{\n{quoted}\n}}\n{hdrs}local i = 0\n"
        "request = function()\n  i = i + 1\n  return wrk.format('GET', paths[(i % #paths) + 1])\nend\n"
    )
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:.0f}s", "--latency", "--timeout", "10s",
         "-s", str(lua), base_url],
        capture_output=True, text=True, timeout=duration + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed: {out.stderr}")
    text = out.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(int(x) for x in sock.groups()) if sock else 0)
    return LoadResult("wrk", rps, total, errors, _wrk_latency_ms(text, "50"), _wrk_latency_ms(text, "99"))


def load_aiohttp(base_url: str, paths: Sequence[str], duration: float, connections: int,
                 headers: dict[str, str] | None = None) -> LoadResult:
    """Fallback load loop when wrk is absent: ``connections`` concurrent keep-alive clients."""
    import aiohttp

    async def main() -> LoadResult:
        latencies: list[float] = []
        errors = 0
        stop_at = time.monotonic() + duration
        conn = aiohttp.TCPConnector(limit=connections)
        async with aiohttp.ClientSession(base_url, connector=conn, headers=headers) as session:
            async def worker(offset: int) -> None:
                nonlocal errors
                i = offset
                while time.monotonic() < stop_at:
                    t0 = time.perf_counter()
                    try:
                        async with session.get(paths[i % len(paths)]) as r:
                            await r.read()
                            if r.status >= 400:
                                errors += 1
                    except aiohttp.ClientError:
                        errors += 1
                    latencies.append((time.perf_counter() - t0) * 1000)
                    i += 1

            t0 = time.monotonic()
            await asyncio.gather(*(worker(k) for k in range(connections)))
            elapsed = time.monotonic() - t0
        latencies.sort()
        return LoadResult(
            "aiohttp", len(latencies) / elapsed, len(latencies), errors,
            latencies[len(latencies) // 2] if latencies else None,
            latencies[int(len(latencies) * 0.99)] if latencies else None,
        )

    return asyncio.run(main())


def measure_index(base_url: str, paths: Sequence[str], args: argparse.Namespace, work: Path,
                  headers: dict[str, str] | None = None) -> LoadResult:
    for p in paths[:3]:  # warm caches and check the pages exist before loading them
        req = urllib.request.Request(base_url + p, headers=headers or {})
        with urllib.request.urlopen(req, timeout=60) as r:  # a loaded machine can stall a server for seconds
            if r.status != 200:
                raise RuntimeError(f"{base_url}{p} answered {r.status}")
            r.read()
    if shutil.which("wrk") and not args.no_wrk:
        return load_wrk(base_url, paths, args.duration, args.connections, args.wrk_threads, work, headers)
    return load_aiohttp(base_url, paths, args.duration, args.connections, headers)


# ------------------------------------------------------------------------------------------------
# installs


def _clean_pip_env() -> dict[str, str]:
    """pip/uv see only the index we give them: no config files, no find-links, no extra indexes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
                "UV_NO_CONFIG": "1"})
    return env


def time_install(tool: str, index_url: str, requirement: str, work: Path, runs: int) -> list[float]:
    """Seconds per install of ``requirement`` into a fresh venv (venv creation not timed)."""
    times: list[float] = []
    env = _clean_pip_env()
    for k in range(runs):
        venv = work / f"venv-{tool}-{k}-{time.monotonic_ns()}"
        subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
        if tool == "pip":
            cmd = [PY, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-cache-dir",
                   "--index-url", index_url, requirement]
        else:
            cmd = [str(BIN / "uv"), "pip", "install", "-q", "--no-cache", "--python", str(venv / "bin" / "python"),
                   "--index-url", index_url, requirement]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        elapsed = time.perf_counter() - t0
        if out.returncode != 0:
            raise RuntimeError(f"{tool} install from {index_url} failed:\n{out.stdout}\n{out.stderr}")
        check = subprocess.run([str(venv / "bin" / "python"), "-c", "import benchenv_000, benchenv_003"],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"installed environment does not import: {check.stderr}")
        times.append(elapsed)
        shutil.rmtree(venv, ignore_errors=True)
    return times


# ------------------------------------------------------------------------------------------------
# pypiserver


def start_pypiserver(pkg_dir: Path, work: Path, gunicorn_workers: int | None) -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if gunicorn_workers is None:
        args = [str(BIN / "pypi-server"), "run", "-p", str(port), "-i", "127.0.0.1", "-a", ".", "-P", ".",
                "--disable-fallback", "--log-req-frmt", "", str(pkg_dir)]
        name = "pypiserver"
    else:
        args = [str(BIN / "gunicorn"), "-w", str(gunicorn_workers), "-b", f"127.0.0.1:{port}", "--log-level",
                "warning", f"pypiserver:app(root={str(pkg_dir)!r}, authenticate=[], password_file='.', "
                "disable_fallback=True)"]
        name = f"pypiserver-gunicorn-{gunicorn_workers}w"
    return start_server(name, args, url, "/simple/", work)


# ------------------------------------------------------------------------------------------------
# our hub


def start_hub(name: str, data_dir: Path, work: Path, workers: int, database_url: str | None = None) -> Server:
    """The hub as production runs it: ``python -m hub serve`` (uvicorn with uvloop + httptools) with
    ``workers`` processes, started through the hub's own test launcher."""
    from hub.testing import run_hub

    handle = run_hub(data_dir, database_url=database_url, admin_token=ADMIN_TOKEN, workers=workers,
                     extra_env={"VF_HUB_LOG_JSON": "0"}, timeout=120)
    return Server(name=name, base_url=handle.url, proc=handle.process, log_path=handle.log_path,
                  own_group=False)


def upload_to_hub(base_url: str, files: Sequence[Path]) -> None:
    """Publish through the standard upload protocol (what ``twine upload`` and ``uv publish`` speak)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    cmd = [str(BIN / "twine"), "upload", "--non-interactive", "--disable-progress-bar",
           "--repository-url", f"{base_url}/legacy/", "-u", "__token__", "-p", ADMIN_TOKEN, *map(str, files)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"twine upload failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


# ------------------------------------------------------------------------------------------------
# search over 10,000 environments


def seed_environments(database_url: str, count: int) -> None:
    """Insert ``count`` public environments (with a release each) straight through the hub's models."""
    import datetime as dt

    from sqlalchemy import select

    from hub import models
    from hub.db import Database, run_migrations
    from hub.search import update_search_index

    db = Database(database_url)
    run_migrations(db.engine)
    rng = random.Random(1234)
    now = dt.datetime(2026, 1, 1)
    with db.session() as s:
        owners = []
        for k in range(50):
            o = models.Owner(name=f"owner{k}", display_name=f"Owner {k}", kind="user")
            s.add(o)
            owners.append(o)
        s.flush()
        owner_ids = [o.id for o in owners]
    batch = 1000
    for start in range(0, count, batch):
        with db.session() as s:
            envs = []
            for i in range(start, min(count, start + batch)):
                tags = rng.sample(WORDS, 3)
                desc = " ".join(rng.sample(WORDS, 8))
                envs.append(models.Environment(
                    owner_id=owner_ids[i % len(owner_ids)], name=f"env-{i:05d}-{tags[0]}",
                    display_name=f"env-{i:05d}-{tags[0]}", private=(i % 20 == 0),
                    description=f"Environment {i}: {desc}", tags=" ".join(tags), latest_version="1.0.0",
                    downloads=rng.randrange(100_000), stars=rng.randrange(500),
                    created_at=now - dt.timedelta(minutes=i), updated_at=now - dt.timedelta(minutes=i // 2),
                ))
            s.add_all(envs)
            s.flush()
            for env in envs:
                update_search_index(s, env)  # the FTS table on SQLite; PostgreSQL indexes the row
                for tag in env.tags.split():
                    s.add(models.EnvTag(env_id=env.id, tag=tag))
                s.add(models.Version(
                    env_id=env.id, version="1.0.0", canonical_version="1", summary=env.description,
                    tags=json.dumps(env.tags.split()), readme=f"# {env.name}\n\n{env.description}\n",
                ))
    with db.session() as s:
        seeded = s.scalar(select(models.Environment.id).order_by(models.Environment.id.desc()).limit(1))
        if not seeded:
            raise RuntimeError("seeding inserted nothing")
    db.dispose()


QUERY_KINDS = ("one word", "two words + sort", "tag + sort + page", "owner + sort", "sort + deep page")


def search_queries(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """A mix users send: free text (common and rare words), tag and owner filters, each sort, pages."""
    out: list[tuple[str, str]] = []
    sorts = ["downloads", "stars", "updated", "name"]
    for k in range(n):
        kind = k % 5
        if kind == 0:
            params = f"q={rng.choice(WORDS)}"
        elif kind == 1:
            params = f"q={rng.choice(WORDS)}+{rng.choice(WORDS)}&sort={rng.choice(sorts)}"
        elif kind == 2:
            params = f"tag={rng.choice(WORDS)}&sort={rng.choice(sorts)}&page={rng.randint(1, 5)}"
        elif kind == 3:
            params = f"owner=owner{rng.randrange(50)}&sort={rng.choice(sorts)}"
        else:
            params = f"sort={rng.choice(sorts)}&page={rng.randint(1, 50)}"
        out.append((QUERY_KINDS[kind], f"/api/v1/environments?{params}"))
    return out


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[max(0, int(len(xs) * 0.95) - 1)]


def measure_search(base_url: str, n: int) -> dict[str, Any]:
    """Sequential requests over keep-alive (client-side latency, so HTTP and JSON are included)."""
    import httpx

    queries = search_queries(random.Random(7), n)
    lat: list[float] = []
    by_kind: dict[str, list[float]] = {}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for _kind, q in queries[:20]:  # warm-up, not counted
            client.get(q).raise_for_status()
        for kind, q in queries:
            t0 = time.perf_counter()
            r = client.get(q)
            ms = (time.perf_counter() - t0) * 1000
            r.raise_for_status()
            lat.append(ms)
            by_kind.setdefault(kind, []).append(ms)
        total = client.get("/api/v1/environments?per_page=1").json()
    lat.sort()
    return {
        "requests": len(lat),
        "p50_ms": lat[len(lat) // 2],
        "p95_ms": _p95(lat),
        "max_ms": lat[-1],
        "p95_by_kind_ms": {k: round(_p95(v), 1) for k, v in by_kind.items()},
        "total_visible": _total(total),
    }


def _total(body: Any) -> int:
    if isinstance(body, dict):
        for key in ("total", "count", "total_count"):
            if key in body:
                return int(body[key])
    return -1


# ------------------------------------------------------------------------------------------------
# main


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, metric: str, ours: str, peer: str, ratio: str) -> None:
        self.rows.append((metric, ours, peer, ratio))
        print(f"  {metric}: ours {ours} | peer {peer} | {ratio}", flush=True)

    def table(self) -> str:
        head = ("metric", "hub (ours)", "pypiserver / target", "ratio")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(4)]
        line = "  ".join("-" * w for w in widths)
        fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
        return "\n".join([fmt.format(*head), line, *(fmt.format(*r) for r in self.rows)])


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        yield server
    finally:
        server.stop()


def bench_index_and_install(args: argparse.Namespace, work: Path, report: Report) -> None:
    print(f"==> building {args.packages} environments x {len(args.versions)} releases (wheel + sdist)", flush=True)
    t0 = time.perf_counter()
    built = build_packages(work / "build", args.packages, args.versions)
    files = [p for b in built for p in (b.wheel, b.sdist)]
    pkg_dir = work / "pypiserver-packages"
    pkg_dir.mkdir()
    for f in files:
        shutil.copy2(f, pkg_dir / f.name)
    print(f"    {len(files)} files in {time.perf_counter() - t0:.1f}s", flush=True)
    names = sorted({b.normalized for b in built})
    project_paths = [f"/simple/{n}/" for n in names]

    hub_data = work / "hub-data"
    hub_data.mkdir()
    # Publish once into a data dir; every hub configuration serves the same database and files.
    print("==> publishing to the hub with twine (legacy upload API)", flush=True)
    with running(start_hub("hub-upload", hub_data, work, 1)) as hub:
        t0 = time.perf_counter()
        upload_to_hub(hub.base_url, files)
        report.data["hub_publish_s"] = time.perf_counter() - t0
        print(f"    {len(files)} files published in {report.data['hub_publish_s']:.1f}s", flush=True)

    # All servers run side by side and are measured in interleaved rounds, so that load from anything
    # else on the machine falls on both sides alike; the median round is reported.
    w = args.workers
    servers: dict[str, Server] = {}
    with contextlib.ExitStack() as stack:
        servers["hub-1w"] = stack.enter_context(running(start_hub("hub-1w", hub_data, work, 1)))
        servers["pypiserver"] = stack.enter_context(running(start_pypiserver(pkg_dir, work, None)))
        if w > 1:
            servers[f"hub-{w}w"] = stack.enter_context(running(start_hub(f"hub-{w}w", hub_data, work, w)))
            servers[f"pypiserver-gunicorn-{w}w"] = stack.enter_context(
                running(start_pypiserver(pkg_dir, work, w)))
        rounds: dict[str, list[LoadResult]] = {}
        # What `vf install` and private pips send: the token as the Basic password on every request.
        auth = {"Authorization": "Basic " + base64.b64encode(f"__token__:{ADMIN_TOKEN}".encode()).decode()}
        for r in range(args.rounds):
            for label, server in servers.items():
                # pypiserver runs without authentication (``-a .``): it is sent the same header and
                # ignores it, so "authenticated" compares our checked token with its unchecked one.
                health = "/healthz" if label.startswith("hub") else "/health"
                pages: list[tuple[str, list[str], dict[str, str] | None]] = [
                    ("project", project_paths, None), ("project-auth", project_paths, auth),
                    ("root", ["/simple/"], None), ("root-auth", ["/simple/"], auth), ("health", [health], None)]
                for page, paths, headers in pages:
                    res = measure_index(server.base_url, paths, args, work, headers)
                    rounds.setdefault(f"{label} {page}", []).append(res)
                    print(f"    round {r + 1} {label:>24} {page:>7}: {res.requests_per_s:8.0f} req/s "
                          f"(p50 {res.p50_ms or 0:.1f} ms, errors {res.errors})", flush=True)
        installs: dict[str, dict[str, list[float]]] = {"hub-1w": {"pip": [], "uv": []},
                                                       "pypiserver": {"pip": [], "uv": []}}
        for _k in range(0 if args.skip_install else args.install_runs):
            for tool in ("pip", "uv"):
                for label in installs:
                    installs[label][tool] += time_install(
                        tool, servers[label].base_url + "/simple/", "benchenv-000", work, 1)
        for label in installs:
            for tool in ("pip", "uv"):
                print(f"    {label} {tool} install: {', '.join(f'{t:.2f}' for t in installs[label][tool])} s",
                      flush=True)

    def rps(key: str) -> float:
        return statistics.median(x.requests_per_s for x in rounds[key])

    errors = sum(x.errors for xs in rounds.values() for x in xs)
    pairs = [("hub-1w", "pypiserver")]
    if w > 1:
        pairs += [(f"hub-{w}w", "pypiserver"), (f"hub-{w}w", f"pypiserver-gunicorn-{w}w")]
    for page, what in (("project", "project page"), ("project-auth", "project page, authenticated"),
                       ("root", "/simple/"), ("root-auth", "/simple/, authenticated"),
                       ("health", "health check")):
        for ours, peer in pairs:
            a, b = rps(f"{ours} {page}"), rps(f"{peer} {page}")
            # The goal (issue 22): index pages at least 3x pypiserver's, anonymous and authenticated.
            goal = "" if page == "health" else (" ok" if a >= 3 * b else " (goal 3x MISSED)")
            report.add(f"{what} req/s, {ours} vs {peer}", f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}x{goal}")
    for page, what in (("project", "project page"), ("root", "/simple/")):
        for ours in dict.fromkeys(("hub-1w", f"hub-{w}w")):
            a, b = rps(f"{ours} {page}-auth"), rps(f"{ours} {page}")
            report.add(f"{what} req/s, {ours} authenticated vs anonymous", f"{a:,.0f}", f"{b:,.0f}",
                       f"{a / b:.2f}x")
    for tool in ("pip", "uv") if not args.skip_install else ():
        ours_t = statistics.median(installs["hub-1w"][tool])
        peer_t = statistics.median(installs["pypiserver"][tool])
        report.add(f"{tool} install of 1 env + 3 deps, median of {args.install_runs} (s)", f"{ours_t:.2f}",
                   f"{peer_t:.2f}", f"{peer_t / ours_t:.2f}x faster" if ours_t <= peer_t
                   else f"{ours_t / peer_t:.2f}x slower")
    report.data["index_rounds"] = {k: [vars(x) for x in v] for k, v in rounds.items()}
    report.data["index_errors"] = errors
    report.data["installs"] = installs
    if errors:
        print(f"WARNING: {errors} failed requests during index load", flush=True)


def bench_search_and_memory(args: argparse.Namespace, work: Path, report: Report) -> None:
    n = args.search_envs
    backends: list[tuple[str, str | None]] = [("sqlite", None)]
    pg = None
    if not args.no_postgres:
        pg = start_postgres()
        backends.append(("postgresql", pg.create_database("vf_bench")))
    try:
        for backend, url in backends:
            data = work / f"search-{backend}"
            data.mkdir()
            db_url = url or f"sqlite:///{data / 'hub.db'}"
            print(f"==> seeding {n:,} environments on {backend}", flush=True)
            t0 = time.perf_counter()
            seed_environments(db_url, n)
            print(f"    seeded in {time.perf_counter() - t0:.1f}s", flush=True)
            with running(start_hub(f"hub-search-{backend}", data, work, 1, db_url)) as hub:
                res = measure_search(hub.base_url, args.search_requests)
                report.add(f"search p95 over {n:,} envs, {backend} (ms)", f"{res['p95_ms']:.1f}",
                           "target < 50", "ok" if res["p95_ms"] < 50 else "MISSED")
                report.data[f"search_{backend}"] = res
                print(f"    p50 {res['p50_ms']:.1f} ms p95 {res['p95_ms']:.1f} ms max {res['max_ms']:.1f} ms; "
                      f"visible {res['total_visible']}; p95 by kind {res['p95_by_kind_ms']}", flush=True)
                if backend == "sqlite":
                    measure_memory(hub, args, work, report)
    finally:
        if pg is not None:
            pg.stop()


def measure_memory(hub: Server, args: argparse.Namespace, work: Path, report: Report) -> None:
    import httpx

    pid = hub.worker_pids()[0]
    with httpx.Client(base_url=hub.base_url, timeout=60) as client:
        for path in ("/simple/", "/", "/api/v1/environments?per_page=100"):
            client.get(path).raise_for_status()
    mem = rss_kib(pid)
    report.add(f"hub worker RSS with {args.search_envs:,} envs (MB)", f"{mem['VmRSS'] / 1024:.0f}", "target < 300",
               "ok" if mem["VmRSS"] / 1024 < 300 else "MISSED")
    report.data["worker_rss_kib"] = mem

    # A 100 MB upload: peak RSS must stay far below the archive size (the body is streamed to disk).
    size = args.upload_mb * 1024 * 1024
    big = build_env_package(work / "big", "bench-big-upload", "1.0.0", payload_bytes=os.urandom(size))
    baseline = rss_kib(pid)["VmRSS"]
    reset_peak_rss(pid)
    t0 = time.perf_counter()
    upload_to_hub(hub.base_url, [big.wheel])
    elapsed = time.perf_counter() - t0
    peak = rss_kib(pid)["VmHWM"]
    wheel_mb = big.wheel.stat().st_size / 1024 / 1024
    report.add(f"peak RSS receiving a {wheel_mb:.0f} MB upload (MB, growth over idle)",
               f"{peak / 1024:.0f} (+{(peak - baseline) / 1024:.0f})", f"archive {wheel_mb:.0f}",
               "streamed" if (peak - baseline) / 1024 < wheel_mb / 2 else "NOT streamed")
    report.data["upload"] = {"wheel_mb": wheel_mb, "baseline_kib": baseline, "peak_kib": peak, "seconds": elapsed}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packages", type=int, default=50)
    ap.add_argument("--versions", nargs="+", default=["0.1.0", "0.2.0", "0.3.0"])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of load per index measurement")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="uvicorn/gunicorn workers for the multi-worker rows")
    ap.add_argument("--install-runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved load rounds per server and page")
    ap.add_argument("--search-envs", type=int, default=10_000)
    ap.add_argument("--search-requests", type=int, default=500)
    ap.add_argument("--upload-mb", type=int, default=100)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-wrk", action="store_true", help="use the aiohttp load loop even if wrk is present")
    ap.add_argument("--skip-index", action="store_true")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--skip-install", action="store_true", help="no pip/uv install timings")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args(argv)
    if args.quick:
        args.packages, args.duration, args.install_runs, args.rounds = 8, 2.0, 1, 1
        args.search_envs, args.search_requests, args.upload_mb = 1000, 100, 20

    report = Report()
    work = Path(tempfile.mkdtemp(prefix="vf-bench-hub-"))
    print(f"benchmarks/hub.py on {os.cpu_count()} CPUs, work dir {work}", flush=True)
    try:
        if not args.skip_index:
            bench_index_and_install(args, work, report)
        if not args.skip_search:
            bench_search_and_memory(args, work, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(report.table())
    if args.json:
        args.json.write_text(json.dumps({"rows": report.rows, **report.data}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
