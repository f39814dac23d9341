"""Tool folders: Python environments built once from the package index, cached by a hash, mounted
read-only into sandboxes.

One concept with two uses: an agent program's **tool folder** (mini-swe-agent and its packages,
which a harness runs inside the sandbox) and a task's **environment** (the packages its code and
tests need, declared as Python requirements instead of a Docker image). Either is a virtual
environment for the sandbox's interpreter (``/usr/bin/python3``), built by ``uv`` *inside* a
sandbox whose only network is the allow-listed egress proxy to the package registries (nothing a
requirement's build backend runs ever runs on the host), at the path it is later mounted at
(``/opt/tools/<key>``: scripts' ``#!`` lines stay right).

* The key hashes the requirements (sorted), the interpreter's version and the platform, and this
  builder's version: the same requirements on the same machine are built once, by one process.
* Concurrent builders of one key serialize on a lock file; the loser finds the winner's folder.
* A build goes into a fresh ``.build-<key>-*`` folder and is renamed to ``<key>`` only when
  complete (with its ``.vf-toolenv.json`` record); a folder without that record is never used,
  and a builder killed halfway leaves only a ``.build-*`` folder, removed by the next builder.
* The finished folder is given back to the host user and made read-only to everyone else.

Where: ``VF_TOOLENV_DIR``, else ``/var/tmp/vf-toolenvs-<uid>`` (kept across reboots; it must be
reachable by the sandbox's uid when the host process is root, so not under a ``0700`` home).
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verifiers.sandbox.types import SandboxError

__all__ = ["TOOLS_INSIDE", "ToolEnv", "ensure_toolenv", "normalized_requirements", "toolenv_key", "toolenv_root"]

TOOLS_INSIDE = "/opt/tools"
"""Where tool folders are mounted inside a sandbox (``/opt/tools/<key>``)."""
BUILDER_VERSION = 1
RECORD = ".vf-toolenv.json"
PACKAGE_REGISTRIES = ("https://pypi.org", "https://files.pythonhosted.org")
MAX_REQUIREMENTS = 200
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\], <>=!~;:'\"()*+@/]*\Z")
UV_INSIDE = "/opt/vf/bin/uv"
"""Where the venv's ``uv`` is mounted in a sandbox that builds (here and ``prepare_uv_script``)."""
CACHE_INSIDE = "/opt/vf/uv-cache"
CA_INSIDE = "/opt/vf/ca-certificates.crt"
_SOCKET = ".vf-egress.sock"
BUILD_LIMITS = {"memory_mb": 16384, "processes": 2048, "file_size_mb": 2048, "open_files": 4096,
                "tmp_size_mb": 2048, "disk_mb": 256, "output_bytes": 4 * 1024 * 1024}  # fmt: skip

# $1 relay source, $2 socket, $3 prefix, $4 python, $5 "online"/"offline"
_BUILD = r"""
set -e
if [ "$5" = online ]; then
  /usr/bin/python3 -I -c "$1" "$2" 3128 > /tmp/relay.log 2>&1 &
  for _ in $(seq 200); do grep -q ready /tmp/relay.log 2>/dev/null && break; sleep 0.05; done
  export HTTPS_PROXY=http://127.0.0.1:3128 HTTP_PROXY=http://127.0.0.1:3128 NO_PROXY=
else
  export UV_OFFLINE=1
fi
/opt/vf/bin/uv venv --quiet --python "$4" "$3"
/opt/vf/bin/uv pip install --quiet --compile-bytecode --python "$3/bin/python" -r /workspace/requirements.txt
"""


@dataclass(frozen=True, slots=True)
class ToolEnv:
    """A built tool folder: ``host`` on this machine, ``inside`` where sandboxes see it."""

    key: str
    host: Path
    inside: str
    requirements: tuple[str, ...]

    @property
    def python(self) -> str:
        """The folder's interpreter as the sandbox sees it."""
        return f"{self.inside}/bin/python"

    @property
    def bin(self) -> str:
        return f"{self.inside}/bin"

    @property
    def bind(self) -> dict[str, str]:
        """The read-only mount that puts it in a sandbox."""
        return {str(self.host): self.inside}


def normalized_requirements(requirements: Iterable[str]) -> tuple[str, ...]:
    """The requirements, stripped, deduplicated and sorted; a line that is not a plain requirement
    (an option such as ``--index-url``, a file path, several lines) is a ``ValueError``."""
    out = set()
    for raw in requirements:
        if not isinstance(raw, str):
            raise ValueError(f"a requirement must be a string, not {type(raw).__name__}")
        req = raw.strip()
        if not req or req.startswith("#"):
            continue
        if len(req) > 300 or not _REQUIREMENT.match(req) or "\n" in req:
            raise ValueError(f"not a plain Python requirement: {raw[:100]!r}")
        out.add(req)
    if not out:
        raise ValueError("a tool folder needs at least one requirement")
    if len(out) > MAX_REQUIREMENTS:
        raise ValueError(f"{len(out)} requirements: at most {MAX_REQUIREMENTS}")
    return tuple(sorted(out))


