"""``vf results PATH``: show a saved run, or list the runs under a folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from verifiers.cli.errors import UserError
from verifiers.cli.render import listing, print_samples, read_jsonl, stop_conditions_text, summary_table

RESULTS = "results.jsonl"
METADATA = "metadata.json"


def find_runs(root: Path, max_depth: int = 4) -> list[Path]:
    """Run folders (holding results.jsonl or metadata.json) under ``root``, newest first."""
    runs: set[Path] = set()
    base_depth = len(root.parts)
    for name in (RESULTS, METADATA):
        for path in root.rglob(name):
            if len(path.parts) - base_depth <= max_depth:
                runs.add(path.parent)
    return sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)


def load_metadata(run: Path, records: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], bool]:
    """The run's metadata; for a run killed before writing it, a summary computed from its records.

    Returns ``(metadata, complete)``.
    """
    from verifiers.utils.results import RolloutSummary, build_metadata

    meta_path = run / METADATA
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{meta_path} is not valid JSON: {exc}")
        if isinstance(meta, dict) and "stop_conditions" not in meta and records:
            # a run saved before stop conditions were counted: count them from its records
            counted = build_metadata([RolloutSummary.from_record(r) for r in records], rollouts_per_example=1)
            meta["stop_conditions"] = counted["stop_conditions"]
        return meta, True
    if records is None:
        records = read_jsonl(run / RESULTS) if (run / RESULTS).is_file() else []
    summaries = [RolloutSummary.from_record(r) for r in records]
    per_example = max((int(r.get("rollout_index") or 0) + 1 for r in records), default=1)
    return build_metadata(summaries, rollouts_per_example=per_example), False


def show_results(
    path: Path, *, samples: int = 3, errors_only: bool = False, console: Console | None = None
) -> None:
    console = console or Console()
    if not path.exists():
        raise UserError(f"no such file or folder: {path}")
    run = path.parent if path.is_file() else path
    if not ((run / RESULTS).is_file() or (run / METADATA).is_file()):
        runs = find_runs(run)
        if not runs:
            raise UserError(f"no saved runs under {path} (looked for {RESULTS} / {METADATA})")
        _list_runs(console, runs, root=run)
        return
    records = read_jsonl(run / RESULTS) if (run / RESULTS).is_file() else []
    metadata, complete = load_metadata(run, records)
    console.print(summary_table(metadata, title=str(run)))
    if not complete:
        console.print(
            f"[yellow]no {METADATA}: the run did not finish; summary computed from {len(records)} saved rollouts[/]"
        )
    chosen = [r for r in records if r.get("error")] if errors_only else records
    if errors_only and not chosen:
        console.print("no rollout recorded an error")
    if samples > 0 and chosen:
        print_samples(console, chosen[:samples])
    rewards = [float(r.get("reward") or 0.0) for r in records]
    if rewards:
        console.print(
            "rewards: " + " ".join(f"{x:.2f}" for x in rewards[:40]) + (" …" if len(rewards) > 40 else "")
        )


def _list_runs(console: Console, runs: list[Path], root: Path) -> None:
    # run ids are what the next command needs (vf results RUN, --resume RUN): never cut or wrapped
    rows = []
    for run in runs:
        try:
            meta, complete = load_metadata(run)
        except UserError:
            meta, complete = {}, False
        rows.append([
            str(run.relative_to(root)) if run.is_relative_to(root) else str(run),
            str(meta.get("env_id", "?")),
            str(meta.get("model", "?")),
            str(meta.get("num_rollouts", "?")),
            f"{float(meta.get('avg_reward') or 0.0):.3f}",
            str(meta.get("num_errors", 0)),
            stop_conditions_text(meta.get("stop_conditions") or {}).plain,
            str(meta.get("finished_at") or ("unfinished" if not complete else "?"))[:19].replace("T", " "),
        ])
    listing(console, ["run", "environment", "model", "rollouts", "reward", "errors", "stopped", "finished"],
            rows, title=f"runs under {root}")
    console.print("show one with: vf results RUN_FOLDER")
