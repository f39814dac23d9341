"""The training configuration: one TOML file, validated by pydantic-settings, with CLI overrides.

Precedence (highest first): ``--set a.b=c`` overrides, typed CLI options, the TOML file, environment
variables ``VF_TRAIN_<SECTION>__<KEY>``, defaults. Environments are listed by hub id with a version
(``owner/name@1.0.0``, installed from the hub when missing), by installed name, or by local path (a
``.py`` file or a package folder), each with a mixing ratio and keyword arguments. A v1 package
(``verifiers.v1``: a Taskset in ``__all__``) goes in the same place; its ``args`` are its ``[env]``
table (``taskset``, roles ...) or the taskset's own knobs (``verifiers.train.v1_envs``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from verifiers.ids import looks_like_path
from verifiers.train.loss import LossConfig
from verifiers.train.orchestrator import OrchestratorConfig
from verifiers.train.trainer import TrainerConfig


class ModelSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    path: str = "outputs/tiny-model"
    tiny: bool = False           # create the tiny local model at `path` (vf model tiny) when missing
    tiny_seed: int = 0


class EnvSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    id: str
    ratio: float = 1.0
    args: dict[str, Any] = {}
    name: str | None = None      # display name in metrics (default: derived from id)
    # Where its episodes are played (verifiers.train.env_servers): "embedded" (an env-server pool the
    # run starts and stops, `workers` processes), the address(es) of running env servers
    # ("tcp://host:5000" or a list; `vf serve-env`), or "in_process" (the orchestrator's own loop).
    # "auto" (default): embedded (see env_servers.EnvServers.transport).
    server: str | list[str] = "auto"
    workers: int = Field(1, ge=1)

    @field_validator("server")
    @classmethod
    def _server(cls, v: str | list[str]) -> str | list[str]:
        addresses = [v] if isinstance(v, str) else list(v)
        if not addresses:
            raise ValueError("server: give at least one env-server address, or 'embedded' / 'in_process'")
        for a in addresses:
            if a in ("auto", "embedded", "in_process") and isinstance(v, str):
                continue
            if not a.startswith(("tcp://", "ipc://")):
                raise ValueError(f"server {a!r}: an env-server address (tcp://host:port or ipc://path), "
                                 f"or 'embedded' / 'in_process'")
        return v

    @field_validator("id")
    @classmethod
    def _id_or_path(cls, v: str) -> str:
        from verifiers.ids import looks_like_path, parse_env_id

        if not looks_like_path(v) and not Path(v).exists():
            parse_env_id(v)  # ValueError: not [owner/]name[@version]
        return v

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        from verifiers.ids import parse_env_spec

        spec = parse_env_spec(self.id)
        if isinstance(spec, Path):
            return spec.stem if spec.suffix == ".py" else spec.name
        return spec.name


class InferenceSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    urls: list[str] = []         # OpenAI base URLs of running servers; empty: start `num_servers` vLLMs
    model: str = "policy"        # model name to request when `urls` are given
    num_servers: int = 1
    max_model_len: int = 256
    extra_args: list[str] = []
    weight_update: str = "filesystem"   # filesystem (checkpoint + reload_weights) | nccl (GPU) | none
    nccl_master_address: str = "127.0.0.1"
    nccl_master_port: int = 29555
    # Send the identical first requests of a group as one request with n = group size (each rollout
    # gets one choice; see verifiers.clients.ClientConfig.coalesce_samples). For servers with `n`.
    coalesce_samples: bool = True
    # dtype of the weight files the servers reload after each step: "auto" = the `--dtype` given in
    # extra_args (bf16 servers reload bf16 files: half the bytes, no cast warnings), else as trained.
    weights_dtype: str = "auto"
    # A model request with no answer after this long counts as a server failure (the server's
    # /health is asked, its groups are rescheduled); also the bound on one generation.
    request_timeout_s: float = Field(600.0, gt=0)
    # GPU machines: one CUDA_VISIBLE_DEVICES value per launched server (e.g. ["1", "2,3"]). Empty: the
    # servers get the visible devices after the trainer's, `devices_per_server` (tp x pp x dp) each.
    server_devices: list[str] = []
    # Devices kept for the trainer on the machine that launches the servers. None: this process's
    # torchrun processes on the machine (LOCAL_WORLD_SIZE, 1 alone); 0 for `--role orchestrator`.
    trainer_devices: int | None = None

    @field_validator("weights_dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError(f"weights_dtype must be auto, bfloat16, float16 or float32, not {v!r}")
        return v

    def reload_dtype(self, launched_variant: str | None = None) -> str | None:
        """The dtype to save (or send) new weights in (None: as trained). ``launched_variant``: the
        servers were started by the loop for this vLLM variant, so their default dtype is known."""
        if self.weights_dtype != "auto":
            return self.weights_dtype
        from verifiers.serving.vllm import flag_value

        value = flag_value(self.extra_args, "--dtype")
        if value is None and launched_variant is not None:
            from verifiers.train.inference import default_server_dtype

            value = default_server_dtype(launched_variant)
        return None if value in (None, "auto") else value


class SamplingSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    extra: dict[str, Any] = {}

    def to_args(self) -> dict[str, Any]:
        """OpenAI sampling args that make vLLM return the token data training needs."""
        args: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature,
                                "top_p": self.top_p, "logprobs": True}
        body = dict(self.extra.get("extra_body", {}))
        body["return_token_ids"] = True
        args.update({k: v for k, v in self.extra.items() if k != "extra_body"})
        args["extra_body"] = body
        return args


class SFTSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    steps: int = 0               # supervised warm-start steps on environment demonstrations (0: none)
    batch_size: int = 64
    lr: float | None = None      # default: the RL learning rate


class RunSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    steps: int = 100
    output: str = "outputs/train/run"
    checkpoint_every: int = 50   # RL steps between checkpoints (0: only at the end)
    keep_weights: int = 2        # weight folders kept for the servers (older ones are deleted)
    seed: int = 0
    target_reward: float | None = None   # stop early once the 5-step moving average reaches it
    eval_groups: int = 16        # groups per environment in each evaluation (before/after SFT, held-out)
    eval_every: int = 0          # RL steps between held-out evaluations on each env's eval split (0: none)
    # --role orchestrator / trainer: how long one may go without the other's heartbeat before stopping.
    peer_timeout_s: float = 300.0


class LoggingSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    sample_rollouts: int = 4     # rollouts saved per step to <output>/rollouts/step_N.jsonl (0: none)
    tensorboard: bool = False    # <output>/tensorboard (needs the `train-logging` extra)
    wandb: bool = False          # Weights & Biases (needs the `train-logging` extra; WANDB_MODE=offline works)
    wandb_project: str = "verifiers-train"
    wandb_name: str | None = None  # default: the run folder's name


class TrainConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VF_TRAIN_", env_nested_delimiter="__", extra="forbid")

    model: ModelSection = ModelSection()
    env: list[EnvSection] = Field(default_factory=list)
    inference: InferenceSection = InferenceSection()
    sampling: SamplingSection = SamplingSection()
    orchestrator: OrchestratorConfig = OrchestratorConfig()
    trainer: TrainerConfig = TrainerConfig()
    loss: LossConfig = LossConfig()
    sft: SFTSection = SFTSection()
    run: RunSection = RunSection()
    logging: LoggingSection = LoggingSection()

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.orchestrator.max_seq_len > self.trainer.seq_len:
            raise ValueError("orchestrator.max_seq_len must not exceed trainer.seq_len (the packed row length)")
        if self.orchestrator.max_seq_len < self.sampling.max_tokens + 1:
            raise ValueError(
                f"orchestrator.max_seq_len = {self.orchestrator.max_seq_len} cannot hold one sample: a prompt "
                f"token plus sampling.max_tokens = {self.sampling.max_tokens} completion tokens need "
                f"{self.sampling.max_tokens + 1}")
        if self.trainer.temperature != self.sampling.temperature:
            raise ValueError(
                f"trainer.temperature = {self.trainer.temperature} differs from sampling.temperature = "
                f"{self.sampling.temperature}: log-probabilities must be computed under the temperature "
                f"that sampled the tokens (set both to the same value)")
        if self.sampling.temperature != 1.0 and not self.inference.urls and \
                "processed_logprobs" not in " ".join(self.inference.extra_args):
            raise ValueError(
                f"sampling.temperature = {self.sampling.temperature}: vLLM reports the raw model's "
                f"log-probabilities unless it is started with --logprobs-mode processed_logprobs; add "
                f'inference.extra_args = ["--logprobs-mode", "processed_logprobs"] (or sample at 1.0)')
        return self


def parse_value(text: str) -> Any:
    """A CLI override value: TOML/JSON literal when it parses (numbers, booleans, lists), else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` (``env.0.ratio=2`` indexes lists) to nested config data."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override must look like section.key=value, got {assignment!r}")
    parts = key.strip().split(".")
    node: Any = data
    for p in parts[:-1]:
        if isinstance(node, list):
            node = node[int(p)]
        else:
            node = node.setdefault(p, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = parse_value(raw)
    else:
        node[last] = parse_value(raw)


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                extra: dict[str, Any] | None = None) -> TrainConfig:
    """Read the TOML, apply ``section.key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    base = Path(".")
    if path is not None:
        p = Path(path)
        data = tomllib.loads(p.read_text())
        base = p.parent
    for key, value in (extra or {}).items():
        apply_override(data, f"{key}={json.dumps(value)}")
    for o in overrides or []:
        apply_override(data, o)
    # Local environment paths are relative to the config file.
    for e in data.get("env", []):
        eid = str(e.get("id", ""))
        if (looks_like_path(eid) or (base / eid).is_dir()) and not Path(eid).is_absolute() and (base / eid).exists():
            e["id"] = str((base / eid).resolve())
    return TrainConfig(**data)


def load_env(section: EnvSection) -> Any:
    """Load one environment through the loader: a local path, or an id (a missing or wrongly
    versioned ``owner/name@version`` is installed from the hub)."""
    from verifiers.ids import EnvId, parse_env_spec
    from verifiers.utils import env_loading

    spec = parse_env_spec(section.id)
    if isinstance(spec, EnvId) and spec.owner:
        import verifiers.hub_client  # noqa: F401  (registers the hub's installer with the loader)
    source = env_loading.resolve(spec, install=True)
    env = env_loading.load(source, section.args)
    from verifiers.train.v1_envs import V1TrainEnv, is_v1_env

    if is_v1_env(env):  # a v1 package (a Taskset in __all__): its tasks are the rows, env servers play them
        from verifiers.v1.env import env_table

        env = V1TrainEnv(env, env_table(source.module, dict(section.args)))
    for attr, value in (("env_id", section.display_name), ("env_args", dict(section.args))):
        if getattr(env, attr, None) in (None, ""):
            try:
                setattr(env, attr, value)
            except AttributeError:
                pass
    return env
