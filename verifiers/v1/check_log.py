"""The run folder of ``vf validate`` on a v1 package: one row per task in ``results.jsonl``, the
run's counts in ``summary.json``, and what ``--resume`` keeps.

The files have the original ``vf-validate``'s shapes, so a script written against its run folders
reads ours:

* ``results.jsonl``: one JSON object per task and model-free check, appended as each task
  finishes (an interrupted run keeps what it finished): ``index``, ``name``, ``mode``
  (``setup`` | ``gold`` | ``noop`` | ``all``), ``valid`` (True, False or None), ``reason``
  (``valid`` | ``invalid`` | ``unchecked`` | ``error`` | ``timeout``), ``elapsed``, ``error``,
  ``error_type``, ``task_position`` (the task's place in the selection) and ``task_key`` (its
  content hash). A noop row adds ``reward`` and ``rewards`` (the untouched task's scores); an
  ``all`` row holds its ``gold`` and ``noop`` rows.
* ``summary.json``: ``mode``, ``total``, ``recorded``, ``terminal``, ``owed``, ``outcomes`` (a count
  per reason and ``missing``), ``valid_rate`` and, in the default mode, ``checks`` (the gold and
  noop counts); ours adds ``verdict``, the whole report ``vf check --json`` prints.

``--resume`` keeps every row that reached a verdict (valid, invalid, unchecked) for a task still in
the selection and checked the same way, and runs the rest again (missing, errored, timed out).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["REASONS", "RESULTS_FILE", "SUMMARY_FILE", "CheckLog", "summarize"]

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
REASONS = ("valid", "invalid", "unchecked", "error", "timeout")
#: The reasons that are a verdict (kept by --resume), with the ``valid`` value each goes with.
FINAL = {"valid": True, "invalid": False, "unchecked": None}


def _line(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=str) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _final_check(row: Any, mode: str) -> bool:
    """``row`` is a check's verdict: a reason that is one, the ``valid`` it goes with, and for a
    noop check the untouched task's scores (an invalid one: the reward that passed)."""
    if not isinstance(row, dict) or row.get("mode") != mode:
        return False
    reason = row.get("reason")
    if not isinstance(reason, str) or reason not in FINAL or row.get("valid") is not FINAL[reason]:
        return False
    if mode != "noop":
        return True
    reward = row.get("reward")
    scored = reward is None or (isinstance(reward, int | float) and not isinstance(reward, bool) and math.isfinite(reward))
    return isinstance(row.get("rewards"), dict) and scored and (reason != "invalid" or reward is not None)


def _is_final(row: Any, key: str, mode: str) -> bool:
    """Whether ``--resume`` keeps ``row`` for the task ``key`` checked in ``mode``."""
    if not isinstance(row, dict) or row.get("task_key") != key or not _final_check(row, mode):
        return False
    if mode != "all":
        return True
    gold, noop = row.get("gold"), row.get("noop")
    return _final_check(gold, "gold") and _final_check(noop, "noop")


def summarize(rows: Sequence[Mapping[str, Any]], total: int, mode: str) -> dict[str, Any]:
    """The original's summary of ``rows`` out of ``total`` selected tasks."""
    counts = Counter(row.get("reason") for row in rows if isinstance(row.get("reason"), str))
    missing = max(0, total - len(rows))
    outcomes: dict[str, int] = {reason: counts[reason] for reason in REASONS}
    outcomes["missing"] = missing
    checked = outcomes["valid"] + outcomes["invalid"]
    summary: dict[str, Any] = {
        "mode": mode,
        "total": total,
        "recorded": len(rows),
        "terminal": checked + outcomes["unchecked"],
        "owed": missing + outcomes["error"] + outcomes["timeout"],
        "outcomes": outcomes,
        "valid_rate": round(outcomes["valid"] / (total - outcomes["unchecked"]), 6) if checked else None,
    }
    if mode == "all":
        checks: dict[str, dict[str, int]] = {}
        for check in ("gold", "noop"):
            subs = [row[check] for row in rows if isinstance(row.get(check), dict)]
            by_reason = Counter(sub.get("reason") for sub in subs if isinstance(sub.get("reason"), str))
            checks[check] = {reason: by_reason[reason] for reason in REASONS} | {"missing": missing}
        summary["checks"] = checks
    return summary


