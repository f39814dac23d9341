"""Results I/O and the run summary.

A run folder holds ``results.jsonl`` (one rollout per line, appended and flushed as each rollout
finishes, so a killed run loses nothing that finished) and ``metadata.json`` (rewritten at the end).
While a run is going, the engine keeps only a :class:`RolloutSummary` per rollout (reward, metrics,
error source, usage) so that memory stays flat on long runs; full records are read back lazily
through :class:`LazyOutputs`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from verifiers.errors import Error, error_kind

logger = logging.getLogger("verifiers")

__all__ = [
    "DuplicateRolloutError",
    "LazyOutputs",
    "ResultsWriter",
    "RolloutSummary",
    "RunFolder",
    "RunFolderBusyError",
    "RunFolderExistsError",
    "build_metadata",
    "pair_rows",
    "pass_at_k",
    "read_results",
    "record_for",
    "record_from_state",
    "rollout_positions",
    "run_lock",
    "scan_for_resume",
    "set_timing",
    "write_metadata",
]

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"
#: lines a resume took out of results.jsonl (unreadable lines, duplicates, infrastructure errors it
#: retries), appended here byte for byte: a resume never deletes what a run wrote.
ASIDE_FILE = "results.aside.jsonl"
#: the run's clock over all its invocations (first start, time spent so far).
RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
#: more tokens than this in one rollout is a broken server's count, not a real one
MAX_USAGE_TOKENS = 10**9


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


def record_for(
    state: Mapping[str, Any],
    row: Mapping[str, Any],
    extra_columns: Sequence[str] = (),
    build: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The record of a finished rollout, built so that saving it cannot fail the run.

    Saving is part of the rollout: whatever the rollout's code did to its state, the record keeps
    the identity of the input ``row`` (``example_id``, ``rollout_index``: a reward function that
    overwrote them must not make records collide), and a state that cannot be turned into a record
    gives a record with what could be read and an error with source ``"save"``. Token counts that
    cannot be real (negative, not integers, above :data:`MAX_USAGE_TOKENS`) count as 0 and are
    flagged as an ``InvalidUsage`` warning. Values JSON cannot hold are handled by
    :meth:`ResultsWriter.write`. ``build``: an API's own record of a state (a v1 episode's line),
    instead of the classic :func:`record_from_state`.
    """
    try:
        record = (build or record_from_state)(state)
        for col in extra_columns:
            record[col] = state.get(col)
    except Exception as exc:
        record = {key: _get_quietly(state, key) for key in ("prompt", "completion", "answer", "task", "info")}
        record.update(reward=0.0, metrics={}, stop_condition="has_error", is_truncated=False, warnings=[],
                      timing={}, usage={}, trajectory=None, error=None)  # fmt: skip
        _save_error(record, exc, "the rollout's state could not be turned into a record")
    changed = []
    for key, default in (("example_id", None), ("rollout_index", 0)):
        want = row.get(key, default)
        if record.get(key) != want or type(record.get(key)) is not type(want):
            changed.append(f"{key} {record.get(key)!r} (the input's is {want!r})")
            record[key] = want
    if changed:
        _save_error(record, ValueError("the rollout's code changed " + ", ".join(changed)), "saved under the input's identity")
    _check_usage(record)
    return record


def set_timing(state: Any, key: str, value: float) -> None:
    """``state["timing"][key] = value``, also when the rollout's code removed or replaced
    ``timing`` (a cleanup hook that pops it must not stop the run)."""
    timing = state.get("timing")
    if not isinstance(timing, dict):
        timing = state["timing"] = {}
    timing[key] = value


def _get_quietly(state: Mapping[str, Any], key: str) -> Any:
    try:
        return state.get(key)
    except Exception:
        return None


