"""A pool of env-server worker processes behind one ROUTER (the same wire as one server).

The broker binds the client-facing address and starts ``workers`` processes, each an
:class:`~verifiers.v1.serve.server.EnvServer` on its own ipc socket in a private temporary
folder; it sends each ``run`` to the least busy live worker and relays its deltas and reply back
by request id. ``health`` is answered by the broker itself, with every worker's pid, state and
runs in flight.

* **Backpressure.** A worker takes at most ``max_concurrent`` runs; runs beyond what the live
  workers take wait in the broker's queue, and a run arriving with ``max_queued`` runs (or
  ``max_queued_bytes`` of payloads) already waiting is refused at once with a ``ServerBusy``
  error reply (the client sees an ``EnvServerError``).
* **Dead workers.** A worker that exits, or stops answering its heartbeat for
  ``health_timeout`` seconds, is killed and started again. Each of its runs in flight is sent
  again to another worker while it has ``reschedule`` attempts left, else answered as an episode
  failed with an ``InfraError`` (``error_kind`` infra: not scored, retried by ``--resume``).
* **Cancel.** A cancel of a queued run drops it; of a running one goes to its worker.
* **Bad input** gets an error reply (``protocol.check_request``; task data that does not validate
  is refused by the worker), and both keep serving.
* Workers watch a pipe from the broker and stop when it closes, so none outlives a killed broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import logging
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifiers.utils.async_utils import wait_for
from verifiers.v1.serve.protocol import (
    BUSY,
    DEFAULT_ADDRESS,
    DEFAULT_MAX_MESSAGE_BYTES,
    INFRA,
    REPLY,
    FrameIO,
    check_request,
    error_reply,
    frame_cap,
)
from verifiers.v1.wire import CancelResponse, RunResponse, pack, unpack

logger = logging.getLogger(__name__)

HEARTBEAT = b"__heartbeat__"

#: Seconds a worker whose pool is gone has to stop in order before it exits anyway.
PARENT_GONE_GRACE_S = 30.0


def _watch_parent(pipe: Any) -> None:
    def watch() -> None:
        with contextlib.suppress(Exception):
            while True:
                pipe.recv()
        os.kill(os.getpid(), signal.SIGTERM)
        # a worker whose main thread is held by sync code that swallows every interrupt must not
        # outlive its pool: past a grace period it goes without the orderly stop
        time.sleep(PARENT_GONE_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="vf-serve-parent").start()


def _freeze_heap() -> None:
    """In a process of its own, once it has loaded: move everything alive now (the env, its
    dataset, the imported modules) out of the cyclic collector's sight, so that a collection
    walks only the objects of the runs in flight, not the whole heap again and again."""
    gc.collect()
    gc.freeze()


def run_server(config: dict[str, Any], address: str, max_concurrent: int | None = None,
               max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, pipe: Any = None) -> None:  # fmt: skip
    """A worker process (or a lone server): serve until SIGTERM/SIGINT or the parent's pipe closes."""
    from verifiers.engine.threads import run_on_main_thread
    from verifiers.v1.serve.server import EnvServer

    # The env's sync code (hooks, tools, classic reward functions) runs on this process's main
    # thread, where the original runs it (run_on_main_thread); the loop runs in a helper thread,
    # so a signal reaches it through a handler set here.
    box: dict[str, Any] = {}

    def on_signal(signum: int, frame: Any) -> None:
        box["signalled"] = True
        loop, stop = box.get("loop"), box.get("stop")
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the server is done
                loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)

    async def main() -> None:
        server = EnvServer(config, address, max_concurrent=max_concurrent, max_message_bytes=max_message_bytes)
        stop = asyncio.Event()
        box["loop"], box["stop"] = asyncio.get_running_loop(), stop
        if box.get("signalled"):  # a signal that came before the loop did
            stop.set()
        serving = asyncio.ensure_future(server.serve(stop))
        await asyncio.sleep(0)
        _freeze_heap()
        if pipe is not None:
            pipe.send({"pid": os.getpid(), "address": server.address, "env": server.runs.env_id,
                       "task_type": server.runs.task_type, "kind": server.runs.kind})  # fmt: skip
            _watch_parent(pipe)
        await serving

    run_on_main_thread(main)


