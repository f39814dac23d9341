"""What one process of a training run does besides training: :class:`verifiers.train.loop.Run`
trains (every rank, one code path) and delegates everything else to one role object.

* :class:`ColocatedRole` (``--role all``, rank 0): the environments, their env servers, the
  inference servers and the :class:`~verifiers.train.orchestrator.Orchestrator` in this process;
  it evaluates, writes the run folder and checkpoints.
* :class:`TrainerRole` (``--role trainer``, rank 0): batches come from an orchestrator process
  through the run folder (:class:`~verifiers.train.roles.RemoteOrchestrator`); it writes the run
  folder and checkpoints. The orchestrator process itself is :func:`verifiers.train.roles.run_orchestrator`.
* :class:`FollowerRole` (any other ``torchrun`` rank): trains on the batches rank 0 broadcasts and
  takes part in the collectives (weights gathered from the FSDP2 shards); it writes nothing.

A rank's role is chosen once (:func:`make_role`); nothing else in the run asks which it is.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from verifiers.train.checkpoint import save_checkpoint, set_rng_state
from verifiers.train.config import load_env
from verifiers.train.env_rows import close_envs, env_eval_rows, env_rows, eval_record
from verifiers.train.metrics import MetricsLog, save_rollouts
from verifiers.train.orchestrator import EnvEntry, Orchestrator, env_rollout_group, rollout_error, state_field

#: Weight files of a model folder: the final model has its own, everything else is copied over.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


def ensure_model(cfg: Any, console: Any) -> Path:
    """The model folder ``model.path``; the tiny local model is written there when asked and missing."""
    path = Path(cfg.model.path)
    if (path / "config.json").exists():
        return path
    if not cfg.model.tiny:
        raise FileNotFoundError(f"no model at {path} (set model.tiny = true to create the tiny local model)")
    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model

    console.print(f"[dim]writing the tiny model to {path}[/]")
    write_tiny_model(path, TinyModelSpec(seed=cfg.model.tiny_seed))
    return path


class NullMetrics:
    """The metrics log of a rank that writes none."""

    path = None

    def write(self, record: dict[str, Any]) -> None:
        pass

    def read(self) -> list[dict[str, Any]]:
        return []


class FollowerRole:
    """A ``torchrun`` rank other than 0: it trains and joins the collectives; rank 0 does the rest."""

    writes = False
    orch: Any = None
    colocated = False

    def __init__(self, run: Any) -> None:
        self.run = run

    @property
    def generating(self) -> bool:
        return self.orch is not None and bool(self.orch.generating)

    def log(self, msg: str) -> None:
        pass

    def prepare(self) -> None:
        """Before the trainer exists: the run folder and the model (rank 0 writes them)."""

    def setup(self) -> None:
        """After the trainer and the checkpoint: environments, servers, the orchestrator."""

    async def start(self) -> None:
        """In the event loop, before the stages."""

    def metrics(self) -> Any:
        """The run's metrics log (rank 0 writes ``metrics.jsonl`` and the trackers)."""
        return NullMetrics()

    def summary(self, metrics: Any, last: int, wall_s: float, final_model: Path) -> dict[str, Any]:
        """The run's summary (rank 0 writes ``summary.json`` and the plot)."""
        return {}

    async def server_urls(self) -> list[str]:
        return []

    def demo_rows(self) -> list[dict[str, Any]]:
        return []

    async def next_batch(self) -> Any:
        return None

    async def update_weights(self, path: str | None, version: int) -> float:
        return 0.0

    async def evaluate(self, metrics: Any, label: str, groups: int) -> float | None:
        return None

    async def heldout_eval(self, metrics: Any, step: int) -> dict[str, Any] | None:
        return None

    def record_step(self, metrics: Any, rec: dict[str, Any], batch: Any) -> None:
        pass

    def save_checkpoint(self, step: int, trainer_state: dict[str, Any]) -> Path | None:
        return None

    def publish_model(self, tmp: Path, final: Path) -> None:
        pass

    async def close(self, error: BaseException | None) -> None:
        pass


