"""``verifiers.v1.serve.protocol.FrameIO``: every frame is read, in slices that let the loop run,
and a send made while a read was pending does not strand the frames that arrive after it."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from verifiers.v1.serve.protocol import FrameIO


def _pair(ctx: zmq.asyncio.Context, name: str) -> tuple[zmq.asyncio.Socket, zmq.asyncio.Socket]:
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for s in (router, dealer):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
    router.bind(f"inproc://{name}")
    dealer.connect(f"inproc://{name}")
    return router, dealer


@pytest.mark.asyncio
async def test_a_burst_is_read_whole_in_slices_and_replies_are_not_stranded():
    ctx = zmq.asyncio.Context()
    router, dealer = _pair(ctx, "frameio")
    got: list[bytes] = []
    slices: list[int] = []  # frames read when the probe ran: the loop ran between slices
    done = asyncio.Event()
    total = 2000

    def on_dealer(frames: list[bytes]) -> None:
        got.append(frames[0])
        if len(got) == total:
            done.set()

    io = FrameIO(dealer, on_dealer, burst=256)  # with one unbounded read the probe would see 0, then 2000
    io.start()
    peer: list[bytes] = []
    server = FrameIO(router, lambda frames: peer.append(frames[0]))
    server.start()
    try:
        await io.send([b"hello"])  # the router learns the dealer's identity
        for _ in range(200):
            if peer:
                break
            await asyncio.sleep(0.01)
        assert peer, "the router never read the dealer's frame"
        for i in range(total):
            server.send_now([peer[0], str(i).encode()])

        async def probe() -> None:
            while not done.is_set():
                slices.append(len(got))
                await asyncio.sleep(0)

        prober = asyncio.ensure_future(probe())
        await asyncio.wait_for(done.wait(), 10)
        await prober
        assert got == [str(i).encode() for i in range(total)]
        assert any(0 < n < total for n in slices), "the loop never ran while the burst was read"
        # a send on the dealer after everything was read, then one more frame back: still read
        await io.send([b"again"])
        server.send_now([peer[0], b"last"])
        for _ in range(200):
            if got[-1] == b"last":
                break
            await asyncio.sleep(0.01)
        assert got[-1] == b"last"
    finally:
        io.stop()
        server.stop()
        router.close(0)
        dealer.close(0)
        ctx.term()