@functools.lru_cache(maxsize=4)
def _interpreter(python: str) -> str:
    """The sandbox interpreter's exact version and platform (part of the key)."""
    try:
        out = subprocess.run([python, "-I", "-c", "import sys, sysconfig; print(sys.version.split()[0], sysconfig.get_platform(), sys.implementation.cache_tag)"],
                             capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"the sandbox interpreter {python} cannot run: {exc}") from None
    if out.returncode != 0:
        raise SandboxError(f"the sandbox interpreter {python} cannot run: {out.stderr.strip()[-300:]}")
    return out.stdout.strip()


def toolenv_key(requirements: Iterable[str], python: str = "/usr/bin/python3", index_url: str | None = None) -> str:
    """The cache key: requirements, interpreter version and platform, index, builder version."""
    spec = {"builder": BUILDER_VERSION, "requirements": list(normalized_requirements(requirements)),
            "python": _interpreter(python), "machine": platform.machine(), "index": index_url}  # fmt: skip
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def toolenv_root() -> Path:
    """The cache folder (``VF_TOOLENV_DIR``, else ``/var/tmp/vf-toolenvs-<uid>``): ours, not
    writable by anyone else, and traversable by the sandbox's uid."""
    path = Path(os.environ.get("VF_TOOLENV_DIR") or f"/var/tmp/vf-toolenvs-{os.getuid()}")
    path.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SandboxError(f"the tool folder cache {path} must be owned by uid {os.getuid()} and writable by it alone (set VF_TOOLENV_DIR)")
    from verifiers.sandbox.backends import drop_to_sandbox_uid

    if drop_to_sandbox_uid():
        from verifiers.sandbox.binds import reachable_by_sandbox_uid

        if not all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.resolve().parents]) and not reachable_by_sandbox_uid(path):
            raise SandboxError(f"the tool folder cache {path} is not reachable by the sandbox's uid (every folder above needs o+x; set VF_TOOLENV_DIR)")
    return path


