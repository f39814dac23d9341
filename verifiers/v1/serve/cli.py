"""``vf serve-env ID|@config.toml``: an env-server pool for a v1 env, until Ctrl-C / SIGTERM.

``ID`` is a taskset id (its package's env, else ``single-agent``). A config file holds the
``[env]`` table (as ``vf eval`` reads it) and the original's ``[serve]`` block: ``address``,
``max_concurrent`` (runs per worker), ``[serve.pool]`` (``type = "static"``, ``num_workers``; an
``elastic`` pool starts ``max_workers`` workers: scaling with load is not implemented). Our
additions under ``[serve]``: ``max_queued``, ``max_queued_bytes``, ``reschedule``,
``max_message_bytes``. Flags
override the file.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from verifiers.v1.serve.protocol import DEFAULT_ADDRESS, DEFAULT_MAX_MESSAGE_BYTES

DEFAULT_WORKERS = 1


def is_loopback(address: str) -> bool:
    """Whether a ZMQ address is reachable from this machine only (ipc, inproc, loopback tcp)."""
    if not address.startswith("tcp://"):
        return address.startswith(("ipc://", "inproc://"))
    host = urlsplit(address).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # an interface name or *: every interface


def serve_settings(target: str, *, workers: int | None = None, address: str | None = None, max_concurrent: int | None = None,
                   max_queued: int | None = None, reschedule: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The ``[env]`` table and ``serve_env`` keywords ``vf serve-env`` was given."""
    from verifiers.cli.errors import UserError
    from verifiers.cli.v1_eval import read_config_file

    serve: dict[str, Any] = {}
    if target.startswith("@"):
        data = read_config_file(Path(target[1:]))
        env = data.get("env")
        if not isinstance(env, dict) or not env:
            raise UserError(f"{target[1:]}: no [env] table (the env to serve: [env.taskset] id = ...)")
        serve = data.get("serve") or {}
        if not isinstance(serve, dict):
            raise UserError(f"{target[1:]}: [serve] must be a table")
    else:
        env = {"taskset": {"id": target}}
    pool = serve.get("pool") or {}
    if pool.get("type") == "elastic":
        file_workers = pool.get("max_workers") or os.cpu_count() or 1
        print(f"vf serve-env: elastic pools are not implemented; starting {file_workers} workers", file=sys.stderr)
    else:
        file_workers = pool.get("num_workers", DEFAULT_WORKERS)
    kwargs = {
        "workers": int(workers if workers is not None else file_workers),
        "address": address or serve.get("address") or DEFAULT_ADDRESS,
        "max_concurrent": int(max_concurrent or serve.get("max_concurrent") or 64),
        "max_queued": int(max_queued if max_queued is not None else serve.get("max_queued", 1024)),
        "reschedule": int(reschedule if reschedule is not None else serve.get("reschedule", 1)),
        "max_message_bytes": int(serve.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)),
        "max_queued_bytes": int(serve.get("max_queued_bytes", 1 << 30)),
    }
    if kwargs["workers"] < 1:
        raise UserError("--workers must be at least 1")
    return env, kwargs


def main(target: str, **flags: Any) -> int:
    from verifiers.cli.errors import UserError
    from verifiers.v1.env import load_environment
    from verifiers.v1.plugins import PluginError
    from verifiers.v1.serve.pool import serve_env

    env, kwargs = serve_settings(target, **flags)
    try:  # refused here, in one line, before any worker starts
        load_environment(env).check()
    except PluginError as exc:
        raise UserError(str(exc)) from None
    if not is_loopback(kwargs["address"]):
        print(f"vf serve-env: {kwargs['address']} is reachable from other machines: anyone who can connect runs this "
              "env's code here and spends the model calls of the endpoints they name", file=sys.stderr)  # fmt: skip

    def ready(bound: str) -> None:
        print(f"serving {env.get('id') or env['taskset'].get('id')} on {bound} ({kwargs['workers']} workers)", flush=True)

    serve_env(env, on_ready=ready, **kwargs)
    return 0