@dataclass
class _Worker:
    index: int
    address: str
    process: Any
    pipe: Any
    dealer: Any
    io: Any = None
    """The dealer's :class:`~verifiers.v1.serve.protocol.FrameIO` (non-blocking reads and sends)."""
    pid: int | None = None
    ready: bool = False
    runs: set[bytes] = field(default_factory=set)
    last_seen: float = field(default_factory=time.monotonic)
    last_ping: float = 0.0
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0
    idle_since: float = field(default_factory=time.monotonic)
    served: int = 0


@dataclass
class _Run:
    client_id: bytes
    rid: bytes
    """The client's own request id (the pool and its workers use one of their own)."""
    method: bytes
    payload: bytes
    worker: _Worker | None = None
    attempts: int = 0


class EnvServerPool:
    """``workers`` env-server processes for the env ``config`` behind ``address``."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        workers: int = 2,
        address: str = DEFAULT_ADDRESS,
        max_concurrent: int = 64,
        max_queued: int = 1024,
        reschedule: int = 1,
        health_interval: float = 2.0,
        health_timeout: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_queued_bytes: int = 1 << 30,
        min_workers: int | None = None,
        max_workers: int | None = None,
        idle_timeout: float = 60.0,
    ) -> None:
        import zmq
        import zmq.asyncio

        from verifiers.v1.serve.server import env_spec

        if workers < 1:
            raise ValueError("an env server pool needs at least one worker")
        self.elastic = min_workers is not None or max_workers is not None
        if self.elastic:
            low = 1 if min_workers is None else min_workers
            high = max(low, workers) if max_workers is None else max_workers
            if low < 1 or high < low:
                raise ValueError(f"an elastic pool needs 1 <= min_workers <= max_workers (got {low} and {high})")
            self.min_workers, self.max_workers = low, high
            workers = low
        else:
            self.min_workers = self.max_workers = workers
        self.idle_timeout = idle_timeout
        self.config = env_spec(config)
        self.num_workers = workers
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.reschedule = reschedule
        self.health_interval = health_interval
        self.health_timeout = health_timeout
        self.max_message_bytes = max_message_bytes
        self.max_queued_bytes = max_queued_bytes
        self._mp = mp.get_context("spawn")
        self._dir = tempfile.mkdtemp(prefix="vf-serve-")
        self.workers: list[_Worker] = []
        # runs by the pool's own id: a client names its runs with ids of its own choosing, so two
        # clients' ids never meet (and a client cannot cancel another's run by guessing its id)
        self.runs: dict[bytes, _Run] = {}
        self._ids: dict[tuple[bytes, bytes], bytes] = {}  # (client, its request id) -> pool id
        self._next_id = itertools.count()
        self.queue: collections.OrderedDict[bytes, _Run] = collections.OrderedDict()
        self._queued_bytes = 0
        self._forwarded: dict[bytes, tuple[bytes, bytes, _Worker]] = {}  # cancel's pool id -> (client, its id, worker)
        self._info: dict[str, Any] = {}
        self.restarts = 0
        self.grown = self.shrunk = 0
        self._retiring: list[tuple[_Worker, float]] = []
        self.ctx = zmq.asyncio.Context()
        self.frontend = self.ctx.socket(zmq.ROUTER)
        for opt, value in ((zmq.ROUTER_MANDATORY, 1), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0), (zmq.LINGER, 0),
                           (zmq.MAXMSGSIZE, frame_cap(max_message_bytes))):  # fmt: skip
            self.frontend.setsockopt(opt, value)
        self.frontend.bind(address)
        self._front = FrameIO(self.frontend, self._from_client)
        self.address = self.frontend.getsockopt_string(zmq.LAST_ENDPOINT)

    # --- workers -----------------------------------------------------------------------------

    def _start_worker(self, index: int, restarts: int = 0) -> _Worker:
        import zmq

        address = f"ipc://{self._dir}/w{index}-{restarts}"
        parent, child = self._mp.Pipe()
        process = self._mp.Process(
            target=run_server, name=f"vf-env-worker-{index}",
            args=(self.config, address, self.max_concurrent, self.max_message_bytes, child),
        )  # fmt: skip
        process.start()
        child.close()
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, 0)
        dealer.setsockopt(zmq.RCVHWM, 0)
        dealer.connect(address)
        worker = _Worker(index=index, address=address, process=process, pipe=parent, dealer=dealer, restarts=restarts)
        worker.io = FrameIO(dealer, lambda frames: self._from_worker(worker, frames))
        worker.io.start()
        return worker

    def _stop_worker(self, worker: _Worker, *, kill: bool = False) -> None:
        worker.io.stop()
        worker.dealer.close(0)
        with contextlib.suppress(Exception):
            worker.pipe.close()
        if worker.process.is_alive():
            (worker.process.kill if kill else worker.process.terminate)()
        worker.process.join(timeout=2 if kill else 10)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=5)
        with contextlib.suppress(OSError):
            os.unlink(worker.address.removeprefix("ipc://"))

    async def _lost(self, worker: _Worker, why: str) -> None:
        """``worker`` is gone: start its replacement and settle its runs (again elsewhere, or infra)."""
        logger.warning("env worker %d (pid %s) %s; starting it again", worker.index, worker.pid, why)
        self._stop_worker(worker, kill=True)
        replacement = self._start_worker(worker.index, worker.restarts + 1)
        self.workers[self.workers.index(worker)] = replacement
        self.restarts += 1
        for pid in [r for r, (_, _, w) in self._forwarded.items() if w is worker]:
            client_id, rid, _ = self._forwarded.pop(pid)
            self._send(client_id, rid, pack(CancelResponse(cancelled=True).model_dump()))
        for pid in sorted(worker.runs):
            run = self.runs[pid]
            run.worker = None
            if run.attempts <= self.reschedule:
                self._enqueue(pid, run, front=True)
            else:
                self._settle(pid)
                self._send(run.client_id, run.rid, self._infra_reply(run, f"env worker {worker.index} (pid {worker.pid}) {why} during this run"))
        worker.runs.clear()

    def _infra_reply(self, run: _Run, message: str) -> bytes:
        try:
            task_data = unpack(run.payload).get("task_data") or {}
        except Exception:
            task_data = {}
        head = {
            "id": uuid.uuid4().hex, "env": {"id": self._info.get("env", ""), "name": None},
            "task": {"type": self._info.get("task_type", ""), "data": task_data}, "ok": False,
            "is_timeout": False, "errors": [{"type": INFRA, "message": message}],
        }  # fmt: skip
        return pack(RunResponse(head=head, traces=[]).model_dump(mode="python"))

    def _greeted(self, worker: _Worker, hello: dict[str, Any], now: float) -> None:
        """``worker`` said it serves (its hello: pid, env, task type)."""
        worker.pid, worker.ready, worker.last_seen, worker.idle_since = hello["pid"], True, now, now
        self._info = hello

    async def _maintain(self) -> None:
        now = time.monotonic()
        for worker in list(self.workers):
            if not worker.ready and worker.pipe.poll():
                with contextlib.suppress(EOFError, OSError):
                    self._greeted(worker, worker.pipe.recv(), now)
            if worker.process.exitcode is not None:
                await self._lost(worker, f"exited with code {worker.process.exitcode}")
                continue
            if worker.ready and now - worker.last_seen > self.health_timeout:
                await self._lost(worker, f"did not answer its heartbeat for {self.health_timeout:.0f}s")
                continue
            if worker.ready and now - worker.last_ping >= self.health_interval:
                worker.last_ping = now
                worker.io.send_now([HEARTBEAT, b"health", pack({})])
        if self.elastic:
            self._scale(now)
        self._reap(now)
        self._dispatch()

    # --- elastic pools -----------------------------------------------------------------------

    def _scale(self, now: float) -> None:
        """Grow by one worker while runs wait that the workers starting now will not take;
        retire one worker idle for ``idle_timeout`` while more than ``min_workers`` are up."""
        starting = sum(1 for w in self.workers if not w.ready)
        if self.queue and len(self.workers) < self.max_workers and len(self.queue) > starting * self.max_concurrent:
            used = {w.index for w in self.workers} | {w.index for w, _ in self._retiring}
            index = next(i for i in range(len(used) + 1) if i not in used)
            self.workers.append(self._start_worker(index))
            self.grown += 1
            logger.info("env server pool: %d runs wait, started worker %d (%d workers)", len(self.queue), index, len(self.workers))
            return
        if len(self.workers) <= self.min_workers or self.queue:
            return
        idle = [w for w in self.workers if w.ready and not w.runs and now - w.idle_since >= self.idle_timeout]
        if idle:
            worker = max(idle, key=lambda w: w.index)
            self.workers.remove(worker)
            self._retire(worker, now)
            self.shrunk += 1
            logger.info("env server pool: worker %d idle for %.0fs, stopped (%d workers)", worker.index, self.idle_timeout, len(self.workers))

    def _retire(self, worker: _Worker, now: float) -> None:
        """Stop an idle worker without waiting for it: it closes its env (its shared toolsets
        with it) on SIGTERM; :meth:`_reap` collects it, and kills it after ``health_timeout``."""
        worker.io.stop()
        worker.dealer.close(0)
        if worker.process.is_alive():
            worker.process.terminate()
        self._retiring.append((worker, now))

    def _reap(self, now: float) -> None:
        for entry in list(self._retiring):
            worker, since = entry
            if worker.process.is_alive() and now - since < self.health_timeout:
                continue
            if worker.process.is_alive() and now == float("inf"):  # the pool closes: a last wait
                worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.kill()
            worker.process.join(timeout=5)
            with contextlib.suppress(Exception):
                worker.pipe.close()
            with contextlib.suppress(OSError):
                os.unlink(worker.address.removeprefix("ipc://"))
            self._retiring.remove(entry)

    # --- routing -----------------------------------------------------------------------------

    def _send(self, client_id: bytes, rid: bytes, data: bytes, kind: bytes = REPLY) -> None:
        with contextlib.suppress(Exception):
            self._front.send_now([client_id, rid, kind, data])

    def _settle(self, pid: bytes) -> _Run:
        """The run ``pid`` is answered: forget it."""
        run = self.runs.pop(pid)
        self._ids.pop((run.client_id, run.rid), None)
        return run

    def _dispatch(self) -> None:
        while self.queue:
            live = [w for w in self.workers if w.ready and len(w.runs) < self.max_concurrent]
            if not live:
                return
            rid, run = self.queue.popitem(last=False)
            self._queued_bytes -= len(run.payload)
            worker = min(live, key=lambda w: len(w.runs))
            run.worker, run.attempts = worker, run.attempts + 1
            worker.runs.add(rid)
            worker.io.send_now([rid, run.method, run.payload])

    def _status(self) -> bytes:
        workers = [{"index": w.index, "pid": w.pid, "ready": w.ready, "alive": w.process.is_alive(),
                    "running": len(w.runs), "served": w.served} for w in self.workers]  # fmt: skip
        return pack({"success": True, "error": None, "workers": workers, "running": sum(len(w.runs) for w in self.workers),
                     "queued": len(self.queue), "queued_bytes": self._queued_bytes, "restarts": self.restarts,
                     "elastic": self.elastic, "min_workers": self.min_workers, "max_workers": self.max_workers,
                     "grown": self.grown, "shrunk": self.shrunk, "retiring": len(self._retiring)})  # fmt: skip

    def _from_client(self, frames: list[bytes]) -> None:
        checked = check_request(frames, self.max_message_bytes)
        if len(checked) == 3:
            self._send(checked[0], checked[1], checked[2])
            return
        client_id, rid, method, payload = checked
        if method == b"health":
            self._send(client_id, rid, self._status())
            return
        if (client_id, rid) in self._ids:
            self._send(client_id, rid, error_reply("malformed request: request_id already in flight"))
            return
        if method == b"cancel":
            try:
                target = str(unpack(payload).get("request_id", "")).encode()
            except Exception as exc:
                self._send(client_id, rid, error_reply(f"{type(exc).__name__}: cancel payload: {exc}"))
                return
            pid = self._ids.get((client_id, target))  # the sender's own runs only
            run = self.runs.get(pid) if pid is not None else None
            if run is None or pid is None:
                self._send(client_id, rid, pack(CancelResponse(cancelled=False).model_dump()))
            elif run.worker is None:  # still queued: it never starts
                self._queued_bytes -= len(self.queue.pop(pid).payload)
                self._settle(pid)
                self._send(run.client_id, run.rid, error_reply("Cancelled: the run was cancelled before it started"))
                self._send(client_id, rid, pack(CancelResponse(cancelled=True).model_dump()))
            else:
                cancel_id = b"c%d" % next(self._next_id)
                self._forwarded[cancel_id] = (client_id, rid, run.worker)
                run.worker.io.send_now([cancel_id, method, pack({"request_id": pid.decode()})])
            return
        free = any(w.ready and len(w.runs) < self.max_concurrent for w in self.workers)
        queued_bytes = self._queued_bytes
        if not free and (len(self.queue) >= self.max_queued or queued_bytes + len(payload) > self.max_queued_bytes):
            self._send(client_id, rid, error_reply(
                f"{BUSY}: {sum(len(w.runs) for w in self.workers)} runs in flight and {len(self.queue)} queued "
                f"({queued_bytes} bytes; the pool queues at most {self.max_queued} runs, {self.max_queued_bytes} bytes); "
                "send again later"))  # fmt: skip
            return
        pid = b"r%d" % next(self._next_id)
        self._ids[(client_id, rid)] = pid
        self.runs[pid] = run = _Run(client_id, rid, method, payload)
        self._enqueue(pid, run)
        self._dispatch()

    def _enqueue(self, rid: bytes, run: _Run, *, front: bool = False) -> None:
        self.queue[rid] = run
        self._queued_bytes += len(run.payload)
        if front:
            self.queue.move_to_end(rid, last=False)

    def _from_worker(self, worker: _Worker, frames: list[Any]) -> None:
        rid, kind, data = frames[:3]
        worker.last_seen = time.monotonic()
        rid_b = rid
        if rid_b == HEARTBEAT:
            return
        if rid_b in self._forwarded:
            client_id, client_rid, _ = self._forwarded.pop(rid_b)
            self._send(client_id, client_rid, data)
            return
        run = self.runs.get(rid_b)
        if run is None or run.worker is not worker:
            return  # a run already settled (its worker was replaced)
        if kind == REPLY:
            self._settle(rid_b)
            worker.runs.discard(rid_b)
            worker.served += 1
            if not worker.runs:
                worker.idle_since = time.monotonic()
        self._send(run.client_id, run.rid, data, kind)
        if kind == REPLY:
            self._dispatch()

    # --- the loop ----------------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event | None = None, *, startup_timeout: float = 300.0,
                    on_ready: Callable[[str], Any] | None = None) -> None:  # fmt: skip
        """Start the workers and route until ``stop`` is set; stops every worker on exit. A worker
        that exits before the first one is ready (an env that does not load) fails the start at
        once; ``on_ready(address)`` is called once a worker serves."""
        stop = stop or asyncio.Event()
        self.workers = [self._start_worker(i) for i in range(self.num_workers)]
        try:
            deadline = time.monotonic() + startup_timeout
            while not any(w.ready for w in self.workers):
                for w in self.workers:
                    hello = None
                    if w.pipe.poll():  # its hello, or the end of a pipe whose process is exiting
                        with contextlib.suppress(EOFError, OSError):
                            hello = w.pipe.recv()
                    if hello is not None:
                        self._greeted(w, hello, time.monotonic())
                        continue
                    if w.process.exitcode is not None or w.pipe.closed or not w.process.is_alive():
                        w.process.join(timeout=10)
                        raise RuntimeError(f"env worker {w.index} exited with code {w.process.exitcode} before serving "
                                           "(its env did not load: see its log above)")  # fmt: skip
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no env worker was ready within {startup_timeout}s")
                await asyncio.sleep(0.05)
            logger.info("env server pool on %s: %d workers", self.address, self.num_workers)
            if on_ready is not None:
                on_ready(self.address)
            self._front.start()  # frames are routed as they arrive (FrameIO callbacks)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await wait_for(stop.wait(), 0.1)
                await self._maintain()
        finally:
            self.close()

    def close(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(Exception):
                self._stop_worker(worker)
        self.workers = []
        self._reap(float("inf"))
        self._front.stop()
        self.frontend.close(0)
        self.ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)


def serve_env(
    config: dict[str, Any] | str,
    *,
    workers: int = 1,
    address: str = DEFAULT_ADDRESS,
    max_concurrent: int = 64,
    max_queued: int = 1024,
    reschedule: int = 1,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    health_interval: float = 2.0,
    health_timeout: float = 30.0,
    max_queued_bytes: int = 1 << 30,
    min_workers: int | None = None,
    max_workers: int | None = None,
    idle_timeout: float = 60.0,
    on_ready: Any = None,
) -> None:
    """Serve the env ``config`` (an ``[env]`` table) until SIGTERM/SIGINT: a pool of ``workers``
    processes behind ``address`` (loopback by default). ``on_ready(address)`` is called with the
    bound address (a ``:0`` port resolved) once a worker serves; an env that does not load fails
    the start at once (a ``RuntimeError`` naming the worker's exit code). A worker is pinged every ``health_interval`` seconds
    and replaced when it has been silent for ``health_timeout``."""

    async def main() -> None:
        pool = EnvServerPool(config, workers=workers, address=address, max_concurrent=max_concurrent, max_queued=max_queued,
                             reschedule=reschedule, max_message_bytes=max_message_bytes, health_interval=health_interval,
                             health_timeout=health_timeout, max_queued_bytes=max_queued_bytes, min_workers=min_workers,
                             max_workers=max_workers, idle_timeout=idle_timeout)  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        _freeze_heap()
        await pool.serve(stop, on_ready=on_ready)

    asyncio.run(main())
