"""`vf train`: the whole run, readable top to bottom.

    make/load the model -> start or connect the inference servers -> load the environments
    -> (optional) SFT warm start on environment demonstrations -> RL steps:
       batch = orchestrator.next_batch()        # rollouts generated asynchronously meanwhile
       metrics = trainer.step(batch.samples)    # in a worker thread: the event loop keeps rolling
       trainer.save_weights(...); orchestrator.update_weights(...)   # in place, no draining
    -> checkpoint, metrics.jsonl, plot.

Under ``torchrun`` every rank trains (FSDP2) and rank 0 alone runs the orchestrator and the inference
servers; batches are broadcast from rank 0. Every rank takes part in each weight update (the full
weights are gathered from the FSDP2 shards).

Roles (``role``): ``"all"`` (the default) runs everything above in one command. ``"trainer"`` runs the
trainer only and takes its batches from an orchestrator process (``verifiers.train.roles``) through the
run folder (``verifiers.train.exchange``); ``"orchestrator"`` is :func:`verifiers.train.roles.run_orchestrator`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from verifiers.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, set_rng_state
from verifiers.train.config import TrainConfig, load_env
from verifiers.train.env_rows import close_envs, env_eval_rows, env_rows, eval_record
from verifiers.train.fsdp import DistInfo, barrier, broadcast_object, destroy, init_distributed
from verifiers.train.inference import (
    InferenceServer,
    NCCLWeightSync,
    launch_vllm_servers,
    place_servers,
)
from verifiers.train.metrics import MetricsLog, Trackers, plot_metrics, save_rollouts
from verifiers.train.orchestrator import (
    EnvEntry,
    Orchestrator,
    RolloutGroupFn,
    env_rollout_group,
    rollout_error,
    state_field,
)
from verifiers.train.samples import Sample
from verifiers.train.trainer import Trainer

#: Weight files of a model folder: the final model has its own, everything else is copied over.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


def ensure_model(cfg: TrainConfig, console: Console) -> Path:
    path = Path(cfg.model.path)
    if (path / "config.json").exists():
        return path
    if not cfg.model.tiny:
        raise FileNotFoundError(f"no model at {path} (set model.tiny = true to create the tiny local model)")
    from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model

    console.print(f"[dim]writing the tiny model to {path}[/]")
    write_tiny_model(path, TinyModelSpec(seed=cfg.model.tiny_seed))
    return path


def demonstration_samples(rows: list[dict[str, Any]], tokenizer: Any, n: int, offset: int) -> list[Sample]:
    """SFT samples from environment rows: chat-templated prompt + the reference answer + EOS.

    These are demonstrations written from the dataset's answers (not sampled text), so tokenising
    them is right; RL samples are only ever built from the server's token ids.
    """
    out = []
    for k in range(n):
        row = rows[(offset + k) % len(rows)]
        enc = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        prompt_ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        comp = [*tokenizer.encode(str(row["answer"]), add_special_tokens=False), tokenizer.eos_token_id]
        out.append(Sample([*prompt_ids, *comp], [0] * len(prompt_ids) + [1] * len(comp),
                          [0.0] * (len(prompt_ids) + len(comp))))
    return out


def _use_rank_device(dist: DistInfo) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(dist.local_rank)


class Run:
    """Holds the pieces of one training run so that the async loop stays short."""

    def __init__(self, cfg: TrainConfig, *, output: str | Path | None = None, resume: bool = False,
                 rollout_fn: RolloutGroupFn | None = None, console: Console | None = None,
                 servers: list[Any] | None = None, role: str = "all") -> None:
        if role not in ("all", "trainer"):
            raise ValueError(f"Run role must be 'all' or 'trainer', not {role!r}")
        self.cfg = cfg
        self.role = role
        self.dist: DistInfo = init_distributed()
        self.out = Path(output or cfg.run.output).resolve()
        self.resume = resume
        self.rollout_fn = rollout_fn  # None: env servers (verifiers.train.env_servers) play the episodes
        self.env_servers: Any = None
        self.console = console or Console(stderr=True)
        self.servers: list[Any] = list(servers or [])
        self._own_servers = not servers
        self.orch: Orchestrator | None = None
        # The CUDA device is per thread: the trainer's thread uses this rank's (vLLM's NCCL endpoint and
        # FSDP2's collectives look at the current device).
        self._torch_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vf-trainer",
                                              initializer=_use_rank_device, initargs=(self.dist,))
        self.launched_servers = False
        self.colocated = False  # some inference server on this machine (decided in setup)
        self.nccl: NCCLWeightSync | None = None
        self.trackers: Trackers | None = None
        self.eval_envs: list[EnvEntry] = []
        self.exchange: Any = None  # verifiers.train.exchange.Exchange (role "trainer", rank 0)
        self.server_variant: str | None = None  # vLLM variant of servers this run launched

    # -- the trainer's thread ------------------------------------------------------------------------
    # Every torch computation of the run happens on one thread. PyTorch's CPU kernels run on an
    # OpenMP team that belongs to the calling thread; a second thread doing torch work makes a second
    # team, and libgomp, seeing more threads than cores, stops spinning between kernels: measured on
    # 2 cores, the same tiny-model step took 0.157 s instead of 0.095 s once two teams existed. The
    # event loop keeps rollouts going on the main thread meanwhile.
    def on_trainer_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the trainer's thread and wait for it (set-up and checkpoints)."""
        return self._torch_pool.submit(fn, *args, **kwargs).result()

    async def trainer_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` on the trainer's thread without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._torch_pool, functools.partial(fn, *args))

    def log(self, msg: str) -> None:
        if self.dist.is_main:
            self.console.print(msg)

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        torch.manual_seed(cfg.run.seed)
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.json").write_text(cfg.model_dump_json(indent=2))
            self.model_path = ensure_model(cfg, self.console)
        barrier(self.dist)
        self.model_path = Path(cfg.model.path)
        self.trainer = self.on_trainer_thread(Trainer, self.model_path, cfg.trainer, cfg.loss,
                                              total_steps=cfg.run.steps, dist_info=self.dist, seed=cfg.run.seed)
        self.trainer.threads_fn = self._trainer_threads
        self.start_step = 0
        ckpt = latest_checkpoint(self.out) if self.resume else None
        self.ckpt = load_checkpoint(ckpt) if ckpt else None
        if self.ckpt:
            self.on_trainer_thread(self.trainer.load_state_dict, self.ckpt["trainer"])
            self.start_step = int(self.ckpt["meta"]["step"])
            self.log(f"resuming from {ckpt} (step {self.start_step})")
        # Servers start from the newest weights: the resumed policy, or the initial model. Saving them
        # gathers the FSDP2 shards, so every rank takes part.
        weights = self.model_path
        if self.ckpt:
            weights = self.on_trainer_thread(self.trainer.save_weights,
                                             self.out / "weights" / f"step_{self.start_step}")
        self.resume_weights = weights
        if not self.dist.is_main:
            return
        self.envs = []
        if self.role == "trainer" and not cfg.sft.steps:
            pass  # the orchestrator process loads the environments; SFT needs their rows here
        else:
            for e in cfg.env:
                env = load_env(e)
                self.envs.append(EnvEntry(e.display_name, env, e.ratio, env_rows(env)))
                held = env_eval_rows(env)  # each environment's held-out split (never training rows)
                if held:
                    self.eval_envs.append(EnvEntry(e.display_name, env, e.ratio, held))
                elif cfg.run.eval_every and self.role != "trainer":
                    self.log(f"environment {e.display_name} has no eval split: no held-out evaluation for it")
            if not self.envs:
                raise ValueError("no environment configured: add an [[env]] table with an id")
            no_answer = [e.name for e in self.envs if any("answer" not in r for r in e.rows)]
            if cfg.sft.steps and not self.ckpt and no_answer:  # refused before any server starts
                raise ValueError(f"sft.steps = {cfg.sft.steps}: the SFT warm start trains on each row's reference "
                                 f"answer, and {', '.join(no_answer)} has rows without one (a v1 taskset's tasks "
                                 f"carry none): set sft.steps = 0")
        if self.role == "trainer":
            self._setup_remote()
            return
        if self.rollout_fn is None:  # the env servers start while vLLM starts
            from verifiers.train.env_servers import EnvServers

            self.env_servers = EnvServers()
            self.env_servers.start(self.envs, cfg.env)
            self.rollout_fn = self.env_servers.rollout_fn(env_rollout_group)
        self.launched_servers = False
        if not self.servers:
            if cfg.inference.urls:
                self.servers = [InferenceServer(u, cfg.inference.model,
                                                coalesce_samples=cfg.inference.coalesce_samples,
                                                timeout=cfg.inference.request_timeout_s)
                                for u in cfg.inference.urls]
            else:
                self._server_precision()
                self.log(f"starting {cfg.inference.num_servers} vLLM server(s) for {weights}")
                t0 = time.perf_counter()
                self.launched_servers = True
                reserved = cfg.inference.trainer_devices
                self.server_variant, devices = place_servers(
                    cfg.inference.num_servers, cfg.inference.extra_args, cfg.inference.server_devices,
                    self.dist.local_world_size if reserved is None else reserved)
                self.servers = launch_vllm_servers(weights, cfg.inference.num_servers,
                                                   max_model_len=cfg.inference.max_model_len,
                                                   extra_args=cfg.inference.extra_args,
                                                   log_dir=self.out / "logs",
                                                   coalesce_samples=cfg.inference.coalesce_samples,
                                                   devices=devices, weight_update=cfg.inference.weight_update,
                                                   variant=self.server_variant,
                                                   request_timeout=cfg.inference.request_timeout_s)
                self.log(f"vLLM ready in {time.perf_counter() - t0:.0f} s: "
                         + ", ".join(s.base_url for s in self.servers))
        if self.env_servers is not None:
            self.env_servers.ready(log=self.log)
        self.colocated = self._is_colocated()
        self.orch = Orchestrator(self.envs, self.servers, cfg.orchestrator, cfg.sampling.to_args(),
                                 rollout_fn=self.rollout_fn,
                                 health_check=bool(cfg.inference.urls) or self._own_servers)
        if self.ckpt:
            self.orch.load_state_dict(self.ckpt["orchestrator"])
            set_rng_state(self.ckpt["rng"])

    def _server_precision(self) -> None:
        """vLLM on a CPU without native bf16 serves in float32 instead (one line says why)."""
        from verifiers.serving.vllm import detect_variant, flag_value
        from verifiers.train.trainer import cpu_precision

        args = list(self.cfg.inference.extra_args)
        if detect_variant() != "cpu" or flag_value(args, "--dtype") != "bfloat16":
            return
        dtype, note = cpu_precision("bfloat16")
        if note is None:
            return
        out: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a == "--dtype":
                skip = True
                continue
            if not a.startswith("--dtype="):
                out.append(a)
        self.cfg.inference.extra_args = [*out, "--dtype", dtype]
        self.log(f"vLLM: {note}")

    def _trainer_threads(self) -> int:
        """CPU threads for the next forward or backward pass (``trainer.cpu_threads`` unset).

        Every core while nothing is being generated on this machine (the synchronous loop's training
        phase, or the asynchronous loop once the next batch is complete); half of them while a
        co-located server is generating, so that vLLM's engine keeps its cores.
        """
        cores = self.trainer.cpu_share()
        orch = self.orch
        if cores > 1 and orch is not None and orch.generating and self.colocated:
            return max(1, cores // 2)
        return cores

    def _is_colocated(self) -> bool:
        """Whether some inference server runs on this machine (started here, or a loopback URL)."""
        if self.launched_servers:
            return True
        from urllib.parse import urlparse

        hosts = {urlparse(str(getattr(s, "base_url", ""))).hostname for s in self.servers}
        return bool(hosts & {"127.0.0.1", "localhost", "::1", "0.0.0.0"})

    def _setup_remote(self) -> None:
        """Role "trainer", rank 0: the orchestrator is another process, reached through the run folder."""
        from verifiers.train.exchange import Exchange
        from verifiers.train.roles import RemoteOrchestrator

        self.exchange = Exchange(self.out, "trainer", peer_timeout=self.cfg.run.peer_timeout_s).start()
        self.orch = RemoteOrchestrator(self.exchange, self.out, log=self.log)  # type: ignore[assignment]
        if self.ckpt:
            self.orch.load_state_dict(self.ckpt["orchestrator"])  # type: ignore[union-attr]
            set_rng_state(self.ckpt["rng"])

    # -- weights -----------------------------------------------------------------------------------
    async def _nccl(self) -> NCCLWeightSync:
        """The NCCL sync, made on first use on every rank (rank 0 needs the servers' URLs)."""
        if self.nccl is None:
            urls: list[str] = []
            if self.dist.is_main:
                if self.role == "trainer":
                    urls = await self.orch.server_urls()  # type: ignore[union-attr]
                else:
                    urls = [s.root_url for s in self.servers]
            from verifiers.train.trainer import _torch_dtype

            self.nccl = NCCLWeightSync(self.trainer.model, rank=self.dist.rank, root_urls=urls,
                                       master_address=self.cfg.inference.nccl_master_address,
                                       master_port=self.cfg.inference.nccl_master_port,
                                       dtype=_torch_dtype(self.cfg.inference.reload_dtype(self.server_variant)))
        return self.nccl

    async def publish(self, step: int) -> float:
        """Save (or send) the current weights and make every server serve them as version ``step``.

        Every rank calls it: the full weights are gathered from the FSDP2 shards (collectives)."""
        mode = self.cfg.inference.weight_update
        if mode == "nccl":
            nccl = await self._nccl()
            t = await self.trainer_call(nccl.push, step)
            if self.dist.is_main and self.orch:
                await self.orch.update_weights(None, step)
            return t
        path = None
        if mode == "filesystem":
            path = await self.trainer_call(self.trainer.save_weights, self.out / "weights" / f"step_{step}",
                                           self.cfg.inference.reload_dtype(self.server_variant))
        if not self.dist.is_main:
            return 0.0
        assert self.orch is not None
        t = await self.orch.update_weights(str(path) if path else None, step)
        self._prune_weights(step)
        return t

    def _prune_weights(self, step: int) -> None:
        root = self.out / "weights"
        if not root.is_dir():
            return
        olds = sorted((int(p.name.split("_")[1]), p) for p in root.glob("step_*") if p.name.split("_")[1].isdigit())
        for s, p in olds[:-max(1, self.cfg.run.keep_weights)]:
            if s != step:
                shutil.rmtree(p, ignore_errors=True)

    # -- stages ------------------------------------------------------------------------------------
    async def evaluate(self, metrics: MetricsLog | None, label: str, groups: int) -> float | None:
        """Mean reward of ``groups`` fresh groups under the weights the servers hold now (rank 0)."""
        if not self.dist.is_main or groups <= 0 or self.role == "trainer":
            return None  # with --role trainer the orchestrator process evaluates
        assert self.orch is not None
        entry = self.eval_envs[0] if self.eval_envs else self.envs[0]  # the eval split when there is one
        rec = await eval_record(entry, self.orch.usable_server(), self.rollout_fn, self.cfg, label, groups)
        if metrics is not None:
            metrics.write(rec)
        self.log(f"reward {label}: {rec['reward/mean']:.3f} ({rec['rollouts']} rollouts)")
        return rec["reward/mean"]

    async def heldout_eval(self, metrics: MetricsLog | None, step: int) -> dict[str, float] | None:
        """Mean reward on each environment's eval split under the policy of ``step`` (rank 0).

        The same first ``run.eval_groups`` rows every time (curves compare like with like); failed
        rollouts are counted, not scored. One ``stage = "eval", label = "heldout"`` line.
        """
        if not self.dist.is_main or not self.eval_envs or self.cfg.run.eval_groups <= 0 or self.role == "trainer":
            return None
        assert self.orch is not None
        server = self.orch.usable_server()
        args = self.cfg.sampling.to_args()
        rec: dict[str, Any] = {"stage": "eval", "label": "heldout", "step": step}
        all_rewards: list[float] = []
        for entry in self.eval_envs:
            rows = entry.rows[: self.cfg.run.eval_groups]
            groups = await asyncio.gather(*(self.rollout_fn(entry, r, self.cfg.orchestrator.group_size,
                                                            server.client, server.model, args) for r in rows))
            states = [s for g in groups for s in g]
            ok = [float(state_field(s, "reward") or 0.0) for s in states if rollout_error(s) is None]
            rec[f"eval/{entry.name}/reward"] = sum(ok) / max(1, len(ok))
            rec[f"eval/{entry.name}/errors"] = float(len(states) - len(ok))
            all_rewards += ok
        rec["reward/mean"] = sum(all_rewards) / max(1, len(all_rewards))
        rec["rollouts"] = len(all_rewards)
        if metrics is not None:
            metrics.write(rec)
        return rec

    async def sft(self, metrics: MetricsLog) -> None:
        cfg = self.cfg
        if not cfg.sft.steps or self.ckpt:
            return
        await self.evaluate(metrics, "initial", cfg.run.eval_groups)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(self.model_path))
        rows = [r for e in self.envs for r in e.rows] if self.dist.is_main else []
        rows = broadcast_object(rows, self.dist)
        if cfg.sft.lr is not None:
            for g in self.trainer.optimizer.param_groups:
                g["lr"] = cfg.sft.lr
        for s in range(cfg.sft.steps):
            m = await self.trainer_call(self.trainer.sft_step,
                                        demonstration_samples(rows, tok, cfg.sft.batch_size, s * cfg.sft.batch_size))
            if self.dist.is_main:
                metrics.write({"stage": "sft", "step": s + 1, **m})
        for g in self.trainer.optimizer.param_groups:
            g["lr"] = cfg.trainer.optim.lr * self.trainer.scheduler.lr_lambdas[0](0)
        # The optimizer's moments belong to the SFT objective; start RL from fresh ones.
        self.trainer.optimizer.state.clear()
        self.log(f"SFT warm start: {cfg.sft.steps} steps, final loss {m['sft/loss']:.4f}")
        await self.publish(0)
        await self.evaluate(metrics, "after_sft", cfg.run.eval_groups)

    async def rl(self, metrics: MetricsLog, on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        cfg = self.cfg
        records: list[dict] = []
        progress = Progress(TextColumn("[bold]RL"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[info]}"), console=self.console,
                            disable=not self.dist.is_main)
        # On resume the run continues where its metrics left off: the target-reward window and the
        # elapsed time come from the lines kept in metrics.jsonl.
        before = [r for r in metrics.read() if r.get("stage") == "rl"] if (metrics and self.ckpt) else []
        recent: list[float] = [r["reward/mean"] for r in before if r.get("reward/mean") is not None][-5:]
        t_run = time.perf_counter() - (float(before[-1].get("time/elapsed_s") or 0.0) if before else 0.0)
        with progress:
            task = progress.add_task("rl", total=cfg.run.steps, completed=self.start_step, info="")
            for step in range(self.start_step + 1, cfg.run.steps + 1):
                t0 = time.perf_counter()
                batch = await self.orch.next_batch() if self.dist.is_main else None
                payload = broadcast_object(
                    (batch.samples, batch.metrics) if batch is not None else None, self.dist)
                samples, bmetrics = payload
                tm = await self.trainer_call(self.trainer.step, samples)
                t_pub = await self.publish(step)
                dt = time.perf_counter() - t0
                rec = {"stage": "rl", "step": step, "policy_version": step - 1, **bmetrics, **tm,
                       "weights/update_s": t_pub, "time/step_s": dt,
                       "tokens_per_s": bmetrics.get("tokens/sampled", 0.0) / max(dt, 1e-9),
                       "time/elapsed_s": time.perf_counter() - t_run}
                records.append(rec)
                if self.dist.is_main:
                    metrics.write(rec)
                    save_rollouts(self.out, step, getattr(batch, "rollouts", []), cfg.logging.sample_rollouts)
                if cfg.run.eval_every and step % cfg.run.eval_every == 0:
                    ev = await self.heldout_eval(metrics, step)
                    if ev is not None:
                        self.log(f"held-out reward at step {step}: {ev['reward/mean']:.3f}")
                progress.update(task, completed=step, info=(
                    f"reward {rec['reward/mean']:.3f}  loss {rec['loss/policy']:+.4f}  "
                    f"off-policy {rec['off_policy/max']:.0f}  {rec['tokens_per_s']:.0f} tok/s"))
                if on_step:
                    on_step(rec)
                every = cfg.run.checkpoint_every
                if every and step % every == 0 and step < cfg.run.steps:
                    self.checkpoint(step)
                recent = [*recent, rec["reward/mean"]][-5:]
                stop = cfg.run.target_reward is not None and len(recent) == 5 and \
                    sum(recent) / 5 >= cfg.run.target_reward
                if broadcast_object(stop, self.dist):
                    self.log(f"target reward {cfg.run.target_reward} reached at step {step}")
                    break
        return records

    def save_final_model(self) -> Path:
        """The trained policy as a model folder in the run folder (``<output>/model``: config,
        safetensors and the base model's tokenizer files), loadable by ``vf serve`` and
        ``transformers`` alike. Every rank calls it (the weights are gathered from the shards);
        the folder appears whole or not at all."""
        final, tmp = self.out / "model", self.out / ".model.tmp"
        if self.dist.is_main and tmp.exists():
            shutil.rmtree(tmp)
        self.on_trainer_thread(self.trainer.save_weights, tmp)
        if self.dist.is_main:
            written = {p.name for p in tmp.iterdir()}
            for f in sorted(Path(self.model_path).iterdir()):  # tokenizer, generation config ...
                if f.is_file() and f.name not in written and not f.name.endswith(WEIGHT_SUFFIXES):
                    shutil.copy2(f, tmp / f.name)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        return final

    def checkpoint(self, step: int) -> Path | None:
        tstate = self.on_trainer_thread(self.trainer.state_dict)
        if not self.dist.is_main:
            return None
        assert self.orch is not None
        return save_checkpoint(self.out, step, tstate, self.orch.state_dict())

    async def close(self, error: BaseException | None = None) -> None:
        if self.orch is not None:
            await self.orch.stop()
        if self.env_servers is not None:
            await self.env_servers.aclose()
        await close_envs(getattr(self, "envs", []))
        if self.nccl is not None:
            self.nccl.close()
        if self.exchange is not None:
            self.exchange.finish(error)
        self._torch_pool.shutdown(wait=False)
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.aclose()
            if self._own_servers and hasattr(s, "stop_process"):
                s.stop_process()


async def run_training(cfg: TrainConfig, *, output: str | Path | None = None, resume: bool = False,
                       rollout_fn: RolloutGroupFn | None = None, console: Console | None = None,
                       servers: list[Any] | None = None, role: str = "all") -> dict[str, Any]:
    """Run a whole training job; returns a summary (also written to ``<output>/summary.json``).

    ``role="trainer"``: the trainer half only, fed by ``vf train CONFIG --role orchestrator`` through
    the run folder (see ``verifiers.train.exchange``)."""
    run = Run(cfg, output=output, resume=resume, rollout_fn=rollout_fn, console=console, servers=servers,
              role=role)
    error: BaseException | None = None
    run.log(f"run folder: {run.out.resolve()}")
    t0 = time.perf_counter()
    try:
        run.setup()
        if run.env_servers is not None:
            await run.env_servers.wait_ready()
        # Everything loaded so far (model, tokenizer, datasets, environments, libraries) lives for
        # the whole run: move it out of the cyclic GC's sight. Otherwise each full collection walks
        # it all, and one landing inside a step cost 0.1-0.26 s (measured on the tiny-model loop,
        # six of them per run). Undone at the end for callers that keep the process.
        gc.collect()
        gc.freeze()
        if run.ckpt and run.dist.is_main and run.orch is not None and not run.launched_servers:
            # Servers we did not start still hold whatever they had: give them the resumed policy.
            await run.orch.update_weights(str(run.resume_weights), run.start_step)
        if run.dist.is_main:
            lg = cfg.logging
            run.trackers = Trackers(run.out, tensorboard=lg.tensorboard, wandb=lg.wandb, project=lg.wandb_project,
                                    name=lg.wandb_name, config=json.loads(cfg.model_dump_json()))
        metrics = MetricsLog(run.out, truncate_after_step=run.start_step if run.ckpt else None,
                             trackers=run.trackers) if run.dist.is_main else None
        if metrics is not None and not run.ckpt and metrics.path.exists():
            metrics.path.unlink()
        await run.sft(metrics)
        records = await run.rl(metrics)
        last = records[-1]["step"] if records else run.start_step
        run.checkpoint(last)
        final_model = run.save_final_model()
        summary: dict[str, Any] = {}
        if run.dist.is_main:
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
                "wall_s": time.perf_counter() - t0, "output": str(run.out.resolve()), "plot": str(plot),
                "model": str(final_model.resolve()),
            }
            (run.out / "summary.json").write_text(json.dumps(summary, indent=2))
            run.log(f"RL reward: first steps {summary['reward_first']:.3f} -> last steps "
                    f"{summary['reward_final']:.3f}  ({last} RL steps in {summary['rl_s']:.0f} s; "
                    f"the whole run took {summary['wall_s']:.0f} s)")
            run.log(f"trained model: {final_model.resolve()}  (vf serve {final_model.resolve()})")
            run.log(f"run folder: {run.out.resolve()}  (metrics.jsonl, metrics.png, model/)")
        return summary
    except BaseException as exc:
        error = exc
        raise
    finally:
        gc.unfreeze()
        if run.trackers is not None:
            run.trackers.close()
        await run.close(error)
        destroy(run.dist)
