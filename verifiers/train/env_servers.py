"""Environments through env servers: the orchestrator owns the tasks, env servers play them.

The orchestrator never runs an environment in its own event loop (unless an ``[[env]]`` says
``server = "in_process"``). Each group of a task is ``group_size`` ``run`` requests, sent with
:class:`verifiers.v1.serve.EnvClient` to the env's servers (round-robin over its addresses); each
request carries the task's data, the inference server the orchestrator chose for the group (its
base URL: the env server's agents call the training's vLLM, under the policy version the
orchestrator tracks) and the training's sampling args. The returned episodes become states the
orchestrator already reads: ``reward`` (the mean over the trainable traces, as ``vf eval`` reports
it), ``error`` (failed rollouts stay out of the loss), ``episode`` (its traces' token ids, masks and
logprobs become the samples).

Where the servers are, per ``[[env]]``:

* ``server = "embedded"`` (the default, ``"auto"``, for classic and v1 environments): the run starts an
  :class:`~verifiers.v1.serve.EnvServerPool` of ``workers`` processes for it, in a child process,
  on a loopback port; it is stopped on every path (normal end, error, Ctrl-C), and it stops by
  itself when the run's process dies.
* ``server = "tcp://host:port"`` or a list of them: pools started elsewhere (``vf serve-env``),
  for clusters; the run only connects.
* ``server = "in_process"``: the environment's own ``run_group`` in the orchestrator's loop (the
  same rollout interface; the benchmarks' baseline and a debugger's path: see the README).

Infrastructure failures are rescheduled, never scored: a run the pool answers as an ``InfraError``
(its worker died), a pool that refuses a run (``ServerBusy``), an env server that stops answering
``health``. Torch-free, like the orchestrator.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifiers.train.orchestrator import EnvEntry, EnvInfraError, env_rollout_group

__all__ = ["EnvServers", "episode_state", "server_config"]

EMBEDDED, IN_PROCESS = "embedded", "in_process"
INFRA = "InfraError"
BUSY = "ServerBusy"
GROUP_KEY = "rollouts_per_example"
COALESCE_KEY = "coalesce_samples"


def server_config(env: Any, section: Any) -> dict[str, Any]:
    """What an env server loads for ``section``'s environment: a v1 env's own ``[env]`` table (as
    the loader built it), else the environment id and its args for the one loader (a classic
    environment, served as v1 episodes)."""
    table = getattr(env, "server_table", None)
    if table is not None:
        return dict(table)
    return {"env_id": section.id, "env_args": dict(section.args)}


def is_group_served(env: Any) -> bool:
    """Whether a group is one request answered with one episode of ``n`` traces (a classic
    environment: its group reward functions score the group together), rather than ``n`` requests
    of one episode each (a v1 env: each episode is one task's run)."""
    return getattr(env, "server_table", None) is None


#: The keys of a classic dataset row a run request carries (the server formats the row itself).
ROW_KEYS = ("prompt", "question", "answer", "info", "task", "example_id")


def task_data(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a ``run`` carries for one row: a v1 task's dumped data, else the dataset row's fields."""
    task = row.get("task")
    data = getattr(task, "data", None)
    if data is not None and hasattr(data, "model_dump"):
        return data.model_dump(mode="json", exclude_none=True)
    return {k: row[k] for k in ROW_KEYS if row.get(k) is not None}


def _model_error(err: Mapping[str, Any]) -> bool:
    text = f"{err.get('type')} {err.get('message')}".lower()
    return "modeltimeout" in text or "connection error" in text or "apiconnectionerror" in text


def episode_state(episode: Any, row: Mapping[str, Any], rollout_index: int) -> dict[str, Any]:
    """The orchestrator's view of an episode an env server played (the engine's own ``fill_state``)."""
    from verifiers.train.v1_envs import describe_episode
    from verifiers.v1.rollout import fill_state

    state: dict[str, Any] = {"example_id": row.get("example_id"), "rollout_index": rollout_index}

    class _Done:  # fill_state asks the env whether the episode completed: here, whether it is ok
        @staticmethod
        def complete(ep: Any) -> bool:
            return bool(ep.ok)

    fill_state(state, episode, _Done)  # type: ignore[arg-type]
    err = state.get("error")
    if err and _model_error(err):
        err["source"] = "model"  # no answer from the inference server: the orchestrator asks its /health
    state["episode"] = episode
    describe_episode(state, episode, row.get("prompt"))
    return state


@dataclass
class _Target:
    """One environment's env servers: their addresses, a client each, and a pool we started."""

    name: str
    addresses: list[str]
    clients: list[Any] = field(default_factory=list)
    process: Any = None
    pipe: Any = None
    rr: itertools.count = field(default_factory=itertools.count)
    lost: asyncio.Future | None = None  # set (to an EnvInfraError) when its server is gone
    misses: int = 0
    grouped: bool = False  # a classic environment: one request per group (see is_group_served)

    def client(self) -> Any:
        return self.clients[next(self.rr) % len(self.clients)]


def _watch(pipe: Any) -> None:
    """Stop this process (SIGTERM: the pool stops its workers) when the run's end of ``pipe`` closes."""

    def watch() -> None:
        with contextlib.suppress(Exception):
            while True:
                pipe.recv()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="vf-train-parent").start()


