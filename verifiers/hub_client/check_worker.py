"""The check worker (``vf hub worker --hub URL``): runs the hub's verified-environment checks.

It talks to the hub only over HTTP (``/api/v1/check-jobs/...``, see ``hub/api/checks.py``): claim a
job, heartbeat its lease while it runs, report the verdict. For each job it

1. downloads the version's wheel, and the wheels of its hub dependencies (the same owner's
   environments, resolved by the hub by the rule ``vf install`` follows), from the hub's job API,
   and checks each sha256 against the hub's record. The host never parses, builds or installs them;
2. in the sandbox (bubblewrap by default; CPU / memory / process / disk / wall-clock limits), in one
   work dir, runs two phases:

   * **setup**: creates a fresh virtual environment and has pip install those wheels, resolving
     every other dependency from the public index (``--index-url``, PyPI by default): wheels where
     there are, else a dependency's sdist built there (its build runs in the sandbox like the check).
     This phase's only network is an allow-listed proxy (:mod:`verifiers.sandbox.egress`) to that
     index's hosts; the hub, the host's loopback and everything else stay out of reach. pip runs
     ``--isolated`` with no cache (nothing carries over from one job to the next);
   * **check**: no network at all; runs :func:`verifiers.check.check_environment` on the installed
     environment (a v1 package gets :mod:`verifiers.v1.check`, with the same verdict schema). ``verifiers`` itself is the worker's own installation, mounted read-only (the
     ``verifiers`` on PyPI is another library: a stub record in the venv says it is installed);
3. reports ``passed`` or ``failed`` (with the first failed check as the reason, the log tail and a
   report: load arguments, rollouts, scripted replies, rewards, duration, versions), or ``error``
   when the checker itself could not run (the hub retries those). The verdict comes out of the
   sandbox and is treated as hostile: one tagged line, bounded, read against a strict schema.

Nothing of the worker's host reaches a report or a log tail: no host name, paths or pip output of
the host. The worker's own process starts from an allow-listed environment (`clean_environment`).

A worker killed mid-job simply stops heartbeating; the hub gives the job to another worker once the
lease runs out. When the hub answers a heartbeat with 409 (the lease was lost) the run is cancelled,
which kills everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["CheckWorker", "WorkerConfig", "clean_environment", "parse_verdict", "run_worker", "verifiers_binds"]

log = logging.getLogger("verifiers.check_worker")

_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,200}\.whl\Z")
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
_VERDICT = "VF-CHECK-VERDICT"
MAX_WHEEL_BYTES = 150 * 1024 * 1024
MAX_HUB_DEPENDENCIES = 64
MAX_VERDICT_BYTES = 1024 * 1024
PYPI = "https://pypi.org/simple/"
PYPI_FILES = ("files.pythonhosted.org", 443)
_RELAY_PORT = 3128

#: What the worker process keeps of the environment it was started with: nothing else (no tokens,
#: database URLs or cloud keys of whoever started it, no PIP_* / UV_* / proxy settings) unless an
#: operator names it (``vf hub worker --keep-env NAME``).
ENV_ALLOW = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "VF_SANDBOX_BACKEND",
    "VF_SANDBOX_DIR", "VF_HUB_URL",
    # where the host's CA certificates are (paths, no secrets): a TLS-inspecting proxy's CA is there
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
)  # fmt: skip
#: Always set for the worker: pip's configuration files are never read.
ENV_FORCED = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}


def clean_environment(environ: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """The worker's environment: the allow-listed variables of ``environ`` (and ``keep``), plus
    `ENV_FORCED`."""
    names = set(ENV_ALLOW) | set(keep)
    out = {k: v for k, v in environ.items() if k in names}
    out.update(ENV_FORCED)
    return out


# Runs inside the sandbox with the fresh venv's interpreter. Whatever the environment prints goes to
# stderr (the log); the verdict is the last stdout line, tagged with a per-run random tag.
_DRIVER = r"""
import contextlib, importlib.metadata, json, platform, sys, time
spec, tag, n, r, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
start = time.monotonic()
with contextlib.redirect_stdout(sys.stderr):
    from verifiers.check import check_environment
    report = check_environment(spec, num_examples=n, rollouts_per_example=r, timeout_per_rollout=per)