class CheckLog:
    """``results.jsonl`` and ``summary.json`` in ``folder`` for one ``vf validate`` run.

    :meth:`plan` is called once with the selected tasks' keys; it starts the file afresh (or, with
    ``resume``, keeps the final rows) and says which positions still need a check. :meth:`add`
    appends one finished task's row. :meth:`write_summary` writes the counts and the verdict."""

    #: ``summary.json`` is rewritten at most this often while rows come in (and at the end).
    SUMMARY_EVERY_S = 2.0

    def __init__(self, folder: Path, *, resume: bool = False, mode: str = "all") -> None:
        self.folder = Path(folder)
        self.resume = resume
        self.rows: list[dict[str, Any]] = []
        self.mode = mode
        self.total = 0
        self.planned = False  # plan() ran: the tasks were read and the rows are this run's
        self._summary_at = 0.0

    @property
    def results_path(self) -> Path:
        return self.folder / RESULTS_FILE

    def _kept(self, keys: Sequence[str], mode: str) -> dict[str, list[dict[str, Any]]]:
        wanted = Counter(keys)
        kept: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if not self.results_path.exists():
            return kept
        with self.results_path.open("rb") as f:
            for raw in f:
                try:
                    row = json.loads(raw)
                except (ValueError, RecursionError):  # a line cut short by an interrupted write, or not ours
                    continue
                key = row.get("task_key") if isinstance(row, dict) else None
                if isinstance(key, str) and len(kept[key]) < wanted[key] and _is_final(row, key, mode):
                    kept[key].append(row)
        return kept

    def plan(self, keys: Sequence[str], mode: str) -> list[bool]:
        """Whether each selected position (by task key, in order) still needs its check."""
        self.mode, self.total = mode, len(keys)
        self.folder.mkdir(parents=True, exist_ok=True)
        kept = self._kept(keys, mode) if self.resume else {}
        # The re-runs take the first positions of a key, the kept rows the later ones (duplicate
        # task content is interchangeable), so every position is reported once.
        count = Counter(keys)
        owed = {key: count[key] - len(rows) for key, rows in kept.items()}
        todo: list[bool] = []
        used: Counter[str] = Counter()
        rows: list[dict[str, Any]] = []
        for position, key in enumerate(keys):
            if key in kept and owed[key] <= 0:
                rows.append({**kept[key][used[key]], "task_position": position})
                used[key] += 1
                todo.append(False)
            else:
                if key in kept:
                    owed[key] -= 1
                todo.append(True)
        self.rows = rows
        self.planned = True
        _write_atomic(self.results_path, "".join(_line(r) for r in rows))
        self.write_summary(None)
        return todo

    def add(self, row: dict[str, Any]) -> None:
        """Append one finished task's row (a whole line per write, so a cut leaves whole lines)."""
        self.rows.append(row)
        with self.results_path.open("a", encoding="utf-8") as f:
            f.write(_line(row))
        if time.monotonic() - self._summary_at >= self.SUMMARY_EVERY_S:
            self.write_summary(None)  # an interrupted run keeps counts that are at most a moment old

    def _rows_on_disk(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        if self.results_path.exists():
            with self.results_path.open("rb") as f:
                for raw in f:
                    try:
                        row = json.loads(raw)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(row, dict):
                        rows.append(row)
        return rows

    def summary(self) -> dict[str, Any]:
        return summarize(self.rows, self.total, self.mode)

    def write_summary(self, verdict: Mapping[str, Any] | None) -> Path:
        """``summary.json``: the counts and ``verdict`` (None while the run goes on). When the checks
        never started (the package did not load), the rows already in the folder are counted as
        they are."""
        path = self.folder / SUMMARY_FILE
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.planned:
            self.rows = self._rows_on_disk()
            self.total = len(self.rows)
        body = {**self.summary(), "verdict": dict(verdict) if verdict is not None else None}
        self._summary_at = time.monotonic()
        _write_atomic(path, json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")
        return path