def _serve_pool(config: dict[str, Any], workers: int, pipe: Any) -> None:
    """The embedded env server: a pool on a free loopback port, its address sent back on ``pipe``."""
    from verifiers.v1.serve.pool import serve_env

    def ready(address: str) -> None:
        pipe.send(address)
        _watch(pipe)

    serve_env(config, workers=workers, address="tcp://127.0.0.1:0", on_ready=ready)


class EnvServers:
    """The env servers of a run's environments, and the orchestrator's rollout function over them."""

    def __init__(self, *, startup_timeout: float = 300.0, busy_retry_s: float = 0.5) -> None:
        self.targets: dict[str, _Target] = {}
        self.startup_timeout = startup_timeout
        self.busy_retry_s = busy_retry_s
        self._mp = mp.get_context("spawn")
        self._watch: asyncio.Task | None = None

    @staticmethod
    def transport(env: Any, section: Any) -> str | list[str]:
        """``embedded``, ``in_process`` or the addresses of running servers, for ``section``."""
        server = getattr(section, "server", None)
        if server in (None, "", "auto"):  # classic and v1 environments alike (classic: verifiers.v1.serve.classic)
            return EMBEDDED
        return server

    def start(self, entries: Sequence[EnvEntry], sections: Sequence[Any]) -> None:
        """Start the embedded env servers (without waiting: :meth:`ready` does) and note the
        addresses of external ones, for every environment that does not run in process."""
        try:
            for entry, section in zip(entries, sections, strict=True):
                where = self.transport(entry.env, section)
                if where == IN_PROCESS:
                    continue
                if where == EMBEDDED:
                    parent, child = self._mp.Pipe()
                    process = self._mp.Process(target=_serve_pool, name=f"vf-env-server-{entry.name}",
                                               args=(server_config(entry.env, section), int(section.workers), child))
                    process.start()
                    child.close()
                    self.targets[entry.name] = _Target(entry.name, [], process=process, pipe=parent)
                else:
                    self.targets[entry.name] = _Target(entry.name, [where] if isinstance(where, str) else list(where))
                self.targets[entry.name].grouped = is_group_served(entry.env)
        except BaseException:
            self.stop_processes()
            raise

    def ready(self, *, log: Any = print) -> None:
        """Wait until every embedded env server has bound its address; connect a client to each."""
        from verifiers.v1.serve import EnvClient

        try:
            for target in self.targets.values():
                if target.process is None:
                    continue
                if not target.pipe.poll(self.startup_timeout):
                    raise TimeoutError(f"the env server of {target.name} was not ready within {self.startup_timeout:g} s")
                try:
                    target.addresses = [target.pipe.recv()]
                except EOFError:
                    raise RuntimeError(f"the env server of {target.name} exited before serving (exit code "
                                       f"{target.process.exitcode}; its log is above)") from None
                log(f"env server for {target.name}: {target.addresses[0]} (pid {target.process.pid})")
            for target in self.targets.values():
                target.clients = [EnvClient(a) for a in target.addresses]
        except BaseException:
            self.stop_processes()
            raise

    async def wait_ready(self, timeout: float = 300.0, *, health_interval_s: float = 5.0,
                         misses: int = 6) -> None:
        """Every env server answers ``health`` (an embedded one that exits fails the start); then a
        watch marks a server lost (its runs rescheduled) when an embedded pool exits or a server
        misses ``misses`` health checks in a row."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for target in self.targets.values():
            target.lost = loop.create_future()
            for c in target.clients:
                while not await c.health(timeout=1.0):
                    if target.process is not None and target.process.exitcode is not None:
                        raise RuntimeError(f"the env server of {target.name} exited with code "
                                           f"{target.process.exitcode} before serving (its env did not load: "
                                           f"see its log above)")
                    if loop.time() > deadline:
                        raise TimeoutError(f"env server {c.address} ({target.name}) did not answer health "
                                           f"within {timeout:g} s")
                    await asyncio.sleep(0.2)
        self._watch = loop.create_task(self._watch_servers(health_interval_s, misses))

    async def _watch_servers(self, interval: float, misses: int) -> None:
        for tick in itertools.count(1):
            await asyncio.sleep(1.0)
            for target in self.targets.values():
                if target.lost is None or target.lost.done():
                    continue
                if target.process is not None and target.process.exitcode is not None:
                    target.lost.set_exception(EnvInfraError(
                        f"the env server of {target.name} exited with code {target.process.exitcode}"))
                    continue
                if tick % max(1, round(interval)):
                    continue
                ok = await asyncio.gather(*(c.health(timeout=interval) for c in target.clients))
                target.misses = 0 if all(ok) else target.misses + 1
                if target.misses >= misses:
                    target.lost.set_exception(EnvInfraError(
                        f"env server(s) {', '.join(target.addresses)} of {target.name} did not answer "
                        f"health {misses} times in a row"))
            for target in self.targets.values():
                if target.lost is not None and target.lost.done():
                    target.lost.exception()  # retrieved: no "exception never retrieved" at exit

    def rollout_fn(self, fallback: Any = env_rollout_group) -> Any:
        """The orchestrator's rollout function: env servers where configured, ``fallback`` elsewhere."""

        async def rollout(entry: EnvEntry, row: dict[str, Any], n: int, client: Any, model: str,
                          sampling_args: dict[str, Any]) -> list[Any]:
            target = self.targets.get(entry.name)
            if target is None:
                return await fallback(entry, row, n, client, model, sampling_args)
            return await self.run_group(target, row, n, client, model, sampling_args)

        return rollout

    async def run_group(self, target: _Target, row: dict[str, Any], n: int, client: Any, model: str,
                        sampling_args: dict[str, Any]) -> list[Any]:
        from verifiers.v1.serve.client import client_config_data

        config = client_config_data(client)
        data = task_data(row)
        if target.grouped:  # one request, one episode of n traces: split into the n rollouts' states
            data[GROUP_KEY] = n
            if n > 1 and getattr(getattr(client, "config", None), "coalesce_samples", False):
                data[COALESCE_KEY] = True  # the worker coalesces the group's first requests, as in process
            episode = await self._episode(target, config, model, sampling_args, data)
            traces = list(episode.traces)
            if len(traces) != n:
                raise EnvInfraError(f"env server of {target.name}: asked for {n} rollouts, got {len(traces)} traces")
            return [episode_state(episode.model_copy(update={"traces": [t]}), row, i) for i, t in enumerate(traces)]
        runs = [asyncio.ensure_future(self._run_one(target, config, model, sampling_args, data, row, i))
                for i in range(n)]
        try:
            return list(await asyncio.gather(*runs))
        finally:
            for r in runs:  # one failed: the others are cancelled (their servers get a cancel)
                r.cancel()
            await asyncio.gather(*runs, return_exceptions=True)

    async def _run_one(self, target: _Target, config: dict[str, Any], model: str, sampling_args: dict[str, Any],
                       data: dict[str, Any], row: dict[str, Any], index: int) -> dict[str, Any]:
        episode = await self._episode(target, config, model, sampling_args, data)
        return episode_state(episode, row, index)

    async def _episode(self, target: _Target, config: dict[str, Any], model: str, sampling_args: dict[str, Any],
                       data: dict[str, Any]) -> Any:
        """One run on the target's servers: its episode (temperature checked), or EnvInfraError."""
        from verifiers.train.v1_envs import check_episode_temperature
        from verifiers.v1.serve import EnvServerError

        env_client = target.client()
        for attempt in range(20):
            try:
                episode = await self._or_lost(target, env_client.run(config, model, sampling_args, data))
                break
            except EnvServerError as exc:
                if str(exc).startswith(BUSY) and attempt < 19:  # backpressure: the pool is full, send later
                    await asyncio.sleep(self.busy_retry_s * (attempt + 1))
                    continue
                raise EnvInfraError(f"env server {env_client.address}: {exc}") from None
        infra = [e for e in episode.errors if e.type == INFRA]
        if infra:
            raise EnvInfraError(f"env server {env_client.address}: {infra[0].message}")
        check_episode_temperature(episode, sampling_args.get("temperature"))
        return episode

    @staticmethod
    async def _or_lost(target: _Target, coro: Any) -> Any:
        """``coro``'s result, unless the target's server is lost first (EnvInfraError)."""
        if target.lost is None:
            return await coro
        if target.lost.done():
            coro.close()
            raise target.lost.exception()  # type: ignore[misc]
        run = asyncio.ensure_future(coro)
        try:
            await asyncio.wait({run, target.lost}, return_when=asyncio.FIRST_COMPLETED)
            if run.done():
                return run.result()
            raise target.lost.exception()  # type: ignore[misc]
        finally:
            if not run.done():
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run

    async def check(self, timeout: float = 5.0) -> list[str]:
        """Addresses of env servers that do not answer ``health`` now."""
        pairs = [c for t in self.targets.values() for c in t.clients]
        ok = await asyncio.gather(*(c.health(timeout=timeout) for c in pairs), return_exceptions=True)
        return [c.address for c, up in zip(pairs, ok, strict=True) if up is not True]

    async def aclose(self) -> None:
        """Close every client, then stop the pools this run started (their workers with them)."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(BaseException):
                await self._watch
            self._watch = None
        for target in self.targets.values():
            for c in target.clients:
                with contextlib.suppress(Exception):
                    await c.close()
            target.clients = []
        self.stop_processes()

    def stop_processes(self) -> None:
        for target in self.targets.values():
            process = target.process
            if process is None:
                continue
            with contextlib.suppress(Exception):
                target.pipe.close()
            if process.is_alive():
                process.terminate()  # SIGTERM: the pool stops its workers, then exits
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            target.process = None
