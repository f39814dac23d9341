"""Rich renderings shared by ``vf eval`` and ``vf results``: the run summary and sample rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Records of a results file; a truncated last line (a killed run) is skipped, not fatal."""
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(records) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_table(metadata: dict[str, Any], title: str | None = None) -> Table:
    """Reward mean/std, each metric, pass@k, errors by source, tokens and time of a run."""
    table = Table(title=title, show_header=False, title_justify="left", pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    n = metadata.get("num_rollouts")
    if metadata.get("env_id") is not None:
        table.add_row("environment", str(metadata["env_id"]))
    if metadata.get("model") is not None:
        table.add_row("model", str(metadata["model"]))
    if n is not None:
        table.add_row(
            "rollouts",
            f"{n} ({metadata.get('num_examples', '?')} examples x {metadata.get('rollouts_per_example', '?')})",
        )
    if "avg_reward" in metadata:
        table.add_row(
            "reward", f"{_fmt(metadata.get('avg_reward'))} ± {_fmt(metadata.get('std_reward') or 0.0)}"
        )
    for name, value in (metadata.get("avg_metrics") or {}).items():
        table.add_row(f"  {name}", _fmt(value))
    pass_k = metadata.get("pass_at_k") or {}
    if pass_k:
        table.add_row("pass@k", "  ".join(f"@{k}: {_fmt(v)}" for k, v in pass_k.items()))
    n_err = int(metadata.get("num_errors") or 0)
    by_source = metadata.get("errors_by_source") or {}
    errors = str(n_err)
    if by_source:
        errors += "  (" + ", ".join(f"{src}: {count}" for src, count in sorted(by_source.items())) + ")"
    table.add_row("errors", Text(errors, style="red" if n_err else ""))
    n_infra = int(metadata.get("num_infra_errors") or 0)
    if n_infra:  # not scores: the reward above is over the other rollouts
        table.add_row("", Text(f"{n_infra} infrastructure, not in the reward (--resume runs them again)", style="red"))
    stops = metadata.get("stop_conditions") or {}
    if stops:
        table.add_row("stopped", stop_conditions_text(stops, int(metadata.get("num_truncated") or 0)))
    warnings = metadata.get("warnings_by_type") or {}
    if warnings:
        table.add_row(
            "warnings",
            Text(", ".join(f"{name}: {count}" for name, count in sorted(warnings.items())), style="yellow"),
        )
    usage = metadata.get("usage") or {}
    if usage:
        table.add_row(
            "tokens",
            f"prompt {usage.get('prompt_tokens', 0):,}  completion {usage.get('completion_tokens', 0):,}"
            f"  (per rollout {_fmt(float(usage.get('avg_prompt_tokens') or 0), 1)}"
            f" + {_fmt(float(usage.get('avg_completion_tokens') or 0), 1)})",
        )
    time_ms = metadata.get("time_ms")
    if time_ms:
        seconds = float(time_ms) / 1000
        rate = f"  ({int(n) / seconds:.1f} rollouts/s)" if n and seconds > 0 else ""
        table.add_row("time", f"{seconds:.2f} s{rate}")
    if metadata.get("sampling_args"):
        table.add_row("sampling", json.dumps(metadata["sampling_args"], sort_keys=True))
    if metadata.get("path"):
        table.add_row("path", str(metadata["path"]))
    return table


#: Stop conditions that mean the rollout was cut short rather than finished by the environment.
CUT_SHORT = frozenset({"prompt_too_long", "timeout", "has_error", "max_total_completion_tokens_reached"})


#: What "truncated" (a record's ``is_truncated``) means, said where the count is shown.
TRUNCATED_MEANS = "ended by a limit (context length, token budget or time), not by the environment"


def stop_conditions_text(stops: dict[str, Any], truncated: int = 0) -> Text:
    """``max_turns_reached: 8, prompt_too_long: 2 (2 truncated: ended by a limit ...)``, cut-short ones
    highlighted."""
    text = Text()
    for i, (name, count) in enumerate(sorted(stops.items(), key=lambda kv: (-int(kv[1]), kv[0]))):
        if i:
            text.append(", ")
        text.append(f"{name}: {count}", style="bold yellow" if name in CUT_SHORT else "")
    if truncated:
        text.append(f"  ({truncated} truncated: {TRUNCATED_MEANS})", style="bold yellow")
    return text


def printable(text: str) -> str:
    """Escape control characters (a random model emits ESC and friends, which would drive the terminal)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode() for c in text)


def message_text(messages: Any, limit: int = 400) -> str:
    """A compact text form of a prompt or completion (chat messages or a plain string)."""
    if isinstance(messages, str):
        text = messages
    elif isinstance(messages, list):
        parts = []
        for m in messages:
            if not isinstance(m, dict):
                parts.append(str(m))
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            line = f"{m.get('role', '?')}: {content if content is not None else ''}"
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call) if isinstance(call, dict) else {}
                line += f" [tool_call {fn.get('name')}({fn.get('arguments')})]"
            parts.append(line)
        text = "\n".join(parts)
    else:
        text = "" if messages is None else str(messages)
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_samples(console: Console, records: list[dict[str, Any]]) -> None:
    """One panel per rollout: the last prompt message, the completion, reward, metrics, error."""
    for record in records:
        prompt = record.get("prompt")
        last_prompt = prompt[-1:] if isinstance(prompt, list) else prompt
        body = Text()
        body.append("prompt  ", style="bold")
        body.append(message_text(last_prompt) + "\n")
        body.append("reply   ", style="bold")
        body.append(message_text(record.get("completion")) + "\n")
        if record.get("answer") not in (None, ""):
            body.append("answer  ", style="bold")
            body.append(str(record.get("answer")) + "\n")
        metrics = record.get("metrics") or {}
        body.append("reward  ", style="bold")
        body.append(_fmt(record.get("reward")))
        if metrics:
            body.append("   " + "  ".join(f"{k}={_fmt(v)}" for k, v in metrics.items()))
        stop = record.get("stop_condition")
        if stop:
            body.append("\nstopped ", style="bold")
            body.append(
                str(stop) + ("  (truncated)" if record.get("is_truncated") else ""),
                style="bold yellow" if stop in CUT_SHORT or record.get("is_truncated") else "",
            )
        for warning in record.get("warnings") or ():
            if isinstance(warning, dict):
                body.append("\nwarning ", style="bold yellow")
                body.append(f"{warning.get('type')}: {warning.get('message')}", style="yellow")
        error = record.get("error")
        if error:
            body.append("\nerror   ", style="bold red")
            if isinstance(error, dict):
                body.append(
                    f"{error.get('source')}: {error.get('type')}: {error.get('message')}", style="red"
                )
            else:
                body.append(str(error), style="red")
        title = f"example {record.get('example_id')} / rollout {record.get('rollout_index')}"
        console.print(Panel(body, title=title, title_align="left"))


def listing(
    console: Console,
    columns: list[str],
    rows: list[list[str]],
    *,
    title: str | None = None,
    whole: tuple[int, ...] = (0,),
) -> None:
    """A listing whose ``whole`` columns (ids) are never cut.

    On a terminal wide enough to show those columns in full next to a little of the others: a table
    (the other columns wrap). Anywhere else (a pipe, a file, a narrow terminal): a title line, then
    one tab-separated line per row with a header, every value whole, for ``cut``/``awk`` and humans
    alike (scripts that want structure use ``--json``).
    """
    cells = [[printable(str(c)).replace("\t", " ").replace("\n", " ") for c in row] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    needed = sum(widths[i] if i in whole else min(widths[i], 10) for i in range(len(columns)))
    needed += 3 * len(columns) + 1
    if console.is_terminal and console.width >= needed:
        table = Table(title=title, title_justify="left")
        for i, col in enumerate(columns):
            if i in whole:
                table.add_column(col, no_wrap=True, min_width=widths[i])
            else:
                table.add_column(col, overflow="fold")
        for r in cells:
            table.add_row(*(Text(c) for c in r))
        console.print(table)
        return
    lines = ([title] if title else []) + ["\t".join(columns)] + ["\t".join(r) for r in cells]
    console.file.write("".join(line + "\n" for line in lines))
    console.file.flush()
