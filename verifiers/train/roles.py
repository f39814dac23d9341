"""The orchestrator and the trainer as separate processes (or machines), sharing the run folder.

    vf train CONFIG --output RUN --role orchestrator                       # environments + servers
    torchrun --nproc_per_node N -m verifiers.train.cli CONFIG --output RUN --role trainer

The orchestrator process loads the environments, starts (or connects to) the inference servers,
keeps rollout groups in flight, evaluates before and after the SFT warm start, and writes one batch
per step; it applies every policy version the trainer publishes to every server (filesystem path:
reload; NCCL path: the trainer already sent the weights, the orchestrator only moves its version).
The trainer (any number of ``torchrun`` ranks) trains on the batches, publishes weights, writes the
metrics, checkpoints (with the orchestrator's state that came with the batch) and the summary.
Environment work (tool calls, sandboxes, math-verify) thus never competes with the trainer's Python
thread. The channel is :mod:`verifiers.train.exchange`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from verifiers.train.checkpoint import latest_checkpoint, load_checkpoint
from verifiers.train.config import TrainConfig, load_env
from verifiers.train.env_rows import close_envs, env_rows, eval_record
from verifiers.train.exchange import Exchange, PeerError
from verifiers.train.inference import InferenceServer, launch_vllm_servers, place_servers
from verifiers.train.metrics import MetricsLog
from verifiers.train.orchestrator import EnvEntry, Orchestrator, RolloutGroupFn, env_rollout_group
from verifiers.train.samples import Sample


class RemoteOrchestrator:
    """The trainer's view of an orchestrator process: what :class:`verifiers.train.loop.Run` asks of
    an in-process :class:`~verifiers.train.orchestrator.Orchestrator`, through the run folder."""

    generating = False  # the trainer cannot see the other process's generation: no elastic threads

    def __init__(self, exchange: Exchange, run_dir: str | Path, *, log: Callable[[str], None] | None = None) -> None:
        self.ex = exchange
        self.run_dir = Path(run_dir)
        self.log = log
        self.version = 0
        self.batches_out = 0
        self._state: dict[str, Any] = {}
        self._metrics: MetricsLog | None = None

    async def server_urls(self) -> list[str]:
        """Root URLs of the inference servers (the NCCL sender talks to them)."""
        data = await self.ex.wait_for("servers.json", what="the servers' URLs", log=self.log)
        assert data is not None
        return list(data["root_urls"])

    async def next_batch(self) -> Any:
        step = self.batches_out + 1
        data = await self.ex.wait_for(f"batch_{step}.json", what=f"batch {step}", log=self.log)
        assert data is not None
        self.batches_out = step
        self._state = dict(data["state"])
        if data.get("records"):
            self._metrics = self._metrics or MetricsLog(self.run_dir)
            for rec in data["records"]:  # the orchestrator's eval lines, in the one metrics file
                self._metrics.write(rec)
        samples = [Sample.from_dict(d) for d in data["samples"]]
        return SimpleNamespace(samples=samples, metrics=dict(data["metrics"]), groups=None)

    async def update_weights(self, path: str | None, version: int) -> float:
        """Tell the orchestrator that policy ``version`` is ready (in ``path``, or already in the
        servers by NCCL); it updates the servers and its own version."""
        self.ex.put(f"weights_{version}.json", {"version": version, "path": path})
        self.version = version
        return 0.0

    def state_dict(self) -> dict[str, Any]:
        """The orchestrator's state as of the last batch, for the checkpoint of that step (groups it
        had in flight or buffered are rescheduled on resume, like the in-process orchestrator's)."""
        return {**self._state, "version": self.version, "batches_out": self.batches_out}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self._state = dict(sd)
        self.version = int(sd.get("version", 0))
        self.batches_out = int(sd.get("batches_out", 0))

    async def stop(self) -> None:
        pass


