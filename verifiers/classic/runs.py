"""The classic ``evaluate`` / ``generate``: rows into groups, classic options into a RunConfig, and
the run through the engine (:func:`verifiers.engine.run.run_groups`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.classic.options import shuffled, with_max_retries
from verifiers.engine.client import is_model_client
from verifiers.engine.plans import RunConfig
from verifiers.engine.run import run_groups
from verifiers.types import GenerateOutputs
from verifiers.utils.data_utils import rows_from_source
from verifiers.utils.results import hashable_key

__all__ = ["close_quietly", "evaluate_groups", "generate_groups", "group_rows", "run_classic"]

logger = logging.getLogger("verifiers")


def group_rows(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows sharing an ``example_id`` form one group; each row gets its ``rollout_index``."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        group = groups.setdefault(hashable_key(row.get("example_id")), [])
        if "rollout_index" not in row:
            row = {**row, "rollout_index": len(group)}
        group.append(row)
    return list(groups.values())


def evaluate_groups(env: Any, num_examples: int, rollouts_per_example: int, opts: Mapping[str, Any]) -> tuple[list[list[dict[str, Any]]], int]:
    """``evaluate``'s groups: the eval rows (classic ``shuffle`` first), ``num_examples`` of them,
    each ``rollouts_per_example`` times."""
    rows = shuffled(env._rows("eval"), opts)
    if num_examples is not None and num_examples > 0:
        rows = rows[:num_examples]
    rpe = max(1, int(rollouts_per_example))
    return [[{**row, "rollout_index": r} for r in range(rpe)] for row in rows], rpe


def generate_groups(env: Any, inputs: Any, opts: dict[str, Any]) -> tuple[list[list[dict[str, Any]]], int]:
    """``generate``'s groups: the caller's rows grouped by ``example_id``; the OLD
    ``num_examples`` / ``rollouts_per_example`` options are taken out of ``opts``."""
    # Formatting is idempotent (a ready prompt keeps its system message and gets no few-shot), so
    # rows that already went through get_dataset() (and an Arrow round trip) are safe here.
    rows = [env._format_row(row, i) for i, row in enumerate(rows_from_source(inputs))]
    groups = shuffled(group_rows(rows), opts)
    num_examples = opts.pop("num_examples", None)
    if num_examples is not None and num_examples > 0:
        groups = groups[:num_examples]
    repeat = opts.pop("rollouts_per_example", None)
    if repeat is not None and repeat > 1:  # OLD generate: each input row is sampled `repeat` times
        groups = [[{**row, "rollout_index": i * repeat + r} for i, row in enumerate(g) for r in range(repeat)] for g in groups]
    return groups, max((len(g) for g in groups), default=1)


async def run_classic(
    env: Any,
    groups: list[list[dict[str, Any]]],
    client: Any,
    model: str,
    sampling_args: Mapping[str, Any] | None,
    *,
    rollouts_per_example: int,
    score: bool,
    max_concurrent: int,
    max_concurrent_requests: int | None,
    save_results: bool,
    results_path: str | Path | None,
    resume: bool,
    timeout_per_rollout: float | None,
    on_progress: Any,
    state_columns: Sequence[str] | None,
    options: Mapping[str, Any] | None,
) -> GenerateOutputs:
    """One classic run of ``groups`` on ``env``: the client it was handed (a model client, URL,
    config or openai client), the classic options, then the engine."""
    options = dict(options or {})
    owned_client = not is_model_client(client)
    mc = env._model_client(client)
    if options.get("max_retries") is not None:
        mc = with_max_retries(mc, int(options["max_retries"]))
        owned_client = owned_client or mc is not env._model_client(client)
    score_limit = options.get("max_concurrent_scoring")
    score_gate = asyncio.Semaphore(score_limit) if score_limit is not None and score_limit > 0 else None
    if options.get("scoring_semaphore") is not None:
        score_gate = options["scoring_semaphore"]
    folder: Path | None = None
    if save_results or results_path is not None or resume:
        folder = Path(results_path) if results_path is not None else env.default_results_path(model)
    config = RunConfig(
        model=model,
        sampling_args=env._merge_sampling_args(sampling_args),
        rollouts_per_example=rollouts_per_example,
        score=score,
        max_concurrent=max_concurrent,
        max_concurrent_requests=max_concurrent_requests,
        # the 0.1.x caller's own semaphore (`semaphore` / `generation_semaphore`) bounds its requests
        request_gate=options.get("generation_semaphore") or options.get("semaphore"),
        timeout_per_rollout=timeout_per_rollout,
        folder=folder,
        resume=resume,
        state_columns=tuple(state_columns or ()),
        on_progress=on_progress,
        on_start=options.get("on_start"),
        score_gate=score_gate,
        independent_scoring=bool(options.get("independent_scoring")),
        metadata={
            "env_id": env.env_id,
            "env_args": env.env_args,
            "versions": {"verifiers": _verifiers_version(), "environment": env.env_version},
        },
    )
    try:
        return await run_groups(env._engine_plan(), groups, mc, config)
    finally:
        if owned_client:
            await close_quietly(mc)
            env._clients.pop(id(client), None)


async def close_quietly(client: Any) -> None:
    close = getattr(client, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:
        logger.debug("closing model client failed", exc_info=True)


def _verifiers_version() -> str:
    try:
        from importlib.metadata import version

        return version("verifiers")
    except Exception:
        return "unknown"
