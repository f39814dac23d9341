"""An environment's rows as training sees them: its train set, its own eval split, and the eval
record of a few groups. One home for the trainer, the orchestrator process and the TRL bridge;
torch-free."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from verifiers.train.orchestrator import rollout_error, state_field

if TYPE_CHECKING:
    from verifiers.train.config import TrainConfig
    from verifiers.train.orchestrator import EnvEntry, RolloutGroupFn

__all__ = ["close_envs", "env_eval_rows", "env_rows", "eval_record"]


def env_rows(env: Any) -> list[dict[str, Any]]:
    """The training rows of an environment as plain dicts (its formatted train set)."""
    ds = env.get_dataset() if hasattr(env, "get_dataset") else env.dataset
    if hasattr(ds, "to_list"):
        return ds.to_list()
    return [dict(r) for r in ds]


def env_eval_rows(env: Any) -> list[dict[str, Any]]:
    """The rows of an environment's own eval split, or [] when it has none (never the train rows)."""
    ds = getattr(env, "eval_dataset", None)
    if ds is None:
        return []
    if hasattr(ds, "to_list"):
        return ds.to_list()
    return [dict(r) for r in ds]


async def eval_record(entry: EnvEntry, server: Any, rollout_fn: RolloutGroupFn, cfg: TrainConfig, label: str,
                      groups: int) -> dict[str, Any]:
    """Mean reward of ``groups`` fresh groups from the tail of ``entry``'s rows (its eval split, or the
    train set away from the first RL examples) under the weights ``server`` holds now, as a
    ``stage = "eval"`` metrics record; failed rollouts are not rewards."""
    rows = entry.rows[-groups:]
    results = await asyncio.gather(*(rollout_fn(entry, r, cfg.orchestrator.group_size, server.client, server.model,
                                                cfg.sampling.to_args()) for r in rows))
    rewards = [float(state_field(s, "reward") or 0.0) for g in results for s in g if rollout_error(s) is None]
    return {"stage": "eval", "label": label, "step": 0, "reward/mean": sum(rewards) / max(1, len(rewards)),
            "rollouts": len(rewards)}


async def close_envs(entries: Iterable[EnvEntry]) -> None:
    """Release what environments hold for the whole run (a v1 env's shared resources, its
    interception proxy and role clients: ``aclose``); environments without it hold nothing."""
    for entry in entries:
        close = getattr(entry.env, "aclose", None)
        if callable(close):
            with contextlib.suppress(Exception):
                await close()
