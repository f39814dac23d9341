"""Results I/O and the run summary.

A run folder holds ``results.jsonl`` (one rollout per line, appended and flushed as each rollout
finishes, so a killed run loses nothing that finished) and ``metadata.json`` (rewritten at the end).
While a run is going, the engine keeps only a :class:`RolloutSummary` per rollout (reward, metrics,
error source, usage) so that memory stays flat on long runs; full records are read back lazily
through :class:`LazyOutputs`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LazyOutputs",
    "ResultsWriter",
    "RolloutSummary",
    "build_metadata",
    "pass_at_k",
    "read_results",
    "record_from_state",
    "write_metadata",
]

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"


def _json_default(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return repr(obj)


def dumps(obj: Any) -> str:
    """JSON for a record; objects that are not JSON (responses, pydantic models) are converted."""
    return json.dumps(obj, default=_json_default, ensure_ascii=False)


def record_from_state(state: dict[str, Any]) -> dict[str, Any]:
    """The output record (a line of results.jsonl) for a finished rollout state.

    ``trajectory`` is written only when the server returned token data (ids or sampled logprobs:
    the training adapter needs them; without them it only repeats prompt and completion turn by
    turn), else ``None``. ``warnings`` lists what was flagged without being an error (an empty reply,
    a tool result that could not be shown).
    """
    trajectory = state.get("trajectory") or []
    has_tokens = any(step.get("tokens") for step in trajectory)
    return {
        "example_id": state.get("example_id"),
        "rollout_index": state.get("rollout_index", 0),
        "prompt": state.get("prompt"),
        "completion": state.get("completion"),
        "answer": state.get("answer", ""),
        "task": state.get("task", "default"),
        "info": state.get("info") or {},
        "reward": state.get("reward") if state.get("reward") is not None else 0.0,
        "metrics": state.get("metrics") or {},
        "error": state.get("error"),
        "stop_condition": state.get("stop_condition"),
        "is_truncated": bool(state.get("is_truncated")),
        "warnings": list(state.get("warnings") or ()),
        "timing": state.get("timing") or {},
        "usage": state.get("usage") or {},
        "trajectory": trajectory if has_tokens else None,
    }


def _pstdev(values: list[float]) -> float:
    """Population standard deviation; a NaN or infinite reward gives NaN instead of raising (as
    ``statistics.pstdev`` does), so one bad reward never loses a whole run's summary."""
    n = len(values)
    if n < 2:
        return 0.0
    if all(math.isfinite(v) for v in values):
        return statistics.pstdev(values)
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / n)


@dataclass(slots=True)
class RolloutSummary:
    """What the run summary needs from one rollout (kept in memory instead of the full record)."""

    example_id: Any
    rollout_index: int
    reward: float
    metrics: dict[str, float]
    error_source: str | None
    prompt_tokens: int
    completion_tokens: int
    is_truncated: bool = False
    stop_condition: str | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> RolloutSummary:
        err = rec.get("error")
        usage = rec.get("usage") or {}
        if not isinstance(usage, dict):
            usage = {}
        metrics = rec.get("metrics") or {}
        warnings = rec.get("warnings") or ()
        stop = rec.get("stop_condition")
        return cls(
            example_id=rec.get("example_id"),
            rollout_index=_int(rec.get("rollout_index")),
            reward=_finite(rec.get("reward")),
            metrics={str(k): _finite(v) for k, v in metrics.items()} if isinstance(metrics, dict) else {},
            error_source=(err.get("source") or "unknown") if isinstance(err, dict) else (None if err is None else "unknown"),
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
            is_truncated=bool(rec.get("is_truncated")),
            stop_condition=str(stop) if stop else None,
            warnings=tuple(
                str(w.get("type") or "warning") if isinstance(w, dict) else "warning"
                for w in (warnings if isinstance(warnings, list) else ())
            ),
        )


def _finite(value: Any) -> float:
    """A number for the summary: a missing, non-numeric, NaN or infinite value counts as 0.0."""
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