def _complete(folder: Path, key: str) -> bool:
    try:
        return json.loads((folder / RECORD).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def uv_binary() -> str:
    """The ``uv`` of this interpreter's venv (else the one on PATH): the version the project pins."""
    here = Path(sys.executable).parent / "uv"
    if here.is_file():
        return str(here)
    found = shutil.which("uv")
    if found is None:
        raise SandboxError("uv is not installed in this venv (it builds the sandbox's tool folders): pip install uv")
    return found


def ca_bundle() -> Path | None:
    """The host's CA certificates (a sandbox has no ``/etc/ssl``), for HTTPS while building."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


async def ensure_toolenv(
    requirements: Iterable[str], *, registries: Sequence[str] = PACKAGE_REGISTRIES, backend: str = "bwrap",
    timeout: float = 1800.0, python: str = "/usr/bin/python3", index_url: str | None = None,
) -> ToolEnv:  # fmt: skip
    """The tool folder for ``requirements``: the cached one, else built now (once per machine:
    concurrent callers of one key wait for the first). ``registries`` (``http(s)://host``) are
    what the build may reach; ``[]`` builds offline from uv's cache. ``index_url``: another
    package index (``UV_INDEX_URL``; it must be among ``registries``)."""
    reqs = normalized_requirements(requirements)
    key = await asyncio.to_thread(toolenv_key, reqs, python, index_url)
    root = await asyncio.to_thread(toolenv_root)
    final = root / key
    env = ToolEnv(key, final, f"{TOOLS_INSIDE}/{key}", reqs)
    if _complete(final, key):
        return env
    # one build per key in this process, run as its own task: a caller that is cancelled (a
    # rollout's timeout) stops waiting, and the build goes on for the next caller
    task = _building.get(final)
    if task is None or task.done():
        task = asyncio.ensure_future(_locked_build(env, root, registries, backend, timeout, python, index_url))
        _building[final] = task
        task.add_done_callback(functools.partial(_built, final))
    await asyncio.shield(task)
    return env


_building: dict[Path, asyncio.Future[None]] = {}
"""The builds in progress in this process, by folder."""


def _built(final: Path, task: asyncio.Future[None]) -> None:
    if _building.get(final) is task:
        del _building[final]
    if not task.cancelled():
        task.exception()  # retrieved (its callers raise it): never logged as "never retrieved"


async def _locked_build(
    env: ToolEnv, root: Path, registries: Sequence[str], backend: str, timeout: float, python: str, index_url: str | None,
) -> None:  # fmt: skip
    key, final = env.key, env.host
    lock_fd = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:  # a non-blocking poll: a cancelled builder never leaves a thread holding the lock
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(f"another process has been building tool folder {key} for over {timeout:g} s") from None
                await asyncio.sleep(0.2)
        if _complete(final, key):
            return
        await asyncio.to_thread(_clear, root, key, final)
        await _build(env, root, registries, backend, timeout, python, index_url)
    finally:
        os.close(lock_fd)


def _clear(root: Path, key: str, final: Path) -> None:
    """What a builder of ``key`` killed halfway left (its staging folder; a folder without its
    record): removed by the next builder, which holds the lock."""
    for stale in root.glob(f".build-{key}-*"):
        _remove(stale)
    if final.exists():
        _remove(final)


def _remove(path: Path) -> None:
    subprocess.run(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, capture_output=True, check=False)


async def _build(
    env: ToolEnv, root: Path, registries: Sequence[str], backend: str, timeout: float, python: str, index_url: str | None,
) -> None:  # fmt: skip
    from verifiers.sandbox import Sandbox
    from verifiers.sandbox.backends import SANDBOX_UID, drop_to_sandbox_uid
    from verifiers.sandbox.egress import RELAY, EgressProxy, hosts_of

    uid = SANDBOX_UID if drop_to_sandbox_uid() else None
    staging = Path(tempfile.mkdtemp(prefix=f".build-{env.key}-", dir=root))
    cache = root / "uv-cache"
    cache.mkdir(mode=0o755, exist_ok=True)
    for folder in (staging, cache):
        folder.chmod(0o755)
        if uid is not None:
            os.chown(folder, uid, uid)
            if folder == cache and cache.stat().st_uid != uid:
                raise SandboxError(f"{cache} must belong to uid {uid}")
    binds = {uv_binary(): UV_INSIDE}
    ca = ca_bundle()
    sb_env = {"UV_CACHE_DIR": CACHE_INSIDE, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1",
              "UV_LINK_MODE": "copy"}  # fmt: skip
    if index_url:
        sb_env["UV_INDEX_URL"] = index_url
    if ca is not None:
        binds[str(ca)] = CA_INSIDE
        sb_env["SSL_CERT_FILE"] = CA_INSIDE
    allowed = hosts_of(registries)
    started = time.monotonic()
    try:
        sandbox = Sandbox(backend, limits=BUILD_LIMITS, timeout=timeout, env=sb_env, ro_binds=binds)
        async with sandbox.session(files={"requirements.txt": "\n".join(env.requirements) + "\n"}) as session:
            argv = ["/bin/bash", "-c", _BUILD, "build", RELAY, f"/workspace/{_SOCKET}", env.inside, python,
                    "online" if allowed else "offline"]  # fmt: skip
            rw = {str(staging): env.inside, str(cache): CACHE_INSIDE}
            if allowed:
                async with EgressProxy(session.workdir / _SOCKET, allowed) as proxy:
                    result = await session.run(argv, timeout=timeout, rw_binds=rw)
                denied = proxy.denied
            else:
                result = await session.run(argv, timeout=timeout, rw_binds=rw)
                denied = []
        if not result.ok:
            why = (result.stderr.strip() or result.stdout.strip())[-1500:]
            if result.kill_reason == "timeout":
                why = f"it did not finish within {timeout:g} s. {why}"
            if denied:
                why += f" (refused: {', '.join(sorted(set(denied)))}; add them to registries)"
            raise SandboxError(f"building the tool folder for {', '.join(env.requirements)} failed: {' '.join(why.split())}")
        record = {"key": env.key, "requirements": list(env.requirements), "python": _interpreter(python),
                  "built_s": round(time.monotonic() - started, 1), "built_at": time.time()}  # fmt: skip
        await asyncio.to_thread(_seal, staging, record)
        os.rename(staging, env.host)
    except BaseException:
        await asyncio.to_thread(_remove, staging)
        raise


def _seal(folder: Path, record: dict) -> None:
    """Give the built folder to the host user, readable by all and writable by none else, then
    write its record (the mark of a complete build)."""
    subprocess.run(["chown", "-R", "--no-dereference", f"{os.getuid()}:{os.getgid()}", "--", str(folder)], check=True, capture_output=True)
    subprocess.run(["chmod", "-R", "u+rwX,go+rX,go-w", "--", str(folder)], check=True, capture_output=True)
    (folder / RECORD).write_text(json.dumps(record, sort_keys=True))
    (folder / RECORD).chmod(0o644)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verifiers.sandbox.toolenv REQUIREMENT...``: build (or find) a tool folder ahead
    of a run (a CI machine's warm-up), and print where it is."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m verifiers.sandbox.toolenv", description=main.__doc__)
    parser.add_argument("requirements", nargs="+")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    try:
        env = asyncio.run(ensure_toolenv(args.requirements, timeout=args.timeout))
    except (SandboxError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{env.host} (mounted at {env.inside})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
