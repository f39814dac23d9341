"""The env-server client: one DEALER socket read as frames arrive (``protocol.FrameIO``), a future per request.

A run's ``delta`` frames are applied to its :class:`~verifiers.v1.wire.EpisodeAssembly` as they
land; the ``reply`` closes the request, and the assembled record is validated once into a
:class:`~verifiers.v1.episode.WireEpisode`. A run whose caller is cancelled sends the server a
``cancel``, so the episode stops spending model calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import ConfigDict

from verifiers.utils.async_utils import wait_for
from verifiers.v1.serve.protocol import DEFAULT_ADDRESS, DELTA, FrameIO
from verifiers.v1.types import SamplingConfig
from verifiers.v1.wire import (
    BaseRequest,
    BaseResponse,
    CancelRequest,
    CancelResponse,
    EpisodeAssembly,
    HealthRequest,
    HealthResponse,
    RunRequest,
    RunResponse,
    pack,
    unpack,
)

logger = logging.getLogger(__name__)
R = TypeVar("R", bound=BaseResponse)
RECV_BURST = 256
"""Frames read in one go before the receive loop lets the event loop run."""
INLINE_VALIDATE_BYTES = 128 * 1024
"""An episode whose frames are smaller is validated on the event loop (a thread hand-off costs
more than the validation); a larger one in a thread, so the loop keeps its latency."""


class _Status(HealthResponse):
    model_config = ConfigDict(extra="allow")


class EnvServerError(RuntimeError):
    """The server answered a request with an error (``error``: its message)."""


def client_config_data(client: Any) -> dict[str, Any]:
    """The client config a ``run`` carries, in the original's shape (it validates it as its
    ``ClientConfig``): from our ``ClientConfig`` / ``ModelClient``, a dict of either's fields, or
    a base-URL string. A literal ``api_key`` never goes on the wire: name a variable the server's
    environment holds (``api_key_var``, which the server must be allowed to hand out:
    ``vf serve-env --allow-env``)."""
    if isinstance(client, str):
        fields: dict[str, Any] = {"base_url": client}
    elif isinstance(client, Mapping):
        fields = dict(client)
    else:
        config = getattr(client, "config", client)
        fields = config.model_dump() if hasattr(config, "model_dump") else {}
        if not fields:
            raise TypeError(f"expected a ClientConfig, ModelClient, dict or base-URL string, got {type(client).__name__}")
    timeout = fields.get("timeout")
    out: dict[str, Any] = {
        "type": fields.get("type", "eval"),
        "base_url": fields.get("base_url") or "http://127.0.0.1:8000/v1",
        # a client that names no key variable asks for none: never the server's OPENAI_API_KEY sent
        # to an endpoint that did not ask for it (the original reads an unset name as no key)
        "api_key_var": fields.get("api_key_var") or "",
        "headers": dict(fields.get("headers") or {}),
        "headers_from_env": dict(fields.get("headers_from_env") or {}),
    }
    if isinstance(timeout, dict):
        out["timeout"] = timeout
    elif isinstance(timeout, int | float):
        out["timeout"] = {"connect": 30.0, "read": float(timeout), "write": None, "pool": None}
    return out


class EnvClient:
    def __init__(self, address: str = DEFAULT_ADDRESS) -> None:
        import zmq
        import zmq.asyncio

        self.address = address
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.DEALER)
        for opt, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.socket.setsockopt(opt, value)
        self.socket.connect(address)
        self._io = FrameIO(self.socket, self._frame, RECV_BURST)
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._deltas: dict[str, Callable[[bytes], None]] = {}
        self._cancels: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _frame(self, frames: list[bytes]) -> None:
        try:
            if len(frames) != 3:
                raise ValueError(f"expected [request_id, kind, data], got {len(frames)} frames")
            rid, kind, data = frames[0].decode(), frames[1], frames[2]
            if kind == DELTA:
                on_delta = self._deltas.get(rid)
                if on_delta is not None:
                    on_delta(data)
                return
            future = self._pending.pop(rid, None)
            if future is not None and not future.done():
                future.set_result(data)
        except Exception:  # one bad frame ends nobody's request but its own
            logger.warning("dropped a malformed env-server frame", exc_info=True)

    async def _send(self, frames: list[bytes]) -> None:
        try:
            await self._io.send(frames)
        except Exception as exc:  # zmq.Again after its patience: no pipe to the server
            raise EnvServerError(f"could not queue a request for {self.address}: {exc}") from None

    async def _request(self, request: BaseRequest, response_type: type[R], *, timeout: float | None = None,
                       on_delta: Callable[[bytes], None] | None = None, request_id: str | None = None) -> R:  # fmt: skip
        self._io.start()
        rid = request_id or uuid.uuid4().hex
        if rid in self._pending:  # its reply could not be told from the other's
            raise ValueError(f"request id {rid!r} is already in flight on this client")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        if on_delta is not None:
            self._deltas[rid] = on_delta
        try:
            await self._send([rid.encode(), request.method.encode(), pack(request.model_dump(mode="json"))])
            data = await wait_for(future, timeout)
        except asyncio.CancelledError:
            if request.method == RunRequest.method:  # tell the server to stop the episode
                task = asyncio.ensure_future(self._send_cancel(rid))
                self._cancels.add(task)
                task.add_done_callback(self._cancels.discard)
            raise
        finally:
            self._pending.pop(rid, None)
            self._deltas.pop(rid, None)
        response = response_type.model_validate(unpack(data))
        if not response.success:
            raise EnvServerError(response.error or "the env server failed the request")
        return response

    async def _send_cancel(self, run_id: str) -> None:
        with contextlib.suppress(Exception):
            payload = pack(CancelRequest(request_id=run_id).model_dump(mode="json"))
            await self._send([uuid.uuid4().hex.encode(), b"cancel", payload])

    async def health(self, timeout: float = 2.0) -> bool:
        """Whether the server answers ``health`` within ``timeout`` seconds."""
        try:
            return (await self._request(HealthRequest(), HealthResponse, timeout=timeout)).success
        except (TimeoutError, EnvServerError):
            return False

    async def status(self, timeout: float = 2.0) -> dict[str, Any]:
        """The server's ``health`` reply with what it adds (a pool: its workers, runs in flight, queued)."""
        response = await self._request(HealthRequest(), _Status, timeout=timeout)
        return {"success": response.success, **(response.model_extra or {})}

    async def wait_for_server_startup(self, timeout: float = 120.0, interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.health(timeout=min(max(interval, 0.1), 2.0)):
                return
            await asyncio.sleep(interval)
        raise TimeoutError(f"env server at {self.address} did not answer health within {timeout}s")

    async def cancel(self, request_id: str, timeout: float | None = 10.0) -> bool:
        """Cancel the run sent as ``request_id``; whether it was still running."""
        return (await self._request(CancelRequest(request_id=request_id), CancelResponse, timeout=timeout)).cancelled

    async def run(self, client: Any, model: str, sampling: SamplingConfig | Mapping[str, Any] | None, task_data: dict[str, Any], *,
                  on_delta: Callable[[dict[str, Any]], None] | None = None, request_id: str | None = None,
                  validate: bool = True) -> Any:  # fmt: skip
        """One episode of the task ``task_data`` (a task's dumped data), played by the server
        against ``client`` (where the model is: a ``ClientConfig``, ``ModelClient``, dict or base
        URL); the assembled :class:`~verifiers.v1.episode.WireEpisode`. ``on_delta`` sees each
        trace delta as it lands. ``validate=False`` returns the assembled episode record (the
        wire's dict) without building the models: about two thirds of the client's cost per
        episode (``benchmarks/serve.py --codecs``), for a caller that reads a few fields."""
        from verifiers.v1.episode import WireEpisode

        assembly = EpisodeAssembly()
        size = 0

        def apply(data: bytes) -> None:
            nonlocal size
            size += len(data)
            delta = unpack(data)
            assembly.apply(delta)
            if on_delta is not None:
                on_delta(delta)

        sampling = sampling if isinstance(sampling, SamplingConfig) else SamplingConfig.model_validate(dict(sampling or {}))
        request = RunRequest(task_data=dict(task_data), client=client_config_data(client), model=model, sampling=sampling)
        response = await self._request(request, RunResponse, on_delta=apply, request_id=request_id)
        if response.head is None:
            raise EnvServerError("the env server's run reply has no episode head")
        record = assembly.finish(response.head, response.traces)
        if not validate:
            return record
        if size < INLINE_VALIDATE_BYTES:  # a small episode validates in well under a millisecond
            return WireEpisode.model_validate(record)
        return await asyncio.to_thread(WireEpisode.model_validate, record)  # a long one off the event loop

    async def close(self) -> None:
        self._io.stop()
        while self._cancels:
            with contextlib.suppress(BaseException):
                await self._cancels.pop()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EnvServerError("the env client was closed"))
        self._pending.clear()
        self.socket.close(0)
        self.ctx.term()
