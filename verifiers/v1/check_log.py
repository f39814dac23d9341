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
import os
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


def _is_final(row: Any, key: str, mode: str) -> bool:
    if not isinstance(row, dict) or row.get("task_key") != key or row.get("mode") != mode:
        return False
    reason = row.get("reason")
    if reason not in FINAL or row.get("valid") is not FINAL[reason]:
        return False
    if mode in ("gold", "setup"):
        return True
    noop = row.get("noop") if mode == "all" else row  # a noop check that never scored is not final
    return isinstance(noop, dict) and isinstance(noop.get("rewards"), dict)


def summarize(rows: Sequence[Mapping[str, Any]], total: int, mode: str) -> dict[str, Any]:
    """The original's summary of ``rows`` out of ``total`` selected tasks."""
    counts = Counter(row.get("reason") for row in rows)
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
            by_reason = Counter(row[check].get("reason") for row in rows if isinstance(row.get(check), dict))
            checks[check] = {reason: by_reason[reason] for reason in REASONS} | {"missing": missing}
        summary["checks"] = checks
    return summary


class CheckLog:
    """``results.jsonl`` and ``summary.json`` in ``folder`` for one ``vf validate`` run.

    :meth:`plan` is called once with the selected tasks' keys; it starts the file afresh (or, with
    ``resume``, keeps the final rows) and says which positions still need a check. :meth:`add`
    appends one finished task's row. :meth:`write_summary` writes the counts and the verdict."""

    def __init__(self, folder: Path, *, resume: bool = False) -> None:
        self.folder = Path(folder)
        self.resume = resume
        self.rows: list[dict[str, Any]] = []
        self.mode = "all"
        self.total = 0

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
        _write_atomic(self.results_path, "".join(_line(r) for r in rows))
        return todo

    def add(self, row: dict[str, Any]) -> None:
        """Append one finished task's row (a whole line per write, so a cut leaves whole lines)."""
        self.rows.append(row)
        with self.results_path.open("a", encoding="utf-8") as f:
            f.write(_line(row))

    def summary(self) -> dict[str, Any]:
        return summarize(self.rows, self.total, self.mode)

    def write_summary(self, verdict: Mapping[str, Any] | None) -> Path:
        path = self.folder / SUMMARY_FILE
        body = {**self.summary(), "verdict": dict(verdict) if verdict is not None else None}
        _write_atomic(path, json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")
        return path
