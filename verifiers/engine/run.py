"""One run: schedule groups, resume from a run folder, write each rollout as it finishes, summarise.

* Groups run with at most ``max_concurrent`` in flight: a fixed number of worker tasks pull groups
  from a shared iterator, so a 20,000-example run never creates 20,000 tasks up front. Workers run
  in a ``TaskGroup`` so cancelling a run cancels and awaits every task it started.
* Requests in flight are bounded separately by ``max_concurrent_requests`` (one semaphore shared by
  every rollout of the run, wrapped around the model client).
* Finished rollouts are written to ``results.jsonl`` at once (flushed), and only a small summary is
  kept in memory while saving (see :class:`~verifiers.types.GenerateOutputs`); ``resume`` skips the
  rollouts a folder already holds (read as a stream; bad lines, repeats and infrastructure errors
  set aside in ``results.aside.jsonl``, the latter run again).
* A run folder is held by one run at a time (``run.lock``); one that holds a run is refused unless
  resuming. Repeated ``(example_id, rollout_index)`` pairs are refused before anything runs.
* After a run, every requested rollout has exactly one record (finished or errored), or the run
  fails loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from verifiers.engine import group as group_stage
from verifiers.engine.client import BoundedClient, client_base_url
from verifiers.engine.threads import StallWatchdog
from verifiers.types import GenerateOutputs, State
from verifiers.utils.results import (
    LazyOutputs,
    ProgressTracker,
    ResultsWriter,
    ResumeScan,
    RolloutSummary,
    RunFolder,
    build_metadata,
    hashable_key,
    pair_rows,
    plain_record,
    record_for,
    rollout_positions,
    write_metadata,
)

if TYPE_CHECKING:
    from verifiers.engine.client import ModelClientProtocol
    from verifiers.engine.plans import GroupPlan, RunConfig

__all__ = ["relaxed_gc", "run_groups"]

logger = logging.getLogger("verifiers")


def _order_key(row: Mapping[str, Any]) -> tuple[Any, int]:
    return hashable_key(row.get("example_id")), row.get("rollout_index", 0)


async def run_groups(
    plan: GroupPlan,
    groups: Sequence[Sequence[Mapping[str, Any]]],
    client: ModelClientProtocol,
    config: RunConfig,
) -> GenerateOutputs:
    """Run every group of ``groups`` (rows with ``example_id`` and ``rollout_index``) and return
    the outputs in input order: records and states, or records read lazily from ``config.folder``."""
    with relaxed_gc():  # the whole run, its set-up and summary included (see relaxed_gc)
        return await _run_groups(plan, groups, client, config)


async def _run_groups(
    plan: GroupPlan,
    groups: Sequence[Sequence[Mapping[str, Any]]],
    client: ModelClientProtocol,
    config: RunConfig,
) -> GenerateOutputs:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    run_client: Any = client
    if config.request_gate is not None:  # a caller's own bound, shared with whatever else it bounds
        run_client = BoundedClient(run_client, config.request_gate)
    if config.max_concurrent_requests is not None and config.max_concurrent_requests > 0:
        run_client = BoundedClient(run_client, asyncio.Semaphore(config.max_concurrent_requests))
    model, sampling_args = config.model, config.sampling_args
    folder = config.folder

    # Output order follows the inputs: (group position, rollout index).
    # [faultsrun] identities are unique (refused otherwise); the run folder is locked, an existing
    # run refused without resume, and a resume streams (verifiers/utils/results.py).
    position = rollout_positions(groups)
    kept: list[tuple[tuple[int, int], Any]] = []  # (order key, offset or record)
    states_kept: list[tuple[tuple[int, int], State]] = []
    run_folder = RunFolder(folder, resume=config.resume, results_file=config.results_file, keep=config.keep_on_resume) if folder is not None else None
    scan = run_folder.open(position) if run_folder is not None else ResumeScan()
    try:
        writer = ResultsWriter(folder, name=config.results_file) if folder is not None else None
    except BaseException:
        if run_folder is not None:
            run_folder.close(0.0)
        raise
    if scan.done:
        kept.extend(scan.kept)
        groups = [g2 for g2 in ([r for r in g if _order_key(r) not in scan.done] for g in groups) if g2]
    requested = len(scan.summaries) + sum(len(g) for g in groups)
    if callable(config.on_start):
        try:
            config.on_start(requested)
        except Exception:
            logger.warning("on_start callback failed", exc_info=True)
    tracker = ProgressTracker(total=requested, callback=config.on_progress)
    tracker.start_from(scan.summaries)
    extra_columns = config.state_columns

    def finish(state: State, row: Mapping[str, Any]) -> None:
        reward = state.get("reward")
        if isinstance(reward, float) and not math.isfinite(reward):  # set by custom scoring code
            if not state.get("error"):
                state["error"] = {"type": "ValueError", "message": f"the rollout's reward is {reward}", "source": "reward"}
            state["reward"] = 0.0
        # [faultsrun] saving is part of the rollout: record_for / writer.write never raise for what
        # the rollout holds, and the record keeps the input's identity (not the state's)
        record = record_for(state, row, extra_columns, build=config.record)
        index = row.get("rollout_index", 0)
        order = (position.get(_order_key(row), 0), index)
        if writer is not None:
            kept.append((order, writer.write(record)))
        else:
            kept.append((order, plain_record(record)))
            states_kept.append((order, state))
        tracker.add(RolloutSummary.from_record(record))

    score = config.score
    apart = score and (config.score_gate is not None or config.independent_scoring)
    pending: Iterator[Sequence[Mapping[str, Any]]] = iter(groups)

    async def worker() -> None:
        for rows in pending:
            states = await group_stage.run_group(
                plan, rows, run_client, model, sampling_args, score=score and not apart, timeout=config.timeout_per_rollout
            )
            if apart:
                await _score_apart(plan, states, config)
            for row, st in pair_rows(rows, states):
                finish(st, row)

    limit = config.max_concurrent
    n_workers = len(groups) if limit is None or limit <= 0 else min(limit, len(groups))
    watchdog = StallWatchdog.from_env()  # names environment code that blocks the event loop
    watchdog.start(asyncio.get_running_loop())
    try:
        if n_workers:
            async with asyncio.TaskGroup() as tg:
                for _ in range(n_workers):
                    tg.create_task(worker())
    except BaseExceptionGroup as group_error:
        # Rollout errors are recorded, never raised; what lands here is a bug or an I/O failure
        # (disk full). Raise it as itself rather than wrapped in a one-item group.
        if len(group_error.exceptions) == 1:
            raise group_error.exceptions[0] from None
        raise
    finally:
        watchdog.stop()
        if writer is not None:
            writer.close()
        if run_folder is not None:
            run_folder.close((time.perf_counter() - t0) * 1000.0)

    if tracker.done != requested:
        # Every requested rollout must come back finished or errored; anything else is a bug (a
        # group stage that dropped states): say so instead of a short result.
        errored = tracker.errors
        raise RuntimeError(
            f"the run lost rollouts: {requested} requested, {tracker.done - errored} finished + {errored} errored"
            + (f"; the {tracker.done} saved ones are in {folder}" if folder is not None else "")
        )
    kept.sort(key=lambda item: item[0])
    states_kept.sort(key=lambda item: item[0])
    finished = datetime.now(UTC)
    meta_extra = {
        **config.metadata,
        "model": model,
        "base_url": client_base_url(client),
        "sampling_args": dict(sampling_args),
        "time_ms": (time.perf_counter() - t0) * 1000.0,
        "started_at": started.isoformat(),
        # [faultsrun] a resumed run's clock covers all its invocations (run.json)
        **(run_folder.clock((time.perf_counter() - t0) * 1000.0) if run_folder is not None else {}),
        "finished_at": finished.isoformat(),
        "path": str(folder) if folder is not None else None,
        "event_loop_stalls": watchdog.summary(),
    }
    metadata = build_metadata(tracker.summaries, rollouts_per_example=config.rollouts_per_example, extra=meta_extra)
    if folder is not None:
        write_metadata(folder, metadata)
        outputs: Any = LazyOutputs(writer.path if writer is not None else folder / "results.jsonl", [off for _, off in kept])
        return GenerateOutputs(outputs, metadata, None)
    return GenerateOutputs([rec for _, rec in kept], metadata, [st for _, st in states_kept])


async def _score_apart(plan: GroupPlan, states: list[State], config: RunConfig) -> None:
    """Classic scoring options: ``max_concurrent_scoring`` (a gate) and ``independent_scoring``."""
    gate = config.score_gate
    for part in ([st] for st in states) if config.independent_scoring else [states]:
        if gate is None:
            await group_stage.score_group(plan.scorer, part)
        else:
            async with gate:
                await group_stage.score_group(plan.scorer, part)


_GC_DEPTH = 0
_GC_SAVED: tuple[int, int, int] | None = None


@contextlib.contextmanager
def relaxed_gc() -> Iterator[None]:
    """Collect young objects less often while a run is going.

    With hundreds of rollouts in flight, many young objects survive a few collections and the
    default gen-0 threshold (700 allocations) makes the cyclic collector walk them again and again:
    measured here it cost up to half of the engine's CPU time per rollout. Raising the threshold
    for the duration of the run (restored afterwards; nested runs share one setting) removes that
    cost; reference counting still frees almost everything immediately. Also held while a classic
    ``evaluate`` formats its dataset rows: the rows pile up as the heap of a freshly imported
    process is walked again and again (a third of the CPU of a short run, measured here).
    """
    global _GC_DEPTH, _GC_SAVED
    if _GC_DEPTH == 0:
        _GC_SAVED = gc.get_threshold()
        gc.set_threshold(max(_GC_SAVED[0], 50_000), _GC_SAVED[1], _GC_SAVED[2])
    _GC_DEPTH += 1
    try:
        yield
    finally:
        _GC_DEPTH -= 1
        if _GC_DEPTH == 0 and _GC_SAVED is not None:
            gc.set_threshold(*_GC_SAVED)
