"""``vf eval --push``: attach a finished run to the exact environment version it evaluated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verifiers.hub_client.api import EnvRef, HubClient, HubClientError

MAX_SAMPLES = 50
MAX_TEXT = 4000


def _ref_for(env: str, metadata: dict[str, Any]) -> EnvRef:
    """Which hub environment and version a run belongs to.

    ``owner/name[@version]`` as given to ``vf eval`` wins; otherwise the record ``vf install`` kept in
    this environment says where the package came from. The version is the one that was evaluated
    (the installed package's version, recorded in the run's metadata).
    """
    from verifiers.hub_client.install import record_for
    from verifiers.ids import parse_env_id

    evaluated = (metadata.get("versions") or {}).get("environment")
    try:
        parsed = parse_env_id(env)
    except ValueError:
        parsed = None
    if parsed and parsed.owner:
        version = evaluated or (parsed.version if parsed.version != "latest" else None)
        if not version:
            raise HubClientError(f"cannot tell which version of {env} was evaluated")
        if parsed.version and parsed.version != "latest" and evaluated and parsed.version != evaluated:
            raise HubClientError(f"{env} was asked for, but version {evaluated} is what ran")
        return EnvRef(parsed.owner, parsed.name, version)
    rec = record_for(env if not Path(env).exists() else metadata.get("env_id") or env)
    if rec is None:
        raise HubClientError(
            f"cannot tell which hub environment {env!r} is",
            hint="evaluate it by its hub id (vf eval owner/name --push) or install it with vf install",
        )
    recorded = parse_env_id(rec["id"])
    return EnvRef(recorded.owner or "", recorded.name, evaluated or rec["version"])


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + "..."
    if isinstance(value, list):
        return [_clip(v) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    return value


#: A run folder's record file: a classic run's ``results.jsonl``, else a v1 run's ``traces.jsonl``
#: (``verifiers.v1.rollout.TRACES_FILE``: one episode a line, the engine's keys beside it).
RECORD_FILES = ("results.jsonl", "traces.jsonl")
SAMPLE_KEYS = ("example_id", "prompt", "completion", "answer", "reward", "metrics", "error")


def records_path(run_dir: Path) -> Path | None:
    return next((run_dir / name for name in RECORD_FILES if (run_dir / name).is_file()), None)


def sample_of(rec: dict[str, Any]) -> dict[str, Any]:
    """A record as a leaderboard sample. A v1 episode has no ``prompt`` / ``completion`` keys: its
    task's prompt and each trace's last model reply stand for them (the whole message graph stays
    in the run folder)."""
    sample = {k: rec.get(k) for k in SAMPLE_KEYS}
    traces = rec.get("traces")
    task = rec.get("task")
    if isinstance(traces, list) and isinstance(task, dict):
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        sample["prompt"] = data.get("prompt")
        sample["answer"] = data.get("answer")
        sample["completion"] = [_last_reply(t) for t in traces if isinstance(t, dict)]
        sample["rewards"] = [
            {"agent": (t.get("agent") or {}).get("name"), "rewards": t.get("rewards"), "metrics": t.get("metrics")}
            for t in traces if isinstance(t, dict)
        ]  # fmt: skip
    return _clip(sample)


def _last_reply(trace: dict[str, Any]) -> Any:
    nodes = trace.get("nodes") if isinstance(trace.get("nodes"), list) else []
    for node in reversed(nodes):
        if isinstance(node, dict) and node.get("sampled") and isinstance(node.get("message"), dict):
            return node["message"].get("content")
    return None


def load_samples(run_dir: Path, limit: int = MAX_SAMPLES) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    path = records_path(run_dir)
    if path is None:
        return out
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if len(out) >= limit:
                break
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(sample_of(rec))
    return out


#: A run in which more than this share of the rollouts never produced a scorable answer (a recorded
#: error, or a conversation that did not fit the model's context: ``prompt_too_long``) ranks the
#: failure, not the model; ``vf eval --push`` refuses it unless given ``--push-anyway``.
MAX_UNUSABLE_FRACTION = 0.5


def unusable_rollouts(run_dir: Path) -> tuple[int, int, int]:
    """(rollouts, errored, prompt_too_long without an error) of a saved run, counted from its records
    (one pass, streamed: the records are the truth whatever the metadata's counters mean)."""
    total = errored = too_long = 0
    path = records_path(run_dir)
    if path is None:
        return 0, 0, 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            total += 1
            if rec.get("error"):
                errored += 1
            elif rec.get("stop_condition") == "prompt_too_long":
                too_long += 1
    return total, errored, too_long


def describe_unusable(total: int, errored: int, too_long: int) -> str:
    parts = [f"{errored} errored"] if errored else []
    if too_long:
        parts.append(f"{too_long} did not fit the model's context (prompt_too_long)")
    bad = errored + too_long
    return f"{bad} of {total} rollouts ({bad / total:.0%}) {' and '.join(parts)}"


def push_eval(client: HubClient, env: str, run_dir: Path, *, samples: bool = False, allow_unusable: bool = False,
              log: Any = None) -> tuple[EnvRef, dict[str, Any]]:
    """Post the saved run at ``run_dir`` as an eval result of the version it evaluated.

    A run that is mostly errors or context overflows is refused (HubClientError) unless
    ``allow_unusable``; one with some is posted with a note through ``log``."""
    total, errored, too_long = unusable_rollouts(run_dir)
    if total and errored + too_long:
        what = describe_unusable(total, errored, too_long)
        if (errored + too_long) / total > MAX_UNUSABLE_FRACTION and not allow_unusable:
            raise HubClientError(
                f"{what}: a leaderboard entry would rank those failures, not the model",
                hint="fix the run (-t/--max-tokens, vf serve --max-model-len N; vf results RUN shows the errors), "
                "or push it anyway with --push-anyway",
            )
        if log is not None:
            log(f"note: {what}; the hub records the error counts with the result")
    md_path = run_dir / "metadata.json"
    try:
        metadata = json.loads(md_path.read_text())
    except FileNotFoundError:
        raise HubClientError(f"{md_path} not found: was the run saved?") from None
    except ValueError as exc:
        raise HubClientError(f"{md_path} is not valid JSON: {exc}") from None
    ref = _ref_for(env, metadata)
    summary: dict[str, Any] = {
        k: metadata.get(k) for k in ("avg_reward", "std_reward", "avg_metrics", "pass_at_k", "num_errors",
                                     "errors_by_source", "num_infra_errors", "errors_by_kind", "num_scored",
                                     "usage", "time_ms")
    }
    if samples:
        summary["samples"] = load_samples(run_dir)
    result = client.post_eval(ref, ref.version or "latest", metadata, summary)
    return ref, result