def _save_error(record: dict[str, Any], exc: BaseException, what: str) -> None:
    """Record that saving needed a change: the rollout's error (reward 0) unless it already has one,
    then a ``SaveError`` warning."""
    message = f"{what}: {type(exc).__name__}: {exc}"[:2000]
    if not isinstance(record.get("error"), dict):
        record["error"] = {"type": type(exc).__name__, "message": message, "source": "save", "kind": "environment"}
        record["reward"] = 0.0
        record["stop_condition"] = "has_error"
    else:
        warnings = record.get("warnings")
        if not isinstance(warnings, list):
            warnings = record["warnings"] = []
        warnings.append({"type": "SaveError", "message": message, "source": "save"})


def _check_usage(record: dict[str, Any]) -> None:
    usage = record.get("usage")
    if not isinstance(usage, dict):
        usage = record["usage"] = {}
    bad = {}
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key, 0)
        if type(value) is bool or not isinstance(value, int) or not 0 <= value <= MAX_USAGE_TOKENS:
            bad[key] = value
            usage[key] = 0
    if bad:
        warnings = record.get("warnings")
        if not isinstance(warnings, list):
            warnings = record["warnings"] = []
        warnings.append({
            "type": "InvalidUsage",
            "message": f"the server reported token counts that cannot be real ({_short(bad)}); counted as 0",
            "source": "model",
        })


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


_SURROGATES = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 200