out = report.to_dict()
out["duration_s"] = round(time.monotonic() - start, 3)
out["python_version"] = platform.python_version()
try:
    out["verifiers_version"] = importlib.metadata.version("verifiers")
except Exception:
    out["verifiers_version"] = None
sys.stdout.write("\n" + tag + " " + json.dumps(out, default=str) + "\n")
sys.stdout.flush()
"""

# Refuses direct references (name @ URL / path) in the wheels' metadata, inside the sandbox: the hub
# refuses them at upload, but a version stored before it did must fail, not fetch.
_DIRECT_REFS = r"""
import email.parser, sys, zipfile
from pip._vendor.packaging.requirements import Requirement
bad = []
for path in sys.argv[1:]:
    with zipfile.ZipFile(path) as zf:
        for n in zf.namelist():
            if n.count("/") == 1 and n.endswith(".dist-info/METADATA"):
                msg = email.parser.Parser().parsestr(zf.read(n).decode("utf-8", "replace"), headersonly=True)
                for raw in msg.get_all("Requires-Dist") or []:
                    try:
                        if Requirement(raw).url:
                            bad.append(raw)
                    except Exception:
                        bad.append(raw)
if bad:
    print("VF-CHECK-DIRECT-REFERENCE " + "; ".join(b[:200] for b in bad[:3]), file=sys.stderr)
    sys.exit(4)
