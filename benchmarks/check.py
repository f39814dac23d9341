"""Verified environments: time from a push to the hub's verdict, and verdicts per minute.

A real hub (``python -m hub serve``), real check workers (``python -m hub worker``), the bubblewrap
sandbox, and a small environment package (a ``vf.SingleTurnEnv`` over two rows):

* **push -> verdict**: one worker idle and polling; each round uploads a new version (wheel + sdist
  over the API, what ``vf push`` does after building) and waits for ``passed``. Reported: median and
  max over the rounds (the target on a 2-core machine with a warm pip cache is under 20 s).
* **throughput**: ``--jobs`` versions queued at once, two workers; verdicts per minute from the first
  claim to the last verdict.

    python benchmarks/check.py [--rounds 3] [--jobs 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hub.core import Hub as HubCore  # noqa: E402
from hub.testing import make_settings, run_hub  # noqa: E402
from tests.hub.test_checks import GOOD, write_env  # noqa: E402
from tests.support.envpkg import build_project  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(root: Path, name: str, version: str) -> list[tuple[str, tuple[str, bytes, str]]]:
    project = write_env(root / f"src-{version}", name, version, GOOD)
    wheel, sdist = build_project(project, root / "dist")
    return [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (wheel, sdist)]


def newest(client: httpx.Client, name: str, version: str) -> dict:
    r = client.get(f"/api/v1/environments/admin/{name}/versions/{version}/checks")
    r.raise_for_status()
    runs = r.json()
    return runs[0] if runs else {}


def wait_final(client: httpx.Client, name: str, version: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = newest(client, name, version)
        if run.get("status") in ("passed", "failed", "error"):
            return run
        time.sleep(0.1)
    raise RuntimeError(f"no verdict for {name} {version}")


def start_worker(url: str, token: str, name: str, root: Path) -> subprocess.Popen[bytes]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("VF_HUB")}
    env["VF_HUB_WORKER_TOKEN"] = token
    with open(root / f"{name}.log", "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "hub", "worker", "--hub", url, "--name", name, "--poll-interval", "0.2"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="vf-bench-check-") as tmp:
        root = Path(tmp)
        hub = run_hub(root / "data")
        core = HubCore(make_settings(root / "data"))
        user, _ = core.accounts.create_user("bench-worker")
        token, _t = core.accounts.create_token(user.id, scope="worker")
        core.close()
        workers: list[subprocess.Popen[bytes]] = []
        try:
            with hub.client(hub.admin_token) as c:
                # push -> verdict, one idle worker
                workers.append(start_worker(hub.url, token, "w1", root))
                latencies = []
                for i in range(args.rounds + 1):  # round 0 warms the worker (mirrors, imports)
                    files = build(root, "bench-latency", f"0.{i}.0")
                    t0 = time.perf_counter()
                    r = c.post("/api/v1/environments/admin/bench-latency/versions", files=files)
                    r.raise_for_status()
                    run = wait_final(c, "bench-latency", f"0.{i}.0")
                    dt = time.perf_counter() - t0
                    log(
                        f"round {i}: {run['status']} in {dt:.1f} s (in the sandbox {run['report'].get('duration_s')} s)"
                    )
                    if i:
                        latencies.append(dt)
                # throughput: queue all, then two workers
                for w in workers:
                    w.terminate()
                    w.wait(timeout=30)
                workers.clear()
                names = [f"bench-tp-{i}" for i in range(args.jobs)]
                for name in names:
                    c.post(
                        f"/api/v1/environments/admin/{name}/versions", files=build(root, name, "1.0.0")
                    ).raise_for_status()
                t0 = time.perf_counter()
                for k in range(args.workers):
                    workers.append(start_worker(hub.url, token, f"tp{k}", root))
                runs = [wait_final(c, name, "1.0.0") for name in names]
                elapsed = time.perf_counter() - t0
        finally:
            for w in workers:
                w.terminate()
                w.wait(timeout=30)
            hub.stop()
    ok = sum(r["status"] == "passed" for r in runs)
    print("\nverified environments (bubblewrap sandbox, fresh venv per check)")
    print(
        f"  push -> verdict, one idle worker: median {statistics.median(latencies):.1f} s, "
        f"max {max(latencies):.1f} s over {len(latencies)} rounds"
    )
    print(
        f"  throughput, {args.workers} workers, {args.jobs} queued versions: "
        f"{args.jobs / elapsed * 60:.1f} verdicts/minute ({ok}/{args.jobs} passed, {elapsed:.1f} s, "
        f"workers started after queueing)"
    )


if __name__ == "__main__":
    main()