class VersionLog:
    """``<run>/orchestrator.jsonl``: one line per policy version applied, with what each server reports."""

    def __init__(self, path: Path, keep: bool) -> None:
        self.path = path
        if not keep:
            path.unlink(missing_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        import json

        with self.path.open("a") as f:
            f.write(json.dumps({**record, "time": time.time()}) + "\n")


def _absolute(path: str | Path) -> Path:
    return Path(path).resolve()


async def _until_peer(coro: Any, ex: Exchange, also: asyncio.Task | None = None) -> Any:
    """Await ``coro`` while watching the trainer (and the task ``also``): None if the trainer finishes
    first (early stop); its failure or silence raised as :class:`PeerError`, a failure of ``also``
    (the version watcher: nothing can come while updates fail) raised as it is."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.2)
            if done:
                return task.result()
            if also is not None and also.done():
                also.result()
            if ex.peer_done():
                return None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def run_orchestrator(cfg: TrainConfig, *, output: str | Path | None = None, resume: bool = False,
                           rollout_fn: RolloutGroupFn | None = None, servers: list[Any] | None = None,
                           console: Console | None = None) -> dict[str, Any]:
    """The orchestrator process of a split run; returns what it did (batches written, versions applied)."""
    console = console or Console(stderr=True)
    out = _absolute(output or cfg.run.output)
    env_servers: Any = None
    ex = Exchange(out, "orchestrator", peer_timeout=cfg.run.peer_timeout_s).start()
    console.print(f"orchestrator: run folder {out}")
    own = servers is None
    servers = list(servers or [])
    orch: Orchestrator | None = None
    watcher: asyncio.Task | None = None
    applied: list[int] = []
    written = 0
    error: BaseException | None = None
    envs: list[EnvEntry] = []
    try:
        for e in cfg.env:
            env = load_env(e)
            envs.append(EnvEntry(e.display_name, env, e.ratio, env_rows(env)))
        if not envs:
            raise ValueError("no environment configured: add an [[env]] table with an id")
        if rollout_fn is None:  # env servers play the episodes (they start while the trainer starts)
            from verifiers.train.env_servers import EnvServers

            env_servers = EnvServers()
            env_servers.start(envs, cfg.env)
            rollout_fn = env_servers.rollout_fn(env_rollout_group)
        # The trainer writes the model (model.tiny) before its first heartbeat: wait for it.
        while ex.peer_state() is None:
            await asyncio.sleep(ex.poll_s)
        if not servers:
            if cfg.inference.urls:
                servers = [InferenceServer(u, cfg.inference.model, coalesce_samples=cfg.inference.coalesce_samples,
                                           timeout=cfg.inference.request_timeout_s)
                           for u in cfg.inference.urls]
            else:
                variant, devices = place_servers(cfg.inference.num_servers, cfg.inference.extra_args,
                                                 cfg.inference.server_devices, cfg.inference.trainer_devices or 0)
                console.print(f"orchestrator: starting {cfg.inference.num_servers} vLLM server(s)")
                servers = await asyncio.to_thread(
                    launch_vllm_servers, _absolute(cfg.model.path), cfg.inference.num_servers,
                    max_model_len=cfg.inference.max_model_len, extra_args=cfg.inference.extra_args,
                    log_dir=out / "logs", coalesce_samples=cfg.inference.coalesce_samples, devices=devices,
                    weight_update=cfg.inference.weight_update, variant=variant,
                    request_timeout=cfg.inference.request_timeout_s)
        if env_servers is not None:
            env_servers.ready(log=console.print)
            await env_servers.wait_ready()
        ex.put("servers.json", {"root_urls": [s.root_url for s in servers], "base_urls": [s.base_url for s in servers],
                                "model": servers[0].model})
        orch = Orchestrator(envs, servers, cfg.orchestrator, cfg.sampling.to_args(), rollout_fn=rollout_fn,
                            health_check=True)
        start = 0
        records: list[dict[str, Any]] = []
        ckpt = latest_checkpoint(out) if resume else None
        updates = cfg.inference.weight_update != "none"  # "none": servers keep their weights, no versions
        log = VersionLog(out / "orchestrator.jsonl", keep=ckpt is not None)
        if ckpt is not None:
            state = load_checkpoint(ckpt)["orchestrator"] if (ckpt / "orchestrator.json").exists() else {}
            orch.load_state_dict(state)
            start = int(state.get("version", 0))

        async def apply(version: int) -> bool:
            data = await ex.wait_for(f"weights_{version}.json", what=f"policy version {version}",
                                     log=console.print, stop_if_done=True)
            if data is None:
                return False
            t0 = time.perf_counter()
            await orch.update_weights(data.get("path"), version)
            dt = time.perf_counter() - t0
            # Every server must now report this version (GET /weight_info): checked, and logged.
            served = [await s.weight_version() for s in servers if hasattr(s, "weight_version") and updates]
            if any(v != str(version) for v in served):
                raise RuntimeError(f"after the update to policy version {version} the servers report {served}")
            applied.append(version)
            log.write({"version": version, "served": served, "update_s": dt, "path": data.get("path")})
            console.print(f"orchestrator: servers serve policy version {version} ({dt:.2f} s)")
            return True

        if ckpt is not None:
            await _until_peer(apply(start), ex)  # the trainer republishes the resumed policy first
        elif cfg.sft.steps:
            records.append(await eval_record(envs[0], servers[0], rollout_fn, cfg, "initial", cfg.run.eval_groups))
            await _until_peer(apply(0), ex)
            records.append(await eval_record(envs[0], servers[0], rollout_fn, cfg, "after_sft", cfg.run.eval_groups))
        elif updates:
            # Both paths report the version they serve from the start (GET /weight_info).
            await asyncio.gather(*(s.call("set_version", {"new_version": "0"}) for s in servers if hasattr(s, "call")))

        async def watch() -> None:
            v = orch.version + 1
            while await apply(v):
                v += 1

        watcher = asyncio.ensure_future(watch())
        for step in range(start + 1, cfg.run.steps + 1):
            batch = await _until_peer(orch.next_batch(), ex, watcher)
            if batch is None:
                break  # the trainer stopped early (target reward reached)
            ex.put(f"batch_{step}.json", {"step": step, "samples": [s.to_dict() for s in batch.samples],
                                          "metrics": batch.metrics, "state": orch.state_dict(), "records": records})
            records = []
            written = step
            if watcher.done():
                watcher.result()  # a failed update stops the run
        await watcher  # every version the trainer publishes, until it says it is done
        return {"batches": written, "versions": applied, "output": str(out)}
    except PeerError as exc:
        error = exc
        console.print(f"orchestrator: {exc}")
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        if orch is not None:
            await orch.stop()
        if env_servers is not None:
            await env_servers.aclose()
        await close_envs(envs)
        for s in servers:
            with contextlib.suppress(Exception):
                await s.aclose()
            if own and hasattr(s, "stop_process"):
                s.stop_process()
        ex.finish(error)
