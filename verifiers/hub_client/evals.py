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


def load_samples(run_dir: Path, limit: int = MAX_SAMPLES) -> list[dict[str, Any]]:
    out = []
    path = run_dir / "results.jsonl"
    if not path.exists():
        return out
    with open(path) as fh:
        for line in fh:
            if len(out) >= limit:
                break
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            out.append(_clip({k: rec.get(k) for k in ("example_id", "prompt", "completion", "answer",
                                                       "reward", "metrics", "error")}))
    return out


def push_eval(client: HubClient, env: str, run_dir: Path, *, samples: bool = False) -> tuple[EnvRef, dict[str, Any]]:
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
