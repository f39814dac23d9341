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
:class:`Run` trains; everything a process does besides that is its role object
(:mod:`verifiers.train.run_roles`: colocated, trainer rank 0, other ranks), chosen once.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from verifiers.train.checkpoint import latest_checkpoint, load_checkpoint
from verifiers.train.config import TrainConfig
from verifiers.train.env_rows import env_rows  # noqa: F401  (re-exported: callers read rows from here)
from verifiers.train.fsdp import DistInfo, barrier, broadcast_object, destroy, init_distributed
from verifiers.train.inference import NCCLWeightSync
from verifiers.train.metrics import Trackers
from verifiers.train.orchestrator import RolloutGroupFn
from verifiers.train.samples import Sample
from verifiers.train.trainer import Trainer


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
    """One process of a training run: the trainer (every rank) and, by composition, its role
    (:mod:`verifiers.train.run_roles`: the orchestrator and servers here, an orchestrator process
    through the run folder, or another rank's batches), which the run delegates to."""

    def __init__(self, cfg: TrainConfig, *, output: str | Path | None = None, resume: bool = False,
                 rollout_fn: RolloutGroupFn | None = None, console: Console | None = None,
                 servers: list[Any] | None = None, role: str = "all") -> None:
        from verifiers.train.run_roles import make_role

        self.cfg = cfg
        self.dist: DistInfo = init_distributed()
        self.out = Path(output or cfg.run.output).resolve()
        self.resume = resume
        self.console = console or Console(stderr=True)
        self.ckpt: dict[str, Any] | None = None
        self.start_step = 0
        # The CUDA device is per thread: the trainer's thread uses this rank's (vLLM's NCCL endpoint and
        # FSDP2's collectives look at the current device).
        self._torch_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vf-trainer",
                                              initializer=_use_rank_device, initargs=(self.dist,))
        self.nccl: NCCLWeightSync | None = None
        self.trackers: Trackers | None = None
        self.role = make_role(self, role, servers=servers, rollout_fn=rollout_fn)

    @property
    def orch(self) -> Any:
        """What hands out batches and takes policy versions (rank 0; None elsewhere)."""
        return self.role.orch

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
        self.role.log(msg)

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        torch.manual_seed(cfg.run.seed)
        self.role.prepare()  # the run folder and the model, written by one process
        barrier(self.dist)
        self.model_path = Path(cfg.model.path)
        self.trainer = self.on_trainer_thread(Trainer, self.model_path, cfg.trainer, cfg.loss,
                                              total_steps=cfg.run.steps, dist_info=self.dist, seed=cfg.run.seed)
        self.trainer.threads_fn = self._trainer_threads
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
        self.role.setup()

    def server_precision(self) -> None:
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
        if cores > 1 and self.role.generating and self.role.colocated:
            return max(1, cores // 2)
        return cores

    # -- weights -----------------------------------------------------------------------------------
    async def _nccl(self) -> NCCLWeightSync:
        """The NCCL sync, made on first use on every rank (rank 0 needs the servers' URLs)."""
        if self.nccl is None:
            urls = await self.role.server_urls()
            from verifiers.train.trainer import _torch_dtype

            self.nccl = NCCLWeightSync(self.trainer.model, rank=self.dist.rank, root_urls=urls,
                                       master_address=self.cfg.inference.nccl_master_address,
                                       master_port=self.cfg.inference.nccl_master_port,
                                       dtype=_torch_dtype(self.cfg.inference.reload_dtype(
                                           getattr(self.role, "server_variant", None))))
        return self.nccl

    async def publish(self, step: int) -> float:
        """Save (or send) the current weights and make every server serve them as version ``step``.

        Every rank calls it: the full weights are gathered from the FSDP2 shards (collectives)."""
        mode = self.cfg.inference.weight_update
        if mode == "nccl":
            nccl = await self._nccl()
            t = await self.trainer_call(nccl.push, step)
            await self.role.update_weights(None, step)
            return t
        path = None
        if mode == "filesystem":
            path = await self.trainer_call(self.trainer.save_weights, self.out / "weights" / f"step_{step}",
                                           self.cfg.inference.reload_dtype(getattr(self.role, "server_variant", None)))
        return await self.role.update_weights(str(path) if path else None, step)

    # -- stages ------------------------------------------------------------------------------------
    async def evaluate(self, metrics: Any, label: str, groups: int) -> float | None:
        """Mean reward of ``groups`` fresh groups under the weights the servers hold now (the role
        that runs the orchestrator here; with --role trainer the orchestrator process evaluates)."""
        return await self.role.evaluate(metrics, label, groups)

    async def heldout_eval(self, metrics: Any, step: int) -> dict[str, float] | None:
        """Mean reward on each environment's eval split under the policy of ``step`` (one
        ``stage = "eval", label = "heldout"`` line; see ``ColocatedRole.heldout_eval``)."""
        return await self.role.heldout_eval(metrics, step)

    async def sft(self, metrics: Any) -> None:
        cfg = self.cfg
        if not cfg.sft.steps or self.ckpt:
            return
        await self.evaluate(metrics, "initial", cfg.run.eval_groups)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(self.model_path))
        rows = broadcast_object(self.role.demo_rows(), self.dist)
        if cfg.sft.lr is not None:
            for g in self.trainer.optimizer.param_groups:
                g["lr"] = cfg.sft.lr
        for s in range(cfg.sft.steps):
            m = await self.trainer_call(self.trainer.sft_step,
                                        demonstration_samples(rows, tok, cfg.sft.batch_size, s * cfg.sft.batch_size))
            metrics.write({"stage": "sft", "step": s + 1, **m})
        for g in self.trainer.optimizer.param_groups:
            g["lr"] = cfg.trainer.optim.lr * self.trainer.scheduler.lr_lambdas[0](0)
        # The optimizer's moments belong to the SFT objective; start RL from fresh ones.
        self.trainer.optimizer.state.clear()
        self.log(f"SFT warm start: {cfg.sft.steps} steps, final loss {m['sft/loss']:.4f}")
        await self.publish(0)
        await self.evaluate(metrics, "after_sft", cfg.run.eval_groups)

    async def rl(self, metrics: Any, on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        cfg = self.cfg
        records: list[dict] = []
        progress = Progress(TextColumn("[bold]RL"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[info]}"), console=self.console,
                            disable=not self.role.writes)
        # On resume the run continues where its metrics left off: the target-reward window and the
        # elapsed time come from the lines kept in metrics.jsonl.
        before = [r for r in metrics.read() if r.get("stage") == "rl"] if self.ckpt else []
        recent: list[float] = [r["reward/mean"] for r in before if r.get("reward/mean") is not None][-5:]
        t_run = time.perf_counter() - (float(before[-1].get("time/elapsed_s") or 0.0) if before else 0.0)
        with progress:
            task = progress.add_task("rl", total=cfg.run.steps, completed=self.start_step, info="")
            for step in range(self.start_step + 1, cfg.run.steps + 1):
                t0 = time.perf_counter()
                batch = await self.role.next_batch()  # rank 0's; the others get it from the broadcast
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
                self.role.record_step(metrics, rec, batch)
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
        if self.role.writes and tmp.exists():
            shutil.rmtree(tmp)
        self.on_trainer_thread(self.trainer.save_weights, tmp)
        self.role.publish_model(tmp, final)
        return final

    def checkpoint(self, step: int) -> Path | None:
        tstate = self.on_trainer_thread(self.trainer.state_dict)
        return self.role.save_checkpoint(step, tstate)

    async def close(self, error: BaseException | None = None) -> None:
        await self.role.close(error)
        if self.nccl is not None:
            self.nccl.close()
        self._torch_pool.shutdown(wait=False)


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
        await run.role.start()  # env servers answering; the resumed policy on servers we did not start
        # Everything loaded so far (model, tokenizer, datasets, environments, libraries) lives for
        # the whole run: move it out of the cyclic GC's sight. Otherwise each full collection walks
        # it all, and one landing inside a step cost 0.1-0.26 s (measured on the tiny-model loop,
        # six of them per run). Undone at the end for callers that keep the process.
        gc.collect()
        gc.freeze()
        metrics = run.role.metrics()
        await run.sft(metrics)
        records = await run.rl(metrics)
        last = records[-1]["step"] if records else run.start_step
        run.checkpoint(last)
        final_model = run.save_final_model()
        return run.role.summary(metrics, last, time.perf_counter() - t0, final_model)
    except BaseException as exc:
        error = exc
        raise
    finally:
        gc.unfreeze()
        await run.close(error)
        destroy(run.dist)
