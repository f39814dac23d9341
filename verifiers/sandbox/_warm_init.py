# The supervisor of a warm sandbox. It runs INSIDE the sandbox as PID 1 of the sandbox's own PID
# namespace, under the sandbox's system Python (`python3 -I -c`); keep it stdlib-only.
#
# It never runs job code itself: for each job it forks a fresh child (which sets the job's limits,
# then execs the job's program or, for a Python job, runs the code in that child), waits for it,
# then resets the sandbox so that nothing of the job survives: every other process of the
# namespace killed and reaped, the work folder, /tmp and /dev/shm emptied (modes, times and
# extended attributes of their roots restored), System V IPC objects removed, and its own limits,
# priority and CPU set checked unchanged. A reset that cannot prove a clean state says why, and the
# host throws the whole sandbox away.
#
# Why the job cannot reach the supervisor: as PID 1 of its namespace it receives no signal from
# inside that it has no handler for (so SIGKILL and SIGSTOP from a job are dropped); it is not
# dumpable, so no job may ptrace it, read its memory or take its descriptors; the job's child closes
# every descriptor but its own stdin/stdout/stderr before running anything.
#
# Protocol on fd 0, a SOCK_SEQPACKET unix socket to the host (one JSON object per message):
#   host -> init: {"job": {"argv": [...]} | {"python": str}, "env": {...}, "limits": {...},
#                  "keep_workdir": bool}
#                 with three descriptors attached (the job's stdin, stdout, stderr); with
#                 keep_workdir the reset after the job leaves the work folder alone (the next job
#                 belongs to the same lease, e.g. a rollout's restarted interpreter)
#                 {"kill": true}   stop the running job now
#                 {"reset": true}  a full reset now (the end of a lease)
#   init -> host: {"ready": true}  once, at start
#                 {"exit": int, "reset": null | str}  after each job (shell exit convention;
#                 "reset" names what could not be cleaned); {"reset": null | str} after a reset
# (ast, collections, functools, itertools, math, re, string: what jobs commonly import, loaded
# once here so that each forked job starts with them)
import array
import ast  # noqa: F401
import atexit
import builtins
import collections  # noqa: F401
import ctypes
import functools  # noqa: F401
import gc
import io
import itertools  # noqa: F401
import json
import math  # noqa: F401
import os
import re  # noqa: F401
import resource
import select
import signal
import socket
import string  # noqa: F401
import sys
import threading
import traceback
import types

WORKDIR = "/workspace"
SCRATCH = (WORKDIR, "/tmp", "/dev/shm")
_LIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}
_IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)


def _send(ctl, obj):
    ctl.send(json.dumps(obj).encode("utf-8"))