"""

_SETUP = r"""
set -e
cd /workspace
# pip downloads and unpacks (a 55 MB pyarrow wheel) in the work dir, capped by disk_mb; the
# sandbox's own /tmp is a small tmpfs
mkdir -p /workspace/.tmp && export TMPDIR=/workspace/.tmp
echo "== checking the wheels' metadata" >&2
"$VF_CHECK_PYTHON" -I direct_refs.py wheels/*.whl
echo "== creating a fresh virtual environment" >&2
"$VF_CHECK_PYTHON" -m venv --without-pip /workspace/venv >&2
site=$(/workspace/venv/bin/python -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The worker's own verifiers is mounted; this record tells pip it is installed (PyPI's is another library).
mkdir -p "$site/verifiers-$VF_CHECK_VERIFIERS.dist-info"
printf 'Metadata-Version: 2.1\nName: verifiers\nVersion: %s\n' "$VF_CHECK_VERIFIERS" > "$site/verifiers-$VF_CHECK_VERIFIERS.dist-info/METADATA"
: > "$site/verifiers-$VF_CHECK_VERIFIERS.dist-info/RECORD"
echo "verifiers==$VF_CHECK_VERIFIERS" > constraints.txt
"$VF_CHECK_PYTHON" -I relay.py /workspace/.egress.sock $VF_CHECK_RELAY_PORT > relay.log 2>&1 &
for _ in $(seq 100); do grep -q ready relay.log 2>/dev/null && break; sleep 0.05; done
echo "== installing $(cd wheels && ls | tr '\n' ' ')with their dependencies" >&2
cert=""
unset SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT
# the host's CA store, for pip and for the pip that installs an sdist's build requirements
if [ -f ca.pem ]; then cert="--cert /workspace/ca.pem"; export SSL_CERT_FILE=/workspace/ca.pem PIP_CERT=/workspace/ca.pem; fi
# ... and the relay, which that inner pip does not get from our --proxy
export PIP_PROXY="http://127.0.0.1:$VF_CHECK_RELAY_PORT" HTTPS_PROXY="http://127.0.0.1:$VF_CHECK_RELAY_PORT" HTTP_PROXY="http://127.0.0.1:$VF_CHECK_RELAY_PORT"
if ! "$VF_CHECK_PYTHON" -m pip --python /workspace/venv/bin/python install --isolated --no-input      --disable-pip-version-check --no-cache-dir --no-compile --prefer-binary --progress-bar off      --index-url "$VF_CHECK_INDEX_URL" --proxy "http://127.0.0.1:$VF_CHECK_RELAY_PORT" $cert      -c constraints.txt wheels/*.whl >&2; then
  echo "VF-CHECK-INSTALL-FAILED" >&2; exit 3
fi
"""

_SCRIPT = r"""
echo "== running the checker" >&2
exec /workspace/venv/bin/python -I -c "import sys; sys.path[:0] = ['/opt/python/site-packages']; exec(open('/workspace/driver.py').read())" "$@"
"""


@dataclass
class WorkerConfig:
    hub_url: str
    token: str
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    #: The public index the environments' other dependencies come from (PyPI when None).
    index_url: str | None = None
    #: More ``host:port`` the setup phase may reach (e.g. the index's file host when it differs).
    allow_hosts: tuple[str, ...] = ()
    backend: str | None = None  # sandbox backend; VF_SANDBOX_BACKEND / bwrap by default
    #: The interpreter the fresh venv is made from: under /usr (the sandbox sees the host's /usr), with
    #: the venv and pip modules, and the same major.minor as this worker's Python (its verifiers is mounted).
    python: str = "/usr/bin/python3"
    timeout_s: float = 300.0  # wall clock of the sandboxed check
    memory_mb: int = 4096
    processes: int = 256
    disk_mb: int = 4096  # a venv with datasets, pyarrow, pandas and a model stack passes 1 GiB
    num_examples: int = 2
    rollouts_per_example: int = 2
    timeout_per_rollout: float = 60.0
    poll_interval: float = 2.0
    download_timeout_s: float = 300.0  # wall clock of the sandboxed setup (dependency installation)


def verifiers_binds() -> dict[str, str]:
    """Read-only mounts that make this worker's own ``verifiers`` (with its requirements, and their
    distribution metadata) importable in the sandbox under ``/opt/python/site-packages``."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from verifiers.sandbox.packages import PACKAGES_DIR

    binds: dict[str, str] = {}
    seen: set[str] = set()
    todo = ["verifiers"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        base = Path(str(dist.locate_file("")))
        tops: set[str] = set()
        for f in dist.files or []:
            parts = Path(str(f)).parts
            if not parts or parts[0] in ("..", "__pycache__") or parts[0].startswith("__editable__"):
                continue
            if len(parts) == 1 and parts[0].endswith(".pth"):
                continue
            tops.add(parts[0])
        for top in tops:
            path = base / top
            if path.exists():
                binds[str(path)] = f"{PACKAGES_DIR}/{top}"
        for raw in dist.requires or []:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    spec = importlib.util.find_spec("verifiers")
    assert spec is not None and spec.submodule_search_locations
    binds[str(Path(next(iter(spec.submodule_search_locations))))] = f"{PACKAGES_DIR}/verifiers"
    return binds


class CheckerError(Exception):
    """The checker itself failed (not the environment): reported as ``error`` and retried."""


class EnvironmentFailure(Exception):
    """The environment's fault before the sandboxed run (e.g. dependencies with no wheels)."""


class LeaseLost(Exception):
    pass


class CheckWorker:
    """Claims check jobs from one hub and runs them one at a time."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.http = httpx.Client(
            base_url=config.hub_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {config.token}",
                "User-Agent": f"vf-check-worker/{config.name}",
            },
            timeout=httpx.Timeout(30.0, read=config.download_timeout_s),
        )
        self._binds: dict[str, str] | None = None
        self.jobs_done = 0

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------------------------ the loop
    def run(self, *, max_jobs: int | None = None, stop: Any = None) -> None:
        """Claim and run jobs until ``max_jobs`` ran or ``stop`` (a threading.Event) is set."""
        backoff = self.config.poll_interval
        while (max_jobs is None or self.jobs_done < max_jobs) and not (stop is not None and stop.is_set()):
            try:
                ran = self.run_one()
                backoff = self.config.poll_interval
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                log.warning("the hub did not answer well (%s); retrying in %.0f s", exc, backoff)
                ran = False
                backoff = min(backoff * 2, 60.0)
            if not ran:
                if stop is not None:
                    stop.wait(backoff)
                else:
                    time.sleep(backoff)

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        resp = self.http.post(path, json=body)
        if resp.status_code in (401, 403):
            raise SystemExit(f"the hub refused this worker's token ({resp.status_code}): {resp.text[:200]}")
        return resp

    def run_one(self) -> bool:
        """Claim one job and run it to a verdict; False when the queue was empty."""
        resp = self._post("/api/v1/check-jobs/claim", {"worker": self.config.name})
        resp.raise_for_status()
        job = resp.json().get("job")
        if not job:
            return False
        log.info("check %s: %s %s (attempt %s)", job["id"], job["env"], job["version"], job["attempt"])
        try:
            status, reason, log_tail, report = asyncio.run(self._run_job(job))
        except LeaseLost:
            log.warning("check %s: the lease was lost; the job went to another worker", job["id"])
            self.jobs_done += 1
            return True
        answer = self._post(
            f"/api/v1/check-jobs/{int(job['id'])}/report",
            {
                "lease_token": job["lease_token"],
                "status": status,
                "reason": reason,
                "log_tail": log_tail,
                "report": report,
            },
        )
        if answer.status_code == 409:
            log.warning("check %s: the verdict came after the lease was lost; discarded", job["id"])
        else:
            answer.raise_for_status()
            log.info("check %s: %s %s", job["id"], status, reason)
        self.jobs_done += 1
        return True

    async def _heartbeat(self, job: dict[str, Any], lost: asyncio.Event) -> None:
        interval = max(0.5, float(job.get("lease_seconds") or 60) / 4)
        async with httpx.AsyncClient(
            base_url=str(self.http.base_url), headers=dict(self.http.headers), timeout=30.0
        ) as client:
            while True:
                await asyncio.sleep(interval)
                try:
                    resp = await client.post(
                        f"/api/v1/check-jobs/{int(job['id'])}/heartbeat",
                        json={"lease_token": job["lease_token"]},
                    )
                except httpx.TransportError as exc:
                    log.warning("heartbeat failed (%s); retrying", exc)
                    continue
                if resp.status_code == 409:
                    lost.set()
                    return

    async def _run_job(self, job: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        lost = asyncio.Event()
        beat = asyncio.create_task(self._heartbeat(job, lost))
        work = asyncio.create_task(self._check(job))
        waiter = asyncio.create_task(lost.wait())
        try:
            done, _ = await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if work not in done:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
                raise LeaseLost()
            return work.result()
        finally:
            for t in (beat, waiter):
                t.cancel()
            await asyncio.gather(beat, waiter, return_exceptions=True)

    # ---------------------------------------------------------------------------- one check
    async def _check(self, job: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        cfg = self.config
        report: dict[str, Any] = {
            "env_args": {},
            "num_examples": cfg.num_examples,
            "rollouts_per_example": cfg.rollouts_per_example,
            "wheel": job["wheel"]["filename"],
            "wheel_sha256": job["wheel"]["sha256"],
        }
        try:
            if job.get("unresolvable"):
                raise EnvironmentFailure(f"its hub dependencies cannot be resolved: {str(job['unresolvable'])[:500]}")
            files = await asyncio.to_thread(self._download_files, job)
            report["hub_dependencies"] = [
                {"env": str(d.get("env"))[:200], "version": str(d.get("version"))[:64], "sha256": d["sha256"]}
                for d in job.get("hub_dependencies") or []
            ]
            return await self._sandboxed(job, files, report)
        except EnvironmentFailure as exc:
            return "failed", str(exc), str(exc), report
        except CheckerError as exc:
            return "error", str(exc), str(exc), report
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an unexpected state of this machine: the checker's fault
            # The traceback (host paths) goes to this worker's log, never into the hub's record.
            log.exception("check %s: the checker failed", job.get("id"))
            why = f"the checker failed ({type(exc).__name__}); see the worker's log"
            return "error", why, why, report

    def _download_files(self, job: dict[str, Any]) -> dict[str, bytes]:
        """The job's wheel and its hub dependencies' wheels, each checked against the hub's sha256."""
        deps = job.get("hub_dependencies") or []
        if not isinstance(deps, list) or len(deps) > MAX_HUB_DEPENDENCIES:
            raise CheckerError("the hub sent an unusable list of hub dependencies")
        out: dict[str, bytes] = {}
        for info in [job["wheel"], *deps]:
            name = str(info.get("filename", ""))
            sha = str(info.get("sha256", ""))
            if not _WHEEL_NAME.match(name) or not _SHA256.match(sha) or name in out:
                raise CheckerError(f"the hub sent an unusable wheel name or hash {name[:80]!r}")
            out[name] = self._download(job, f"/api/v1/check-jobs/{int(job['id'])}/files/{sha}", sha)
        return out

    def _download(self, job: dict[str, Any], path: str, sha256: str) -> bytes:
        buf = bytearray()
        with self.http.stream("GET", path, headers={"X-VF-Lease": job["lease_token"]}) as resp:
            if resp.status_code != 200:
                raise CheckerError(f"downloading a file of the job failed: HTTP {resp.status_code}")
            for chunk in resp.iter_bytes():
                buf += chunk
                if len(buf) > MAX_WHEEL_BYTES:
                    raise CheckerError("a wheel is larger than the worker accepts")
        digest = hashlib.sha256(buf).hexdigest()
        if digest != sha256:
            raise CheckerError(f"a wheel's sha256 {digest} differs from the hub's record {sha256}")
        return bytes(buf)

    def allowed_hosts(self) -> set[tuple[str, int]]:
        """Where the setup phase may connect: the public index (and PyPI's file host with PyPI)."""
        from verifiers.sandbox.egress import hosts_of

        index = self.config.index_url or PYPI
        hosts = hosts_of([index])
        if hosts == {("pypi.org", 443)}:
            hosts.add(PYPI_FILES)
        for extra in self.config.allow_hosts:
            host, _, port = extra.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"--allow-host takes HOST:PORT, not {extra!r}")
            hosts.add((host.lower(), int(port)))
        return hosts

    async def _sandboxed(
        self, job: dict[str, Any], wheels: dict[str, bytes], report: dict[str, Any]
    ) -> tuple[str, str, str, dict[str, Any]]:
        from verifiers.sandbox import Sandbox
        from verifiers.sandbox.egress import RELAY, EgressProxy
        from verifiers.sandbox.types import SandboxError

        cfg = self.config
        if self._binds is None:
            self._binds = await asyncio.to_thread(verifiers_binds)
        tag = f"{_VERDICT}-{secrets.token_hex(16)}"
        files: dict[str, str | bytes] = {f"wheels/{name}": data for name, data in wheels.items()}
        files.update({"driver.py": _DRIVER, "setup.sh": _SETUP, "run.sh": _SCRIPT, "relay.py": RELAY,
                      "direct_refs.py": _DIRECT_REFS})  # fmt: skip
        ca = _ca_bundle()
        if ca is not None:
            files["ca.pem"] = ca
        spec = f"{job['owner']}/{job['name']}"
        limits = {
            "memory_mb": cfg.memory_mb,
            "processes": cfg.processes,
            "disk_mb": cfg.disk_mb,
            "output_bytes": 4 * 1024 * 1024,
            "file_size_mb": 256,
        }
        report["limits"] = {
            "wall_clock_s": cfg.timeout_s,
            "memory_mb": cfg.memory_mb,
            "processes": cfg.processes,
            "disk_mb": cfg.disk_mb,
        }
        try:
            sandbox = Sandbox(
                cfg.backend,
                timeout=cfg.timeout_s,
                limits=limits,
                ro_binds=self._binds,
                env={
                    "HOME": "/workspace",
                    "PIP_CONFIG_FILE": "/dev/null",
                    "PIP_NO_CACHE_DIR": "1",
                    "PIP_NO_INPUT": "1",
                    "VF_CHECK_PYTHON": cfg.python,
                    "VF_CHECK_INDEX_URL": cfg.index_url or PYPI,
                    "VF_CHECK_RELAY_PORT": str(_RELAY_PORT),
                    "VF_CHECK_VERIFIERS": importlib.metadata.version("verifiers"),
                },
                python=cfg.python,
            )
            report["sandbox"] = sandbox.backend_name
            async with sandbox.session(files=files) as session:
                proxy = EgressProxy(session.workdir / ".egress.sock", self.allowed_hosts())
                async with proxy:
                    setup = await session.run("bash setup.sh", timeout=cfg.download_timeout_s)
                failure = _setup_failure(setup, proxy.denied, cfg)
                if failure is not None:
                    return "failed", failure, _log_of(setup.stdout, setup.stderr, tag), report
                result = await session.run(
                    f"bash run.sh {spec} {tag} {cfg.num_examples} {cfg.rollouts_per_example} {cfg.timeout_per_rollout}"
                )
        except SandboxError as exc:
            raise CheckerError(f"the sandbox could not run: {exc}") from None
        stdout = result.stdout if isinstance(result.stdout, str) else str(result.stdout)
        stderr = result.stderr if isinstance(result.stderr, str) else str(result.stderr)
        verdict = parse_verdict(stdout, tag)
        log_text = (_log_of(setup.stdout, setup.stderr, tag) + "\n" + _log_of(stdout, stderr, tag)).strip()
        if result.kill_reason == "timeout":
            report["duration_s"] = round(result.duration_s, 3)
            return (
                "failed",
                f"the check did not finish within {cfg.timeout_s:g} s (wall clock); it hangs",
                log_text,
                report,
            )
        if result.kill_reason == "memory":
            return "failed", f"the check ran out of memory (limit {cfg.memory_mb} MiB)", log_text, report
        if result.kill_reason == "output":
            return "failed", "the check wrote more output or files than allowed", log_text, report
        if verdict is None:
            return "failed", f"the checker gave no verdict (exit status {result.exit_code})", log_text, report
        rewards = [r.get("reward") for r in verdict["rollouts"]]
        report.update(
            num_rollouts=len(verdict["rollouts"]),
            rewards=rewards,
            scripted_replies=verdict["replies"],
            checks=verdict["checks"],
            duration_s=verdict["duration_s"],
            python_version=verdict["python_version"],
            verifiers_version=verdict["verifiers_version"],
        )
        if verdict["ok"] and result.exit_code == 0:
            return "passed", "", log_text, report
        failed = [c for c in verdict["checks"] if not c["ok"] and not c["skipped"]]
        reason = "; ".join(f"{c['name']}: {c['detail']}" for c in failed[:2]) or (
            f"the checker exited with status {result.exit_code}"
        )
        return "failed", reason, log_text, report


def _ca_bundle() -> bytes | None:
    """The host's CA certificates for pip's HTTPS in the setup phase (the sandbox has no /etc/ssl).

    The host's own trust store first (``SSL_CERT_FILE`` / ``REQUESTS_CA_BUNDLE``, then the system
    bundle), certifi's copy of the public roots last: behind a TLS-inspecting proxy only the host's
    store holds the proxy's CA, and pip in the sandbox would otherwise fail every download."""
    import ssl

    candidates = [os.environ.get("SSL_CERT_FILE", ""), os.environ.get("REQUESTS_CA_BUNDLE", ""),
                  ssl.get_default_verify_paths().cafile or "", "/etc/ssl/certs/ca-certificates.crt"]  # fmt: skip
    with contextlib.suppress(ImportError):
        import certifi

        candidates.append(certifi.where())
    for path in candidates:
        with contextlib.suppress(OSError):
            if path and os.path.isfile(path) and os.path.getsize(path) < 4 * 1024 * 1024:
                return Path(path).read_bytes()
    return None


_FILE_URL = re.compile(r"https?://[^\s'\"]+/([^/\s'\"]+\.(?:whl|tar\.gz|zip))(?:#\S*)?")


def _log_of(stdout: str, stderr: str, tag: str) -> str:
    """What a run printed, for the log tail everyone sees: without the verdict line, and without
    the lines where pip names the worker's configured index (an operator's mirror is a host detail)."""
    other = "\n".join(line for line in stdout.splitlines() if not line.startswith(tag))
    text = _FILE_URL.sub(r"\1", other + "\n" + stderr)
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("Looking in indexes:")).strip()


def _setup_failure(setup: Any, denied: list[str], cfg: WorkerConfig) -> str | None:
    """Why the setup phase failed (the environment's fault), or None when it succeeded."""
    stderr = setup.stderr if isinstance(setup.stderr, str) else str(setup.stderr)
    if setup.exit_code == 0 and not setup.killed:
        return None
    if setup.kill_reason == "timeout":
        return f"installing the dependencies did not finish within {cfg.download_timeout_s:g} s"
    if setup.kill_reason == "memory":
        return f"installing the dependencies ran out of memory (limit {cfg.memory_mb} MiB)"
    if setup.kill_reason == "output":
        return "installing the dependencies wrote more output or files than allowed"
    m = re.search(r"VF-CHECK-DIRECT-REFERENCE (.*)", stderr)
    if m:
        return (
            "it depends on a direct reference (name @ URL or path), which a check never fetches: "
            + m.group(1)[:300]
        )
    if denied:
        return (
            "installing the dependencies needed a host the checker does not reach: "
            + ", ".join(sorted(set(denied))[:5])
            + " (only the public index is allowed)"
        )
    if "No matching distribution" in stderr or "Could not find a version" in stderr:
        line = next((ln for ln in stderr.splitlines() if "No matching distribution" in ln
                     or "Could not find a version" in ln), "")  # fmt: skip
        return f"dependencies not on the index: {line.strip()[:300]}"
    if "VF-CHECK-INSTALL-FAILED" in stderr:
        err = next((ln for ln in stderr.splitlines() if ln.startswith("ERROR")), "")
        return "the wheel did not install into a fresh virtual environment" + (f": {err[:300]}" if err else "")
    return f"the setup of the check failed (exit status {setup.exit_code})"


def _text(v: Any, limit: int = 2000) -> str:
    return v[:limit] if isinstance(v, str) else ""


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def parse_verdict(stdout: str, tag: str) -> dict[str, Any] | None:
    """The verdict line a run wrote (the last line tagged ``tag``), read as hostile input: at most
    `MAX_VERDICT_BYTES`, JSON, and only the fields of the schema below, each of its type and bounded
    (anything else is dropped; a malformed verdict is no verdict)."""
    line = None
    for candidate in reversed(stdout.splitlines()):
        if candidate.startswith(tag + " "):
            line = candidate[len(tag) + 1 :]
            break
    if line is None or len(line.encode("utf-8", "replace")) > MAX_VERDICT_BYTES:
        return None
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("ok"), bool):
        return None
    checks = []
    for c in raw.get("checks") if isinstance(raw.get("checks"), list) else []:
        if isinstance(c, dict) and len(checks) < 50:
            checks.append({"name": _text(c.get("name"), 100), "ok": c.get("ok") is True,
                           "skipped": c.get("skipped") is True, "detail": _text(c.get("detail"))})  # fmt: skip
    rollouts = []
    for r in raw.get("rollouts") if isinstance(raw.get("rollouts"), list) else []:
        if isinstance(r, dict) and len(rollouts) < 256:
            rollouts.append({"reward": _number(r.get("reward"))})
    replies = [_text(r) for r in (raw.get("replies") if isinstance(raw.get("replies"), list) else [])[:64]]
    return {
        "ok": raw["ok"],
        "checks": checks,
        "rollouts": rollouts,
        "replies": replies,
        "duration_s": _number(raw.get("duration_s")),
        "python_version": _text(raw.get("python_version"), 32) or None,
        "verifiers_version": _text(raw.get("verifiers_version"), 64) or None,
    }


def run_worker(config: WorkerConfig, *, max_jobs: int | None = None) -> None:
    """Check the sandbox, then claim and run jobs until interrupted."""
    from verifiers.sandbox import Sandbox

    Sandbox(config.backend).check()  # one clear message when the sandbox cannot run here
    worker = CheckWorker(config)
    try:
        worker.run(max_jobs=max_jobs)
    finally:
        worker.close()