class _Leader(FollowerRole):
    """Rank 0 of either role: it writes the run folder (metrics, rollouts, checkpoints, the model)."""

    writes = True

    def log(self, msg: str) -> None:
        self.run.console.print(msg)

    def prepare(self) -> None:
        run = self.run
        run.out.mkdir(parents=True, exist_ok=True)
        (run.out / "config.json").write_text(run.cfg.model_dump_json(indent=2))
        ensure_model(run.cfg, run.console)

    trackers: Any = None

    def metrics(self) -> Any:
        import json

        from verifiers.train.metrics import Trackers

        run, lg = self.run, self.run.cfg.logging
        self.trackers = Trackers(run.out, tensorboard=lg.tensorboard, wandb=lg.wandb, project=lg.wandb_project,
                                 name=lg.wandb_name, config=json.loads(run.cfg.model_dump_json()))
        metrics = MetricsLog(run.out, truncate_after_step=run.start_step if run.ckpt else None, trackers=self.trackers)
        if not run.ckpt and metrics.path.exists():
            metrics.path.unlink()
        return metrics

    def summary(self, metrics: Any, last: int, wall_s: float, final_model: Path) -> dict[str, Any]:
        import json

        from verifiers.train.metrics import plot_metrics

        run = self.run
        allrec = metrics.read()
        rl = [r for r in allrec if r.get("stage") == "rl"]
        sft = [r for r in allrec if r.get("stage") == "sft"]
        evals = {r["label"]: r["reward/mean"] for r in allrec if r.get("stage") == "eval"}
        plot = plot_metrics(allrec, run.out / "metrics.png")
        first = [r["reward/mean"] for r in rl[:3]]
        final = [r["reward/mean"] for r in rl[-5:]]
        summary = {
            "steps": last, "sft_steps": len(sft), **{f"reward_{k}": v for k, v in evals.items()},
            "reward_first": sum(first) / max(1, len(first)),
            "reward_final": sum(final) / max(1, len(final)),
            # the RL stage's own time (its steps, resumed ones included) apart from the whole
            # run's (vLLM start-up, SFT and evaluations too)
            "rl_s": float(rl[-1].get("time/elapsed_s") or 0.0) if rl else 0.0,
            "wall_s": wall_s, "output": str(run.out.resolve()), "plot": str(plot),
            "model": str(final_model.resolve()),
        }
        (run.out / "summary.json").write_text(json.dumps(summary, indent=2))
        self.log(f"RL reward: first steps {summary['reward_first']:.3f} -> last steps "
                 f"{summary['reward_final']:.3f}  ({last} RL steps in {summary['rl_s']:.0f} s; "
                 f"the whole run took {summary['wall_s']:.0f} s)")
        self.log(f"trained model: {final_model.resolve()}  (vf serve {final_model.resolve()})")
        self.log(f"run folder: {run.out.resolve()}  (metrics.jsonl, metrics.png, model/)")
        return summary

    def load_envs(self, *, warn_no_eval: bool) -> None:
        """The environments (their rows; each one's eval split), refused before any server starts
        when the SFT warm start cannot use them."""
        run, cfg = self.run, self.run.cfg
        self.envs: list[EnvEntry] = []
        self.eval_envs: list[EnvEntry] = []
        for e in cfg.env:
            env = load_env(e)
            self.envs.append(EnvEntry(e.display_name, env, e.ratio, env_rows(env)))
            held = env_eval_rows(env)  # each environment's held-out split (never training rows)
            if held:
                self.eval_envs.append(EnvEntry(e.display_name, env, e.ratio, held))
            elif cfg.run.eval_every and warn_no_eval:
                self.log(f"environment {e.display_name} has no eval split: no held-out evaluation for it")
        if not self.envs:
            raise ValueError("no environment configured: add an [[env]] table with an id")
        no_answer = [e.name for e in self.envs if any("answer" not in r for r in e.rows)]
        if cfg.sft.steps and not run.ckpt and no_answer:
            raise ValueError(f"sft.steps = {cfg.sft.steps}: the SFT warm start trains on each row's reference "
                             f"answer, and {', '.join(no_answer)} has rows without one (a v1 taskset's tasks "
                             f"carry none): set sft.steps = 0")

    def demo_rows(self) -> list[dict[str, Any]]:
        return [r for e in getattr(self, "envs", []) for r in e.rows]

    async def update_weights(self, path: str | None, version: int) -> float:
        t = await self.orch.update_weights(path, version)
        self._prune_weights(version)
        return t

    def _prune_weights(self, step: int) -> None:
        root = self.run.out / "weights"
        if not root.is_dir():
            return
        olds = sorted((int(p.name.split("_")[1]), p) for p in root.glob("step_*") if p.name.split("_")[1].isdigit())
        for s, p in olds[:-max(1, self.run.cfg.run.keep_weights)]:
            if s != step:
                shutil.rmtree(p, ignore_errors=True)

    def record_step(self, metrics: Any, rec: dict[str, Any], batch: Any) -> None:
        metrics.write(rec)
        save_rollouts(self.run.out, rec["step"], getattr(batch, "rollouts", []) or [],
                      self.run.cfg.logging.sample_rollouts)

    def save_checkpoint(self, step: int, trainer_state: dict[str, Any]) -> Path | None:
        return save_checkpoint(self.run.out, step, trainer_state, self.orch.state_dict())

    def publish_model(self, tmp: Path, final: Path) -> None:
        written = {p.name for p in tmp.iterdir()}
        for f in sorted(Path(self.run.model_path).iterdir()):  # tokenizer, generation config ...
            if f.is_file() and f.name not in written and not f.name.endswith(WEIGHT_SUFFIXES):
                shutil.copy2(f, tmp / f.name)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)

    async def close(self, error: BaseException | None) -> None:
        if self.trackers is not None:
            self.trackers.close()
        if self.orch is not None:
            await self.orch.stop()
        await close_envs(getattr(self, "envs", []))


