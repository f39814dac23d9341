"""Training through env servers: the orchestrator sends each group's episodes to an env-server
pool (real ZMQ, worker processes) and trains on the token data of the episodes it gets back."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from verifiers.testing.scripted import FakeTokenizer, ScriptedServer, by_turn
from verifiers.train.orchestrator import EnvEntry, EnvInfraError, Orchestrator, OrchestratorConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).parent / "packages" / "vf_train_turns"
SAMPLING = {"max_tokens": 8, "temperature": 1.0, "logprobs": True, "extra_body": {"return_token_ids": True}}


class _Server:
    def __init__(self, srv, coalesce_samples=False):
        from verifiers.clients import ModelClient

        self.client = ModelClient(base_url=srv.base_url, coalesce_samples=coalesce_samples)
        self.model = srv.model
        self.base_url = srv.base_url
        self.healthy = True


def _entry(**section):
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.env_rows import env_rows

    sec = EnvSection(id=str(PACKAGE), name="turns", **section)
    env = load_env(sec)
    return EnvEntry("turns", env, 1.0, env_rows(env)), sec


def children() -> set[int]:
    """Live child processes of this process (zombies and multiprocessing's resource tracker, which
    lives as long as this process, excluded)."""
    out = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and \
                b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            out.add(int(pid))
    return out


def descendants(root: int) -> set[int]:
    found: set[int] = set()
    frontier = {root}
    while frontier:
        nxt = set()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) in frontier and fields[0] != "Z":
                nxt.add(int(pid))
        found |= nxt
        frontier = nxt
    return found


def alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        with_stat = Path(f"/proc/{p}/stat")
        if with_stat.exists() and with_stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            out.add(p)
    return out


async def test_the_orchestrator_trains_on_episodes_played_by_an_embedded_env_server_pool():
    from verifiers.train.env_servers import EnvServers

    entry, section = _entry(workers=2)
    before = children()
    seconds = iter(["a", "abc"] * 16)
    servers = EnvServers()
    with ScriptedServer(by_turn("hi", lambda req: next(seconds))) as srv:
        server = _Server(srv)
        servers.start([entry], [section])
        try:
            servers.ready(log=lambda _m: None)
            await servers.wait_ready(timeout=120)
            pool_pid = servers.targets["turns"].process.pid
            workers = descendants(pool_pid)
            assert len(workers) >= 2  # the pool's worker processes (and their helpers)
            orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=4, max_in_flight=1,
                                                                      async_steps=0, max_seq_len=4096),
                                SAMPLING, rollout_fn=servers.rollout_fn(), health_check=False)
            try:
                batch = await orch.next_batch(timeout=60)
            finally:
                await orch.stop()
        finally:
            await servers.aclose()
            await server.client.aclose()
            await entry.env.aclose()
    # nothing left: the pool process and every worker of it are gone
    assert children() == before
    assert not alive(workers)

    tok = FakeTokenizer
    assert len(batch.samples) == 4  # one per two-turn episode: the second turn extends the first's tokens
    assert sorted(s.reward for s in batch.samples) == [0.25, 0.25, 0.5, 0.5]
    for s in batch.samples:
        second = "a" if s.reward == 0.5 else "abc"
        first_prompt = tok.render_chat([{"role": "user", "content": f"Say {s.example_id}."}])
        prompt2 = first_prompt + "hi" + "<|user|>Once more.<|assistant|>"
        assert s.input_ids == tok.encode(prompt2 + second)
        n1, n2 = len(first_prompt), len(prompt2)
        assert s.loss_mask == [0] * n1 + [1, 1] + [0] * (n2 - n1 - 2) + [1] * len(second)
        expected = [tok.logprob(t, i) for i, t in enumerate(tok.encode("hi"))]
        expected2 = [tok.logprob(t, i) for i, t in enumerate(tok.encode(second))]
        assert s.inference_logprobs == [0.0] * n1 + expected + [0.0] * (n2 - n1 - 2) + expected2
        assert set(s.advantages) == {s.reward - 0.375}
    # the episodes came over the wire (not from this process's engine), with readable rollouts
    for _env, _ex, _v, state in batch.rollouts:
        assert type(state["episode"]).__name__.startswith("Episode")
        assert "[agent agent]" in state["completion"] and "Once more." in state["completion"]


async def test_a_pool_that_dies_mid_run_reschedules_its_groups_and_the_run_stops_after_the_retries():
    """An embedded pool killed while its episodes run: the groups are infrastructure failures
    (rescheduled, counted, never scored); once the retries are spent the run stops with one error."""
    from verifiers.train.env_servers import EnvServers

    entry, section = _entry()
    before = children()
    servers = EnvServers()

    async def slow(req):
        await asyncio.sleep(30)
        return "never"

    with ScriptedServer(slow) as srv:
        server = _Server(srv)
        servers.start([entry], [section])
        try:
            servers.ready(log=lambda _m: None)
            await servers.wait_ready(timeout=120)
            orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=2, max_in_flight=1,
                                                                      async_steps=0, max_infra_retries=1),
                                SAMPLING, rollout_fn=servers.rollout_fn(), health_check=False)
            try:
                batch_task = asyncio.ensure_future(orch.next_batch(timeout=60))
                await asyncio.sleep(1.0)
                servers.targets["turns"].process.kill()  # the env server goes away with runs in flight
                with pytest.raises(RuntimeError, match="env servers lost it 2 times"):
                    await batch_task
                assert orch.counters["rescheduled_infra"] == 1
                assert isinstance(orch._last_error, EnvInfraError) or orch.counters["errors"] >= 1
                assert not orch._buffer  # nothing was scored
            finally:
                await orch.stop()
        finally:
            await servers.aclose()
            await server.client.aclose()
            await entry.env.aclose()
    for _ in range(50):  # the pool's workers notice their broker's pipe closing and stop
        if children() == before:
            break
        await asyncio.sleep(0.1)
    assert children() == before


def test_env_server_addresses_in_the_config():
    from pydantic import ValidationError

    from verifiers.train.config import EnvSection
    from verifiers.train.env_servers import EnvServers

    one = EnvSection(id="x", server="tcp://10.0.0.5:5000")
    many = EnvSection(id="x", server=["tcp://a:5000", "tcp://b:5000"])
    assert EnvServers.transport(None, one) == "tcp://10.0.0.5:5000"
    assert EnvServers.transport(None, many) == ["tcp://a:5000", "tcp://b:5000"]
    assert EnvServers.transport(None, EnvSection(id="x", server="in_process")) == "in_process"
    with pytest.raises(ValidationError, match="an env-server address"):
        EnvSection(id="x", server="http://a:5000")
    with pytest.raises(ValidationError, match="at least one"):
        EnvSection(id="x", server=[])


async def test_a_classic_environment_trains_through_an_embedded_env_server_pool():
    """The same code path for a classic environment id (``digit-copy``): one request per group (the
    server scores the group together), its episode's traces split into the group's rollouts, each
    sample the prompt's tokens then the reply's, exactly as the server sent them. The inference
    client coalesces (as ``vf train``'s do), so the worker sends the group's identical first
    requests as one request with ``n = 8``, as the in-process orchestrator does."""
    from verifiers.train.config import EnvSection, load_env
    from verifiers.train.env_rows import env_rows
    from verifiers.train.env_servers import EnvServers

    section = EnvSection(id=str(ROOT / "examples" / "envs" / "digit_copy.py"), name="digits", args={"num_examples": 8},
                         server="embedded")
    env = load_env(section)
    entry = EnvEntry("digits", env, 1.0, env_rows(env))
    before = children()
    replies = iter(["7", "3"] * 16)
    servers = EnvServers()
    with ScriptedServer(lambda req: next(replies)) as srv:
        server = _Server(srv, coalesce_samples=True)
        servers.start([entry], [section])
        try:
            servers.ready(log=lambda _m: None)
            await servers.wait_ready(timeout=120)
            orch = Orchestrator([entry], [server], OrchestratorConfig(batch_groups=1, group_size=8, max_in_flight=1,
                                                                      async_steps=0, max_seq_len=4096,
                                                                      drop_no_signal=False),
                                SAMPLING, rollout_fn=servers.rollout_fn(), health_check=False)
            try:
                batch = await orch.next_batch(timeout=60)
            finally:
                await orch.stop()
        finally:
            await servers.aclose()
            await server.client.aclose()
    assert children() == before
    assert srv.request_count == 1 and srv.requests[0].body["n"] == 8 and len(batch.samples) == 8
    tok = FakeTokenizer
    (g,) = batch.groups
    row = entry.rows[g.example_index]
    prompt = tok.encode(tok.render_chat(row["prompt"]))
    drawn = []
    for s, (_e, _x, _v, state) in zip(batch.samples, batch.rollouts, strict=True):
        reply = "7" if s.loss_mask.count(1) and tok.decode(t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m) == "7" else "3"
        drawn.append(reply)
        assert s.input_ids == prompt + tok.encode(reply)
        assert s.loss_mask == [0] * len(prompt) + [1] * len(tok.encode(reply))
        assert s.inference_logprobs[len(prompt):] == [tok.logprob(t, i) for i, t in enumerate(tok.encode(reply))]
        assert s.reward == state["reward"] == float(reply == row["answer"])
    assert sorted(drawn) == ["3"] * 4 + ["7"] * 4  # each rollout took its own choice of the one request
