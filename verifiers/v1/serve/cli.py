"""``vf serve-env ID|@config.toml``: an env-server pool for any env, until Ctrl-C / SIGTERM.

``ID`` is a v1 taskset id (its package's env, else ``single-agent``) or any other environment id
the one loader finds (a classic environment is served as v1 episodes:
:mod:`verifiers.v1.serve.classic`; ``--env-args`` JSON are its ``load_environment`` keywords).
A config file holds the ``[env]`` table of a v1 env (as ``vf eval`` reads it), or ``env_id`` and
``[env_args]`` for the loader, and the original's ``[serve]`` block: ``address``,
``max_concurrent`` (runs per worker), ``[serve.pool]`` (``type = "static"`` with
``num_workers``, or ``type = "elastic"`` with ``max_workers`` and our ``min_workers`` (default
1) and ``idle_timeout`` (seconds a worker may idle before it is stopped, default 60)). Our
additions under ``[serve]``: ``max_queued``, ``max_queued_bytes``, ``reschedule``,
``max_message_bytes``. Flags override the file.
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
                   max_queued: int | None = None, reschedule: int | None = None, min_workers: int | None = None,
                   max_workers: int | None = None, env_args: dict[str, Any] | None = None,
                   allow_env: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """What to serve (a v1 ``[env]`` table, or ``{"env_id", "env_args"}`` for the one loader)
    and the ``serve_env`` keywords ``vf serve-env`` was given."""
    from verifiers.cli.errors import UserError
    from verifiers.cli.v1_eval import read_config_file

    serve: dict[str, Any] = {}
    if target.startswith("@"):
        data = read_config_file(Path(target[1:]))
        env = data.get("env")
        if isinstance(data.get("env_id"), str) and env is None:
            env = {"env_id": data["env_id"], "env_args": {**(data.get("env_args") or {}), **(env_args or {})}}
        elif not isinstance(env, dict) or not env:
            raise UserError(f"{target[1:]}: no [env] table (the env to serve: [env.taskset] id = ...) and no env_id")
        serve = data.get("serve") or {}
        if not isinstance(serve, dict):
            raise UserError(f"{target[1:]}: [serve] must be a table")
    else:
        env = served_env(target, env_args or {})
    pool = serve.get("pool") or {}
    elastic: dict[str, Any] = {}
    if pool.get("type") == "elastic" or min_workers is not None or max_workers is not None:
        high = max_workers if max_workers is not None else (pool.get("max_workers") or os.cpu_count() or 1)
        low = min_workers if min_workers is not None else pool.get("min_workers", 1)
        elastic = {"min_workers": int(low), "max_workers": int(high), "idle_timeout": float(pool.get("idle_timeout", 60.0))}
        if not 1 <= elastic["min_workers"] <= elastic["max_workers"]:
            raise UserError("an elastic pool needs 1 <= min_workers <= max_workers")
        file_workers = elastic["min_workers"]
    else:
        file_workers = pool.get("num_workers", DEFAULT_WORKERS)
    kwargs = {
        **elastic,
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
    names = [*(allow_env or []), *(serve.get("allow_env") or [])]
    if any(not isinstance(n, str) or not n or "," in n for n in names):
        raise UserError("allow_env: environment variable names, one per --allow-env")
    kwargs["allow_env"] = sorted(set(names))
    return env, kwargs


def served_env(target: str, env_args: dict[str, Any]) -> dict[str, Any]:
    """What an ``ID`` names: a v1 taskset's ``[env]`` table when it is one, else the id for the
    one loader (a classic environment, or a v1 package by its own ``load_environment``)."""
    from verifiers.v1.env import environment_class
    from verifiers.v1.plugins import PluginError

    if not env_args:
        try:
            environment_class(target, None)
            return {"taskset": {"id": target}}
        except PluginError:
            pass
    return {"env_id": target, "env_args": dict(env_args)}


def parse_env_args(text: str | None) -> dict[str, Any] | None:
    """``--env-args`` JSON: a map of ``load_environment`` keywords."""
    import json

    from verifiers.cli.errors import UserError

    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UserError(f"--env-args is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UserError("--env-args must be a JSON object of load_environment keywords")
    return value


def main(target: str, **flags: Any) -> int:
    from verifiers.cli.errors import UserError
    from verifiers.errors import EnvironmentNotFoundError
    from verifiers.v1.plugins import PluginError
    from verifiers.v1.serve.pool import serve_env
    from verifiers.v1.serve.server import ALLOW_ENV_VAR, load_runs

    env, kwargs = serve_settings(target, **flags)
    # the variables a request's client config may name, for this process and the workers it starts
    os.environ[ALLOW_ENV_VAR] = ",".join(kwargs.pop("allow_env"))
    try:  # refused here, in one line, before any worker starts
        runs = load_runs(env)
        runs.check()
    except (PluginError, EnvironmentNotFoundError) as exc:
        raise UserError(str(exc)) from None
    if not is_loopback(kwargs["address"]):
        print(f"vf serve-env: {kwargs['address']} is reachable from other machines: anyone who can connect runs this "
              "env's code here and spends the model calls of the endpoints they name", file=sys.stderr)  # fmt: skip

    def ready(bound: str) -> None:
        name = env.get("env_id") or env.get("id") or env["taskset"].get("id")
        size = f"{kwargs['min_workers']}-{kwargs['max_workers']} workers" if "min_workers" in kwargs else f"{kwargs['workers']} workers"
        print(f"serving {name} ({runs.kind}) on {bound} ({size})", flush=True)

    serve_env(env, on_ready=ready, **kwargs)
    return 0