class TrainerRole(_Leader):
    """``--role trainer``, rank 0: the orchestrator is another process, reached through the run folder."""

    exchange: Any = None

    def setup(self) -> None:
        from verifiers.train.exchange import Exchange
        from verifiers.train.roles import RemoteOrchestrator

        run = self.run
        if run.cfg.sft.steps:  # the orchestrator process loads the environments; SFT needs their rows here
            self.load_envs(warn_no_eval=False)
        self.exchange = Exchange(run.out, "trainer", peer_timeout=run.cfg.run.peer_timeout_s).start()
        self.orch = RemoteOrchestrator(self.exchange, run.out, log=self.log)
        if run.ckpt:
            self.orch.load_state_dict(run.ckpt["orchestrator"])
            set_rng_state(run.ckpt["rng"])

    async def start(self) -> None:
        run = self.run
        if run.ckpt:  # the orchestrator process applies the resumed policy before it generates again
            await self.orch.update_weights(str(run.resume_weights), run.start_step)

    async def server_urls(self) -> list[str]:
        return await self.orch.server_urls()

    async def next_batch(self) -> Any:
        return await self.orch.next_batch()

    async def close(self, error: BaseException | None) -> None:
        await super().close(error)
        if self.exchange is not None:
            self.exchange.finish(error)