def _saveable(value: Any, depth: int = 0, seen: frozenset[int] = frozenset()) -> Any:
    """``value`` with what JSON (UTF-8) cannot hold replaced: lone surrogates by U+FFFD, keys that
    are not str/int/float/bool/None by their repr, cycles and absurd depth by a marker."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth > _MAX_DEPTH or id(value) in seen:
        return "<not saved: nested too deep or refers to itself>"
    inner = seen | {id(value)}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            key = k if isinstance(k, str | int | float | bool) or k is None else repr(k)
            out[_saveable(key) if isinstance(key, str) else key] = _saveable(v, depth + 1, inner)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [_saveable(v, depth + 1, inner) for v in value]
    try:
        converted = _json_default(value)
    except Exception:
        converted = "<not saved: unprintable object>"
    if converted is value or isinstance(converted, str):
        return _saveable(str(converted), depth + 1, inner)
    return _saveable(converted, depth + 1, inner)


_fast_codec: tuple[Callable[[Any], bytes], Callable[[bytes], Any]] | None = None


def _fast_encode(record: dict[str, Any]) -> bytes | None:
    """``record`` as JSON by msgspec (several times faster than ``json.dumps``), or None where
    msgspec would write something other than what :func:`dumps` writes. The line is decoded back
    and must equal ``record``: that holds only for JSON's own types (NaN, which ``json`` writes as
    ``NaN``, never equals itself; bytes, tuples, dates, models and non-``str`` keys come back as
    something else or fail to encode), so any other record goes through :func:`dumps`."""
    global _fast_codec
    if _fast_codec is None:
        import msgspec

        _fast_codec = (msgspec.json.Encoder().encode, msgspec.json.Decoder().decode)
    encode, decode = _fast_codec
    try:
        line = encode(record)
        if decode(line) == record:
            return line
    except Exception:  # a lone surrogate, an unknown type, a huge int ...: dumps decides
        pass
    return None


class HeadedRecord(dict):
    """A record whose leading keys an API's own serializer already wrote as JSON: ``head`` is that
    JSON object without its closing brace (``b'{"id":...'``), the dict holds the keys that follow
    (the engine's). The writer splices the two (:func:`encode_record`) instead of building the
    whole record as Python objects and checking its encoding; :meth:`full` is the plain record
    (the head decoded, then the dict's keys), for every other use. The head's keys must not
    repeat in the dict."""

    __slots__ = ("head",)

    def __init__(self, head: bytes, rest: Mapping[str, Any]) -> None:
        super().__init__(rest)
        self.head: bytes | None = head

    def full(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.head + b"}") if self.head is not None else {}
        out.update(self)
        return out


def plain_record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a plain dict (a :class:`HeadedRecord` made whole)."""
    return record.full() if isinstance(record, HeadedRecord) else record


def encode_record(record: dict[str, Any]) -> bytes:
    """One line of results.jsonl for ``record``; a record JSON cannot hold as it is is saved with
    the offending values replaced and the change recorded (``record`` is updated in place).

    A record of JSON's own types only (the common case) is encoded by
    msgspec (:func:`_fast_encode`: the same JSON values, compact); any other goes through
    :func:`dumps`. A :class:`HeadedRecord`'s head is written as it is, its dict after it; when
    the dict cannot be written that way, the whole record goes the plain way."""
    if isinstance(record, HeadedRecord) and record.head is not None:
        rest = _fast_encode(record)  # msgspec writes (and compares) a dict subclass as its dict
        if rest is not None:
            return b"".join((record.head, b"," + rest[1:] if rest != b"{}" else b"}", b"\n"))
        whole = record.full()
        record.clear()
        record.update(whole)
        record.head = None
    line = _fast_encode(record)
    if line is not None:
        return line + b"\n"
    try:
        return dumps(record).encode("utf-8") + b"\n"
    except Exception as exc:  # UnicodeEncodeError, TypeError (a tuple key), ValueError (a cycle) ...
        problem = exc
    cleaned = _saveable(record)
    record.clear()
    record.update(cleaned)
    _save_error(record, problem, "the record could not be saved as it is; unsaveable values were replaced")
    return dumps(record).encode("utf-8") + b"\n"


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
    error_kind: str | None = None  # verifiers.errors.ERROR_KINDS; "infra" is not a score

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
            metrics={str(k): _finite(v) for k, v in metrics.items()} if metrics and isinstance(metrics, dict) else {},
            error_source=(err.get("source") or "unknown") if isinstance(err, dict) else (None if err is None else "unknown"),
            error_kind=error_kind(err),
            prompt_tokens=_tokens(usage.get("prompt_tokens")),
            completion_tokens=_tokens(usage.get("completion_tokens")),
            is_truncated=bool(rec.get("is_truncated")),
            stop_condition=str(stop) if stop else None,
            warnings=(
                tuple(str(w.get("type") or "warning") if isinstance(w, dict) else "warning" for w in warnings)
                if warnings and isinstance(warnings, list)
                else ()
            ),
        )


def _finite(value: Any) -> float:
    """A number for the summary: a missing, non-numeric, NaN or infinite value counts as 0.0."""
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _tokens(value: Any) -> int:
    """A token count for the totals: one that cannot be real (negative, absurd) counts as 0."""
    number = _int(value)
    return number if 0 <= number <= MAX_USAGE_TOKENS else 0


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
        # where the next line starts: the file's end, then moved by each line written (the run
        # folder's lock keeps every other writer out), instead of asking the file each time
        self._end = self._fh.seek(0, os.SEEK_END)

    def write(self, record: dict[str, Any]) -> int:
        """Append one record; returns its byte offset in the file.

        A record JSON cannot hold as it is (a lone surrogate, a tuple key) is saved with those
        values replaced and an error recorded on it (see :func:`encode_record`; ``record`` is
        updated in place), so one bad value never stops the run.
        """
        line = encode_record(record)
        offset = self._end
        self._fh.write(line)
        self._fh.flush()
        self._end = offset + len(line)
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
    # An infrastructure failure says nothing about the model: it is counted, never scored.
    scored = [s for s in summaries if s.error_kind != "infra"]
    n_scored = len(scored)
    rewards = [s.reward for s in scored]
    metric_names: list[str] = []
    for s in scored:
        for k in s.metrics:
            if k not in metric_names:
                metric_names.append(k)
    avg_metrics = {k: (sum(s.metrics.get(k, 0.0) for s in scored) / n_scored if n_scored else 0.0) for k in metric_names}
    by_example: dict[Any, list[float]] = {}
    for s in summaries:
        by_example.setdefault(hashable_key(s.example_id), [])
    for s in scored:
        by_example[hashable_key(s.example_id)].append(s.reward)
    ks = sorted({1, *[2**i for i in range(1, 12) if 2**i <= rollouts_per_example], max(1, rollouts_per_example)})
    pass_k: dict[str, float] = {}
    for k in ks:
        vals = [pass_at_k(len(rs), sum(r >= pass_threshold for r in rs), k) for rs in by_example.values() if rs]
        pass_k[str(k)] = sum(vals) / len(vals) if vals else 0.0
    errors_by_source: dict[str, int] = {}
    errors_by_kind: dict[str, int] = {}
    stop_conditions: dict[str, int] = {}
    warnings_by_type: dict[str, int] = {}
    for s in summaries:
        if s.error_source:
            errors_by_source[s.error_source] = errors_by_source.get(s.error_source, 0) + 1
            kind = s.error_kind or "environment"
            errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
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
        "num_scored": n_scored,
        "avg_reward": sum(rewards) / n_scored if n_scored else 0.0,
        "std_reward": _pstdev(rewards),
        "avg_metrics": avg_metrics,
        "pass_at_k": pass_k,
        "num_errors": sum(errors_by_source.values()),
        "errors_by_source": errors_by_source,
        "num_infra_errors": errors_by_kind.get("infra", 0),
        "errors_by_kind": errors_by_kind,
        "error_rate": sum(errors_by_source.values()) / n if n else 0.0,
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

    scored: int = 0

    def add(self, summary: RolloutSummary) -> None:
        self.summaries.append(summary)
        self.done += 1
        if summary.error_kind != "infra":
            self.scored += 1
            self.reward_sum += summary.reward
        if summary.error_source:
            self.errors += 1
        if self.callback is not None:
            avg = self.reward_sum / self.scored if self.scored else 0.0
            event = {"done": self.done, "total": self.total, "avg_reward": avg, "errors": self.errors}
            try:
                self.callback(event)
            except Exception:  # a broken progress display must not stop the run
                logging.getLogger("verifiers").warning("on_progress callback failed", exc_info=True)

    def start_from(self, summaries: list[RolloutSummary]) -> None:
        """Count the rollouts a resumed run already has."""
        self.summaries = summaries
        for summary in summaries:
            self.done += 1
            if summary.error_kind != "infra":
                self.scored += 1
                self.reward_sum += summary.reward
            if summary.error_source:
                self.errors += 1


# ---------------------------------------------------------------------------------------------------
# The run folder: identities, lock, resume
# ---------------------------------------------------------------------------------------------------


class DuplicateRolloutError(Error, ValueError):
    """Two inputs of one run have the same ``(example_id, rollout_index)``: their records would
    collide (and a resume would take one for the other)."""


class RunFolderBusyError(Error, RuntimeError):
    """Another process is writing to this run folder."""


class RunFolderExistsError(Error, FileExistsError):
    """The results path already holds a run and ``resume`` was not asked for."""


def rollout_positions(groups: Sequence[Sequence[Mapping[str, Any]]]) -> dict[tuple[Any, Any], int]:
    """``(example_id, rollout_index) -> group position`` of a run's inputs; refuses repeats.

    A dataset whose ``example_id`` column repeats a value would give two rollouts one identity:
    records then collide and a resume skips a prompt it never ran. Refused before anything runs,
    naming the repeated ids.
    """
    position: dict[tuple[Any, Any], int] = {}
    repeated: dict[Any, int] = {}
    for gi, group in enumerate(groups):
        for row in group:
            key = (hashable_key(row.get("example_id")), row.get("rollout_index", 0))
            if key in position:
                repeated[key[0]] = repeated.get(key[0], 1) + 1
            position[key] = gi
    if repeated:
        shown = ", ".join(f"{eid!r} ({n} times)" for eid, n in list(repeated.items())[:10])
        more = f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""
        raise DuplicateRolloutError(
            f"example_id values repeat in the inputs: {shown}{more}; every dataset row needs its own "
            "example_id (drop the column to number rows automatically, or make its values unique)"
        )
    return position


def pair_rows(
    group: Sequence[Mapping[str, Any]], states: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each finished state with the input row it came from: by position when the states still say
    who they are (an overridden group runner may reorder them), else by position."""
    by_key = {(hashable_key(r.get("example_id")), r.get("rollout_index", 0)): r for r in group}
    for i, st in enumerate(states):
        try:
            row = by_key.get((hashable_key(st.get("example_id")), st.get("rollout_index", 0)))
        except Exception:
            row = None
        if row is None:
            row = group[i] if i < len(group) else {"example_id": st.get("example_id"), "rollout_index": 0}
        yield row, st


_HELD_LOCKS: dict[str, list[Any]] = {}  # real path -> [file object, holders in this process]


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the run folder's lock (``run.lock``, ``flock``-ed) while a run writes to it.

    A second process gets :class:`RunFolderBusyError` at once; the kernel drops the lock when its
    holder dies, so a lock left by a killed run is never in the way. Re-entrant within a process
    (``vf eval`` holds it around the engine, which takes it too).
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    lock_path = path / LOCK_FILE
    real = os.path.realpath(lock_path)
    held = _HELD_LOCKS.get(real)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    fh = open(lock_path, "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        raise RunFolderBusyError(
            f"another run is writing to {path}" + (f" ({holder})" if holder else "")
            + "; wait for it to finish (or stop it) before resuming this folder"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()}\n")
    fh.flush()
    _HELD_LOCKS[real] = [fh, 1]
    try:
        yield
    finally:
        entry = _HELD_LOCKS[real]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD_LOCKS[real]
            with contextlib.suppress(OSError):
                fh.seek(0)
                fh.truncate()
            fh.close()  # closing the descriptor releases the flock


@dataclass
class ResumeScan:
    """What a resume found in results.jsonl (read line by line: memory does not grow with the file)."""

    done: set[tuple[Any, Any]] = field(default_factory=set)
    summaries: list[RolloutSummary] = field(default_factory=list)
    kept: list[tuple[tuple[int, Any], int]] = field(default_factory=list)  # (order key, byte offset)
    set_aside: int = 0  # unreadable lines and duplicates moved to results.aside.jsonl
    retried: int = 0  # infrastructure errors taken out to run again


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as fh:
        offset = 0
        for line in fh:
            yield offset, line
            offset += len(line)


def aside_path(path: Path) -> Path:
    """Where lines taken out of a run's records file go: ``results.jsonl`` -> ``results.aside.jsonl``."""
    return path.with_name(f"{path.stem}.aside.jsonl")


def scan_for_resume(
    folder: str | os.PathLike[str],
    position: Mapping[tuple[Any, Any], int],
    *,
    name: str | None = None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> ResumeScan:
    """Read a run's records for a resume, streaming, and tidy the file so that it holds exactly one
    usable record per finished rollout.

    Kept: the first readable record of each rollout. Taken out (appended to
    ``results.aside.jsonl`` byte for byte, never deleted): an unreadable line anywhere (a truncated
    last line is what a killed run leaves; a bad line in the middle is reported), a repeated
    record, and a record whose error is an infrastructure failure, whose rollout runs again (as does
    one that ``keep`` refuses: a v1 episode that did not complete). ``name``: the records file
    (default ``results.jsonl``).
    """
    path = Path(folder) / (name or RESULTS_FILE)
    scan = ResumeScan()
    if not path.exists():
        return scan
    drop: list[int] = []  # line numbers taken out (few, or the retried infrastructure errors)
    new_offset = 0
    tail_only = True  # the only line taken out is an unfinished last line: a truncate will do
    for number, (_, line) in enumerate(_iter_lines(path)):
        rec: Any = None
        if line.endswith(b"\n"):
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
        if not isinstance(rec, dict):
            drop.append(number)
            scan.set_aside += 1
            if line.endswith(b"\n"):
                tail_only = False
                logger.warning("%s line %d is not a readable record; set aside in %s", path, number + 1,
                               aside_path(path).name)  # fmt: skip
            continue
        k = (hashable_key(rec.get("example_id")), rec.get("rollout_index", 0))
        if k in scan.done:
            drop.append(number)
            scan.set_aside += 1
            tail_only = False
            continue
        summary = RolloutSummary.from_record(rec)
        if k in position and (summary.error_kind == "infra" or (keep is not None and not keep(rec))):
            drop.append(number)
            scan.retried += 1
            tail_only = False
            continue
        if k in position:
            scan.done.add(k)
            scan.summaries.append(summary)
            scan.kept.append(((position[k], k[1]), new_offset))
        new_offset += len(line)
    if drop:
        _take_out(path, drop, truncate_at=new_offset if tail_only else None)
    return scan


def _take_out(path: Path, drop: list[int], truncate_at: int | None) -> None:
    """Move the lines numbered ``drop`` from ``path`` to the aside file (copied there first, then
    the results file is rewritten beside itself and swapped in: a crash leaves one or the other)."""
    aside = aside_path(path)
    wanted = set(drop)
    with open(aside, "ab") as out:
        for number, (_, line) in enumerate(_iter_lines(path)):
            if number in wanted:
                out.write(line if line.endswith(b"\n") else line + b"\n")
        out.flush()
        os.fsync(out.fileno())
    if truncate_at is not None:
        with open(path, "r+b") as fh:
            fh.truncate(truncate_at)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        for number, (_, line) in enumerate(_iter_lines(path)):
            if number not in wanted:
                out.write(line)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


class RunFolder:
    """One invocation's hold on a run folder: the lock, the resume, the clock over invocations.

    ``open()`` takes the lock, refuses a folder that already holds a run unless resuming
    (:class:`RunFolderExistsError`), and on resume reads what is there (:func:`scan_for_resume`).
    ``close()`` adds this invocation's time to ``run.json`` so that a resumed run's ``time_ms``
    and ``started_at`` cover all its invocations.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        resume: bool,
        results_file: str | None = None,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.resume = resume
        self.results_file = results_file or RESULTS_FILE
        self.keep = keep
        self._lock: contextlib.ExitStack | None = None
        self.started = datetime.now(UTC)
        self.previous_ms = 0.0
        self.first_started: str | None = None
        self.invocations = 1

    def open(self, position: Mapping[tuple[Any, Any], int]) -> ResumeScan:
        stack = contextlib.ExitStack()
        stack.enter_context(run_lock(self.folder))
        self._lock = stack
        try:
            results = self.folder / self.results_file
            if not self.resume:
                if results.exists() and results.stat().st_size > 0:
                    raise RunFolderExistsError(
                        f"{self.folder} already holds a run ({self.results_file} is not empty); resume it "
                        "(resume=True, vf eval --resume), or save this run to another folder"
                    )
                return ResumeScan()
            self._read_clock()
            return scan_for_resume(self.folder, position, name=self.results_file, keep=self.keep)
        except BaseException:
            self.close(0.0)
            raise

    def _read_clock(self) -> None:
        for name in (RUN_FILE, METADATA_FILE):  # metadata.json: runs saved before run.json existed
            try:
                data = json.loads((self.folder / name).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("started_at"), str):
                self.first_started = data["started_at"]
                self.previous_ms = max(0.0, _finite(data.get("time_ms")))
                self.invocations = int(_finite(data.get("invocations")) or 1) + 1
                return

    def clock(self, elapsed_ms: float) -> dict[str, Any]:
        """``started_at``, ``time_ms`` and ``invocations`` of the run so far."""
        return {
            "started_at": self.first_started or self.started.isoformat(),
            "time_ms": self.previous_ms + elapsed_ms,
            "invocations": self.invocations,
        }

    def close(self, elapsed_ms: float) -> None:
        if self._lock is None:
            return
        try:
            if elapsed_ms > 0:
                path = self.folder / RUN_FILE
                tmp = path.with_suffix(".json.tmp")
                tmp.write_text(json.dumps(self.clock(elapsed_ms)) + "\n")
                os.replace(tmp, path)
        except OSError:
            logger.warning("could not write %s", self.folder / RUN_FILE, exc_info=True)
        finally:
            self._lock.close()
            self._lock = None
