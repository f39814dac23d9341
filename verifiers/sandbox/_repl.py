# The persistent Python interpreter of a sandbox session. It runs INSIDE the sandbox, under the
# sandbox's own (system) Python, passed with `python3 -c`; keep it free of non-stdlib imports and
# of syntax newer than Python 3.8.
#
# Protocol on the inherited stdin/stdout pipes, which are moved to private descriptors first, so
# that the cell's code (and any process it starts) sees /dev/null on fd 0 and per-cell capture
# files on fds 1 and 2: each message is a 4-byte big-endian length and a UTF-8 JSON object.
#   host -> repl: {"code": str, "cap": int}
#   repl -> host: {"status": "ok"|"error", "stdout": str, "stderr": str, "value": str|None,
#                  "truncated": bool, "memory": bool}
import ast
import builtins
import json
import linecache
import os
import signal
import struct
import sys
import tempfile
import traceback

_proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
_proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
_devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(_devnull, 0)
os.dup2(_devnull, 1)
# a write past RLIMIT_FSIZE should fail with EFBIG in the cell, not kill the interpreter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

_namespace = {"__name__": "__main__", "__builtins__": builtins}


def _read_exact(n):
    data = b""
    while len(data) < n:
        chunk = _proto_in.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _send(obj):
    body = json.dumps(obj).encode("utf-8")
    _proto_out.write(struct.pack(">I", len(body)) + body)


def _read_capped(f, cap):
    try:
        f.seek(0)
        data = f.read(cap + 1)
    except OSError:
        return "", False
    finally:
        f.close()
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def _print_exception(exc):
    # drop the interpreter's own frame: the model only needs the cell's part of the traceback
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _run_cell.__code__.co_filename:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))


def _run_cell(number, code, cap):
    # fresh unnamed files per cell: a background process of an earlier cell keeps writing to its own
    files = []
    for fd in (1, 2):
        f = tempfile.TemporaryFile()
        files.append(f)
        os.dup2(f.fileno(), fd)
    status, value, memory = "ok", None, False
    filename = f"<cell {number}>"
    try:
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = tree.body.pop()
        exec(compile(tree, filename, "exec"), _namespace)
        if last is not None:
            result = eval(compile(ast.Expression(last.value), filename, "eval"), _namespace)
            if result is not None:
                value = repr(result)[: cap + 1]
    except BaseException as exc:  # the cell's failure is data; the REPL goes on
        status = "error"
        memory = isinstance(exc, MemoryError)
        try:
            _print_exception(exc)
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os.dup2(_devnull, 1)
        os.dup2(_devnull, 2)
    out, out_cut = _read_capped(files[0], cap)
    err, err_cut = _read_capped(files[1], cap)
    truncated = out_cut or err_cut or (value is not None and len(value) > cap)
    if value is not None:
        value = value[:cap]
    return {
        "status": status,
        "stdout": out,
        "stderr": err,
        "value": value,
        "truncated": truncated,
        "memory": memory,
    }


def _main():
    _send({"status": "ready"})
    number = 0
    while True:
        try:
            (size,) = struct.unpack(">I", _read_exact(4))
            request = json.loads(_read_exact(size).decode("utf-8"))
        except EOFError:
            return
        number += 1
        _send(_run_cell(number, request["code"], int(request.get("cap", 1 << 20))))


_main()