def _receive(ctl):
    fds = array.array("i")
    data, ancdata, _flags, _addr = ctl.recvmsg(1 << 20, socket.CMSG_LEN(16 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if not data:
        return None, list(fds)
    return json.loads(data.decode("utf-8")), list(fds)


# -- the job's child ---------------------------------------------------------------------------


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1


def _stream(fd, encoding, unbuffered, errors="strict"):
    if unbuffered:  # as `python3 -u`: no buffer between the program and the pipe
        return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=encoding, errors=errors, write_through=True)
    return open(fd, "w", encoding=encoding, errors=errors, closefd=False)


def _run_python(source, env, unbuffered):
    """The job's code in this fresh child, set up as `python3 [-u] -c` would set up a new
    interpreter."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    extra = [p for p in env.get("PYTHONPATH", "").split(":") if p]
    sys.path[:0] = ["", *extra]
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)
    sys.stdout = sys.__stdout__ = _stream(1, encoding, unbuffered)
    sys.stderr = sys.__stderr__ = _stream(2, encoding, True, "backslashreplace")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    status = 0
    try:
        exec(compile(source, "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_code(exc)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        status = 1
    try:
        threading._shutdown()  # non-daemon threads finish, as at a normal interpreter exit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


def _child(request, fds):
    try:
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.closerange(3, 1 << 20)  # the control socket and every other descriptor of ours
        for name, value in request["limits"].items():
            if name in _LIMITS and value is not None:
                resource.setrlimit(_LIMITS[name], (value, value))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX queues would outlive the job
        cpu = request["limits"].get("cpu")
        if cpu is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        env = {str(k): str(v) for k, v in request["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        os.chdir(WORKDIR)
        job = request["job"]
        if "python" in job:
            _run_python(job["python"], env, bool(job.get("unbuffered")))
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # as a program started by a shell has them
        argv = [str(a) for a in job["argv"]]
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(2, (f"sandbox: {argv[0]}: {exc.strerror}\n").encode())
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    except BaseException:
        try:
            os.write(2, traceback.format_exc().encode())
        except BaseException:
            pass
    os._exit(126)


# -- reset -------------------------------------------------------------------------------------


def _other_pids():
    return [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def _kill_all():
    """SIGKILL every process of the namespace but this one (kill(-1) spares the caller and, inside
    a PID namespace, reaches nothing outside it), reap them all, and check that none is left."""
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        if not _other_pids():
            return None
    return f"processes survived: {_other_pids()}"


def _clear(top):
    """Delete everything under ``top`` without following links (folders the job made unreadable
    are opened up first)."""
    stack, folders = [top], []
    while stack:
        folder = stack.pop()
        try:
            os.chmod(folder, 0o700)
        except OSError:
            pass
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    folders.append(entry.path)
                else:
                    os.unlink(entry.path)
    for folder in reversed(folders):
        os.rmdir(folder)


def _snapshot(path):
    st = os.stat(path)
    return (st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_mtime_ns)


def _clear_scratch(initial, tops):
    for top in tops:
        try:
            _clear(top)
            for name in os.listxattr(top):
                os.removexattr(top, name)
            mode, _uid, _gid, mtime = initial[top]
            os.chmod(top, mode)
            os.utime(top, ns=(mtime, mtime))
        except OSError as exc:
            return f"{top} could not be emptied: {exc}"
        if os.listdir(top) or _snapshot(top) != initial[top] or os.listxattr(top):
            return f"{top} is not back to its initial state"
    return None


def _clear_ipc():
    removers = {"shm": _libc.shmctl, "msg": _libc.msgctl}
    for kind in ("shm", "msg", "sem"):
        path = "/proc/sysvipc/" + kind
        try:
            with open(path) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                _libc.semctl(ident, 0, _IPC_RMID)
            else:
                removers[kind](ident, _IPC_RMID, None)
        with open(path) as f:
            if f.read().splitlines()[1:]:
                return f"System V {kind} objects survived"
    return None


def _own_state():
    limits = tuple(resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))
    return limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0))


def _reset(initial_dirs, initial_self, keep_workdir=False):
    tops = [top for top in SCRATCH if not (keep_workdir and top == WORKDIR)]
    problem = _kill_all() or _clear_scratch(initial_dirs, tops) or _clear_ipc()
    if problem is None and _own_state() != initial_self:
        # a job may lower this process's limits (same uid): they cannot be raised back
        problem = "the supervisor's limits, priority or CPU set were changed"
    return problem


# -- main loop ---------------------------------------------------------------------------------


def _wait_job(ctl, pid):
    """Wait until the job's child exits; a kill request SIGKILLs everything but us meanwhile."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([ctl, pidfd], [], [])
            if pidfd in ready:
                break
            message, fds = _receive(ctl)
            for fd in fds:
                os.close(fd)
            if message is None:  # the host is gone: take everything down with us
                _kill_all()
                os._exit(0)
            if message.get("kill"):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        os.close(pidfd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main():
    if os.getpid() != 1:
        # kill(-1) below must only ever reach this sandbox's own namespace
        sys.stderr.write("warm sandbox init: not PID 1 of a PID namespace; refusing to run\n")
        sys.exit(2)
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/1/mem, no pidfd_getfd
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1: a signal with no handler never arrives
    ctl = socket.socket(fileno=os.dup(0))
    ctl.set_inheritable(False)
    initial_dirs = {top: _snapshot(top) for top in SCRATCH}
    initial_self = _own_state()
    # what exists now is never collected: a job's garbage collection then leaves these objects'
    # pages alone, instead of copying every page of the interpreter on write
    gc.freeze()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # stderr reaches the host until here, for start-up failures
        os.dup2(null, fd)
    os.close(null)
    _send(ctl, {"ready": True})
    while True:
        request, fds = _receive(ctl)
        if request is None:
            _kill_all()
            return
        if request.get("reset"):
            for fd in fds:
                os.close(fd)
            _send(ctl, {"reset": _reset(initial_dirs, initial_self)})
            continue
        if "job" not in request or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue  # a stray kill after the job ended
        pid = os.fork()
        if pid == 0:
            ctl.close()
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        code = _wait_job(ctl, pid)
        keep = bool(request.get("keep_workdir"))
        _send(ctl, {"exit": code, "reset": _reset(initial_dirs, initial_self, keep)})


main()