class ResultsWriter:
    """Appends records to ``results.jsonl`` and flushes after each one."""

    def __init__(self, folder: str | os.PathLike[str], name: str | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / (name or RESULTS_FILE)
        self._fh = open(self.path, "ab")

    def write(self, record: dict[str, Any]) -> int:
        """Append one record; returns its byte offset in the file."""
        offset = self._fh.tell()
        self._fh.write(dumps(record).encode("utf-8") + b"\n")
        self._fh.flush()
        return offset

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_results(folder: str | os.PathLike[str], repair: bool = False, name: str | None = None) -> tuple[list[dict[str, Any]], list[int]]:
    """Records of ``folder/results.jsonl`` and their byte offsets.

    A last line that is truncated (no newline, or not valid JSON: the run was killed mid-write) is
    ignored; with ``repair=True`` the file is cut back to the last complete line so that appending
    continues cleanly.
    """
    path = Path(folder) / (name or RESULTS_FILE)
    records: list[dict[str, Any]] = []
    offsets: list[int] = []
    if not path.exists():
        return records, offsets
    good_end = 0
    with open(path, "rb") as fh:
        offset = 0
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                rec = json.loads(line)
            except ValueError:
                break
            if isinstance(rec, dict):
                records.append(rec)
                offsets.append(offset)
            offset += len(line)
            good_end = offset
    if repair and path.stat().st_size != good_end:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return records, offsets


class LazyOutputs(Sequence[dict[str, Any]]):
    """Output records read back from results.jsonl on access (bounded memory on long runs).

    Indexing reads one line; iterating streams the file. ``list(outputs)`` loads everything.
    """

    def __init__(self, path: str | os.PathLike[str], offsets: Sequence[int]) -> None:
        self.path = Path(path)
        self._offsets = list(offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def _read(self, fh: Any, offset: int) -> dict[str, Any]:
        fh.seek(offset)
        return json.loads(fh.readline())

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            with open(self.path, "rb") as fh:
                return [self._read(fh, off) for off in self._offsets[index]]
        with open(self.path, "rb") as fh:
            return self._read(fh, self._offsets[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as fh:
            for off in self._offsets:
                yield self._read(fh, off)

    def __repr__(self) -> str:
        return f"LazyOutputs({str(self.path)!r}, n={len(self)})"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples of which ``c`` are correct."""
    if k > n:
        k = n
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def build_metadata(
    summaries: Sequence[RolloutSummary],
    *,
    rollouts_per_example: int,
    pass_threshold: float = 0.5,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run summary of contracts.md from per-rollout summaries (``extra`` adds run fields).

    A rollout counts as correct for pass@k when its reward is at least ``pass_threshold``.
    """
    n = len(summaries)
    rewards = [s.reward for s in summaries]
    metric_names: list[str] = []
    for s in summaries:
        for k in s.metrics:
            if k not in metric_names:
                metric_names.append(k)
    avg_metrics = {k: (sum(s.metrics.get(k, 0.0) for s in summaries) / n if n else 0.0) for k in metric_names}
    by_example: dict[Any, list[float]] = {}
    for s in summaries:
        by_example.setdefault(hashable_key(s.example_id), []).append(s.reward)
    ks = sorted({1, *[2**i for i in range(1, 12) if 2**i <= rollouts_per_example], max(1, rollouts_per_example)})
    pass_k: dict[str, float] = {}
    for k in ks:
        vals = [pass_at_k(len(rs), sum(r >= pass_threshold for r in rs), k) for rs in by_example.values() if rs]
        pass_k[str(k)] = sum(vals) / len(vals) if vals else 0.0
    errors_by_source: dict[str, int] = {}
    stop_conditions: dict[str, int] = {}
    warnings_by_type: dict[str, int] = {}
    for s in summaries:
        if s.error_source:
            errors_by_source[s.error_source] = errors_by_source.get(s.error_source, 0) + 1
        stop = s.stop_condition or "unknown"
        stop_conditions[stop] = stop_conditions.get(stop, 0) + 1
        for w in s.warnings:
            warnings_by_type[w] = warnings_by_type.get(w, 0) + 1
    prompt_total = sum(s.prompt_tokens for s in summaries)
    completion_total = sum(s.completion_tokens for s in summaries)
    meta: dict[str, Any] = {
        "num_examples": len(by_example),
        "rollouts_per_example": rollouts_per_example,
        "num_rollouts": n,
        "avg_reward": sum(rewards) / n if n else 0.0,
        "std_reward": _pstdev(rewards),
        "avg_metrics": avg_metrics,
        "pass_at_k": pass_k,
        "num_errors": sum(errors_by_source.values()),
        "errors_by_source": errors_by_source,
        "num_truncated": sum(1 for s in summaries if s.is_truncated),
        "stop_conditions": dict(sorted(stop_conditions.items(), key=lambda kv: (-kv[1], kv[0]))),
        "num_warnings": sum(warnings_by_type.values()),
        "warnings_by_type": warnings_by_type,
        "usage": {
            "prompt_tokens": prompt_total,
            "completion_tokens": completion_total,
            "total_tokens": prompt_total + completion_total,
            "avg_prompt_tokens": prompt_total / n if n else 0.0,
            "avg_completion_tokens": completion_total / n if n else 0.0,
        },
    }
    return {**(extra or {}), **meta}


def hashable_key(value: Any) -> Any:
    """``value`` itself when it is hashable, else its canonical JSON text: the one key for an
    ``example_id`` (which datasets may hold as a list or dict) in sets and dicts."""
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)


def write_metadata(folder: str | os.PathLike[str], metadata: dict[str, Any]) -> Path:
    """Write ``metadata.json`` atomically (a reader never sees half a file)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / METADATA_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(metadata, indent=2, default=_json_default, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


@dataclass
class ProgressTracker:
    """Counts finished rollouts and reports ``{"done", "total", "avg_reward", "errors"}``."""

    total: int
    callback: Callable[[dict[str, Any]], Any] | None = None
    done: int = 0
    reward_sum: float = 0.0
    errors: int = 0
    summaries: list[RolloutSummary] = field(default_factory=list)

    def add(self, summary: RolloutSummary) -> None:
        self.summaries.append(summary)
        self.done += 1
        self.reward_sum += summary.reward
        if summary.error_source:
            self.errors += 1
        if self.callback is not None:
            event = {"done": self.done, "total": self.total, "avg_reward": self.reward_sum / self.done, "errors": self.errors}
            try:
                self.callback(event)
            except Exception:  # a broken progress display must not stop the run
                logging.getLogger("verifiers").warning("on_progress callback failed", exc_info=True)
