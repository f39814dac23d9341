"""Multi-process training with FSDP2 (``torch.distributed.fsdp.fully_shard``) under ``torchrun``.

One process per device; each rank trains on its share of the packed rows while FSDP2 shards the
parameters, gradients and optimizer state. Gloo is used on CPU (tests), NCCL on GPUs.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def local_world_size(self) -> int:
        """Processes of this job on this machine (torchrun's ``LOCAL_WORLD_SIZE``; 1 alone)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.enabled else 1


def init_distributed() -> DistInfo:
    """Join the process group that ``torchrun`` describes in the environment (no-op when alone)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local)


def shard_model(model: torch.nn.Module, *, mp_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Apply ``fully_shard`` to every decoder layer, then to the root (the FSDP2 recipe)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if mp_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=mp_dtype, reduce_dtype=torch.float32)
    layers = _decoder_layers(model)
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    # transformers causal LMs keep their blocks in `<base>.layers` (Llama, Qwen, Mistral) or `h` (GPT-2).
    base = getattr(model, "model", None) or getattr(model, "transformer", None) or model
    for name in ("layers", "h", "blocks"):
        blocks = getattr(base, name, None)
        if isinstance(blocks, torch.nn.ModuleList):
            return list(blocks)
    return []


def all_reduce_sum(value: float, info: DistInfo) -> float:
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return float(t.item())


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's object on every rank (batches, stop flags)."""
    if not info.enabled:
        return obj
    box = [obj if info.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def destroy(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
        # what still held a backend (a model's device mesh, a pending work's tensors) is freed now,
        # not at interpreter finalization, where a gloo thread releasing a tensor aborts the process
        gc.collect()