class ColocatedRole(_Leader):
    """``--role all``, rank 0: environments, env servers, inference servers and the orchestrator here."""

    def __init__(self, run: Any, *, servers: list[Any] | None, rollout_fn: Any) -> None:
        super().__init__(run)
        self.servers: list[Any] = list(servers or [])
        self.own_servers = not servers
        self.rollout_fn = rollout_fn  # None: env servers (verifiers.train.env_servers) play the episodes
        self.env_servers: Any = None
        self.launched_servers = False
        self.server_variant: str | None = None  # vLLM variant of servers this run launched

    @property
    def colocated(self) -> bool:  # type: ignore[override]
        """Whether some inference server runs on this machine (started here, or a loopback URL)."""
        if self.launched_servers:
            return True
        from urllib.parse import urlparse

        hosts = {urlparse(str(getattr(s, "base_url", ""))).hostname for s in self.servers}
        return bool(hosts & {"127.0.0.1", "localhost", "::1", "0.0.0.0"})

    def setup(self) -> None:
        from verifiers.train.inference import InferenceServer, launch_vllm_servers, place_servers

        run, cfg = self.run, self.run.cfg
        self.load_envs(warn_no_eval=True)
        if self.rollout_fn is None:  # the env servers start while vLLM starts
            from verifiers.train.env_servers import EnvServers

            self.env_servers = EnvServers()
            self.env_servers.start(self.envs, cfg.env)
            self.rollout_fn = self.env_servers.rollout_fn(env_rollout_group)
        if not self.servers:
            if cfg.inference.urls:
                self.servers = [InferenceServer(u, cfg.inference.model, coalesce_samples=cfg.inference.coalesce_samples,
                                                timeout=cfg.inference.request_timeout_s)
                                for u in cfg.inference.urls]
            else:
                run.server_precision()
                self.log(f"starting {cfg.inference.num_servers} vLLM server(s) for {run.resume_weights}")
                t0 = time.perf_counter()
                self.launched_servers = True
                reserved = cfg.inference.trainer_devices
                self.server_variant, devices = place_servers(
                    cfg.inference.num_servers, cfg.inference.extra_args, cfg.inference.server_devices,
                    run.dist.local_world_size if reserved is None else reserved)
                self.servers = launch_vllm_servers(run.resume_weights, cfg.inference.num_servers,
                                                   max_model_len=cfg.inference.max_model_len,
                                                   extra_args=cfg.inference.extra_args, log_dir=run.out / "logs",
                                                   coalesce_samples=cfg.inference.coalesce_samples,
                                                   devices=devices, weight_update=cfg.inference.weight_update,
                                                   variant=self.server_variant,
                                                   request_timeout=cfg.inference.request_timeout_s)
                self.log(f"vLLM ready in {time.perf_counter() - t0:.0f} s: " + ", ".join(s.base_url for s in self.servers))
        if self.env_servers is not None:
            self.env_servers.ready(log=self.log)
        self.orch = Orchestrator(self.envs, self.servers, cfg.orchestrator, cfg.sampling.to_args(),
                                 rollout_fn=self.rollout_fn, health_check=bool(cfg.inference.urls) or self.own_servers)
        if run.ckpt:
            self.orch.load_state_dict(run.ckpt["orchestrator"])
            set_rng_state(run.ckpt["rng"])

    async def start(self) -> None:
        run = self.run
        if self.env_servers is not None:
            await self.env_servers.wait_ready()
        if run.ckpt and not self.launched_servers:
            # Servers we did not start still hold whatever they had: give them the resumed policy.
            await self.orch.update_weights(str(run.resume_weights), run.start_step)

    async def server_urls(self) -> list[str]:
        return [s.root_url for s in self.servers]

    async def next_batch(self) -> Any:
        return await self.orch.next_batch()

    async def evaluate(self, metrics: Any, label: str, groups: int) -> float | None:
        """Mean reward of ``groups`` fresh groups under the weights the servers hold now."""
        if groups <= 0:
            return None
        entry = self.eval_envs[0] if self.eval_envs else self.envs[0]  # the eval split when there is one
        rec = await eval_record(entry, self.orch.usable_server(), self.rollout_fn, self.run.cfg, label, groups)
        metrics.write(rec)
        self.log(f"reward {label}: {rec['reward/mean']:.3f} ({rec['rollouts']} rollouts)")
        return rec["reward/mean"]

    async def heldout_eval(self, metrics: Any, step: int) -> dict[str, Any] | None:
        """Mean reward on each environment's eval split under the policy of ``step``: the same first
        ``run.eval_groups`` rows every time (curves compare like with like); failed rollouts are
        counted, not scored. One ``stage = "eval", label = "heldout"`` line."""
        cfg = self.run.cfg
        if not self.eval_envs or cfg.run.eval_groups <= 0:
            return None
        server = self.orch.usable_server()
        args = cfg.sampling.to_args()
        rec: dict[str, Any] = {"stage": "eval", "label": "heldout", "step": step}
        all_rewards: list[float] = []
        for entry in self.eval_envs:
            rows = entry.rows[: cfg.run.eval_groups]
            groups = await asyncio.gather(*(self.rollout_fn(entry, r, cfg.orchestrator.group_size, server.client,
                                                            server.model, args) for r in rows))
            states = [s for g in groups for s in g]
            ok = [float(state_field(s, "reward") or 0.0) for s in states if rollout_error(s) is None]
            rec[f"eval/{entry.name}/reward"] = sum(ok) / max(1, len(ok))
            rec[f"eval/{entry.name}/errors"] = float(len(states) - len(ok))
            all_rewards += ok
        rec["reward/mean"] = sum(all_rewards) / max(1, len(all_rewards))
        rec["rollouts"] = len(all_rewards)
        metrics.write(rec)
        return rec

    async def close(self, error: BaseException | None) -> None:
        import contextlib

        if self.trackers is not None:
            self.trackers.close()
        if self.orch is not None:
            await self.orch.stop()
        if self.env_servers is not None:
            await self.env_servers.aclose()
        await close_envs(getattr(self, "envs", []))
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.aclose()
            if self.own_servers and hasattr(s, "stop_process"):
                s.stop_process()


def make_role(run: Any, role: str, *, servers: list[Any] | None = None, rollout_fn: Any = None) -> FollowerRole:
    """The role of this process of the run (``role``: ``"all"`` or ``"trainer"``; the rank decides too)."""
    if role not in ("all", "trainer"):
        raise ValueError(f"Run role must be 'all' or 'trainer', not {role!r}")
    if not run.dist.is_main:
        return FollowerRole(run)
    if role == "trainer":
        return TrainerRole(run)
    return ColocatedRole(run, servers=servers, rollout_fn=rollout_fn)
