"""``vf check PATH|ID``: run the conformance checker (:mod:`verifiers.check`; a v1 package goes to
:mod:`verifiers.v1.check`) and print its verdict. ``vf validate`` (``validate_cmd.py``) ends here too.

Exit status 0 when every check passed, 1 otherwise. ``--json`` prints the machine-readable verdict
(``{"ok", "target", "env_id", "checks", "rollouts"}``) on stdout and nothing else, also when the
environment cannot be loaded, so a program (the hub's sandboxed check, ``vf push``) reads one JSON
document whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifiers.cli.errors import UserError, parse_json_arg


def run_check(
    target: str,
    *,
    env_args_json: str | None = None,
    num_examples: int = 2,
    rollouts_per_example: int = 2,
    timeout_per_rollout: float = 120.0,
    as_json: bool = False,
    env_dir_path: Path | None = None,
    v1_options: Any = None,
    save: Callable[[dict[str, Any]], Any] | None = None,
) -> int:
    """Check ``target`` and print the verdict; the exit status. ``v1_options``: ``vf validate``'s
    own flags (a ``verifiers.v1.check.V1CheckOptions``); ``save``: called with the verdict (a
    JSON-able dict) before it is printed (``vf validate`` keeps it in its run folder)."""
    from verifiers.check import check_environment
    from verifiers.ids import EnvId, parse_env_spec

    env_args: dict[str, Any] = parse_json_arg(env_args_json, "-a/--env-args") or {}
    if num_examples < 1 or rollouts_per_example < 1:
        raise UserError("-n and -r must be at least 1")
    try:
        spec = parse_env_spec(target)
    except ValueError as exc:
        if not as_json:  # with --json the failed load is reported in the verdict
            raise UserError(f"{target!r} is not a valid environment id or path: {exc}")
        spec = None
    if isinstance(spec, EnvId) and spec.owner:
        import verifiers.hub_client  # noqa: F401  (registers the hub's installer with the loader)
    # With --json, stdout carries the verdict alone: what the environment prints goes to stderr.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        report = check_environment(
            target,
            env_args=env_args,
            num_examples=num_examples,
            rollouts_per_example=rollouts_per_example,
            timeout_per_rollout=timeout_per_rollout,
            search_dirs=[d for d in (env_dir_path, Path("environments")) if d is not None],
            v1_options=v1_options,
        )
    if save is not None:
        save(report.to_dict())
    if as_json:
        print(json.dumps(report.to_dict(), default=str))
    else:
        print(report)
    return 0 if report.ok else 1
