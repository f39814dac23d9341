"""The classic ``Environment.make_dataset``: evaluation results as a ``datasets.Dataset``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.classic.bridge import SyncOrAsync

__all__ = ["make_dataset"]


def make_dataset(
    results: Any, push_to_hub: bool = False, hub_name: str | None = None, state_columns: Sequence[str] | None = None
) -> Any:
    """A ``datasets.Dataset`` of evaluation results (prompt, completion, answer, task, reward, one
    column per metric, and any ``state_columns``). Pushing to the Hugging Face Hub is not
    supported (no network); save the run folder instead."""
    if push_to_hub:
        raise ValueError("push_to_hub is not supported; use save_results=True and `vf push` for the Environments Hub")
    from datasets import Dataset

    if isinstance(results, SyncOrAsync):
        results = results.result()
    records = list(results["outputs"]) if isinstance(results, Mapping) and "outputs" in results else list(results)
    metric_names: list[str] = []
    for rec in records:
        for k in rec.get("metrics") or {}:
            if k not in metric_names:
                metric_names.append(k)
    rows = []
    for rec in records:
        row = {k: rec.get(k) for k in ("example_id", "prompt", "completion", "answer", "task", "reward")}
        row["info"] = json.dumps(rec.get("info") or {})
        for m in metric_names:
            row[m] = (rec.get("metrics") or {}).get(m, 0.0)
        for col in state_columns or ():
            row[col] = rec.get(col)
        rows.append(row)
    return Dataset.from_list(rows)
