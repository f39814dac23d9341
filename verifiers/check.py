"""``vf.check_environment`` / ``vf check``: does an environment keep the contract authors promise?

The checker an author runs before publishing (``vf push`` runs it too), and the one the conformance
test runs over every bundled environment. It loads the environment with its default arguments,
looks at its rows, runs a few rollouts against a scripted OpenAI-compatible server on loopback
(:mod:`verifiers.testing.scripted`; no model, no network), and tears it down:

=============  =================================================================================
check          passes when
=============  =================================================================================
load           the id or path loads with default arguments (or an environment object was given)
environment    the result is a ``vf.Environment`` with a rubric naming at least one function
dataset        the eval set (else the train set) has rows; each has a prompt, an answer that is a
               JSON value and a dict info; a train set, when there is one, has rows too
rollouts       every rollout ran to the end: scripted replies put the reference answer in an
               ``<answer>`` tag, a ``\\boxed{}`` and the parser's own format, and call every tool
               with arguments built from its schema on the first turn; a ``JudgeRubric``'s judge calls
               go to the same server (answered ``yes``), never to the judge's real endpoint
rewards        every reward and metric is a finite number
errors         no rollout recorded an error (model, tool, reward, parser, timeout ...)
tools          an environment with tools got a tool result back for each tool it offers
teardown       ``aclose()`` ran every ``@vf.teardown`` hook without an exception
leftovers      after teardown, no child process or non-daemon thread the check started is alive
=============  =================================================================================

The result is a :class:`CheckReport`: ``report.ok``, ``str(report)`` for people and
``report.to_dict()`` / ``vf check --json`` for programs (the hub runs the same check in a sandbox).
Failures of the environment never raise; they are failed checks in the report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.checking import (
    JUDGE_MODEL,
    LEFTOVER_GRACE_S,
    CheckReport,
    CheckResult,
    check_leftovers,
    child_pids,
    one_line,
    sample_arguments,
    scripted_replies,
)

__all__ = ["CheckReport", "CheckResult", "check_environment", "sample_arguments"]

CHECKS = ("load", "environment", "dataset", "rollouts", "rewards", "errors", "tools", "teardown", "leftovers")


@contextlib.contextmanager
def _judges_on(env: Any, base_url: str) -> Iterator[int]:
    """Every ``JudgeRubric`` of ``env`` (also inside rubric groups and env groups) asks the scripted
    server instead of its judge for the duration of the check: a check makes no paid or networked
    call, and works offline and without the judge's API key. Yields how many judges were pointed
    there; their clients and models are restored afterwards."""
    from openai import AsyncOpenAI

    from verifiers.rubrics.judge_rubric import JudgeRubric

    judges: list[Any] = []
    seen: set[int] = set()

    def walk(obj: Any) -> None:
        if obj is None or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, JudgeRubric):
            judges.append(obj)
        for sub in getattr(obj, "rubrics", None) or ():
            walk(sub)
        for member in getattr(obj, "envs", None) or ():
            walk(getattr(member, "rubric", None))

    walk(getattr(env, "rubric", None))
    for member in getattr(env, "envs", None) or ():
        walk(getattr(member, "rubric", None))
    saved = [(j, j.judge_client, j.judge_model, dict(j.class_objects)) for j in judges]
    client = AsyncOpenAI(base_url=base_url, api_key="vf-check") if judges else None
    try:
        for judge in judges:
            judge.judge_client, judge.judge_model = client, JUDGE_MODEL
            judge.class_objects.update(judge_client=client, judge_model=JUDGE_MODEL)
        yield len(judges)
    finally:
        for judge, old_client, old_model, objects in saved:
            judge.judge_client, judge.judge_model = old_client, old_model
            judge.class_objects.clear()
            judge.class_objects.update(objects)


# ----------------------------------------------------------------------------------------- checks
def check_environment(
    env_or_id: Any,
    *,
    env_args: Mapping[str, Any] | None = None,
    num_examples: int = 2,
    rollouts_per_example: int = 2,
    timeout_per_rollout: float = 120.0,
    search_dirs: Sequence[Path] = (),
    v1_options: Any = None,
) -> CheckReport:
    """Check an environment (an object, or an id / path loaded with ``env_args``, default none).

    ``num_examples`` x ``rollouts_per_example`` rollouts run against a scripted server;
    ``timeout_per_rollout`` bounds each (a rollout that never ends fails the ``errors`` check).
    An environment the check loaded is torn down at the end; one passed in is torn down too, since
    the ``teardown`` check is part of the contract. Returns a :class:`CheckReport`; never raises for
    a fault of the environment.

    A v1 package (no ``load_environment``; it imports ``verifiers.v1``) is checked by
    :func:`verifiers.v1.check.check_v1` into the same report; ``v1_options`` (a
    ``V1CheckOptions``: ``vf validate``'s own flags) apply to it only.
    """
    from verifiers.envs.environment import Environment

    target = env_or_id if isinstance(env_or_id, str) else str(getattr(env_or_id, "env_id", None) or type(env_or_id).__name__)
    report = CheckReport(target=str(target))
    threads_before = {t.ident for t in threading.enumerate()}
    children_before = child_pids()

    if isinstance(env_or_id, str | os.PathLike):
        found = _import(report, env_or_id, search_dirs)
        if found is None:
            return _skip_rest(report)
        source, module = found
        from verifiers.utils.env_loading import is_v1_package

        if is_v1_package(source, module):
            from verifiers.v1.check import check_v1

            return check_v1(
                report, source, module, env_args=dict(env_args or {}), num_examples=num_examples,
                rollouts_per_example=rollouts_per_example, timeout_per_rollout=timeout_per_rollout,
                options=v1_options, threads_before=threads_before, children_before=children_before,
            )  # fmt: skip
        v1_flags = v1_options.flags() if v1_options is not None else []
        if v1_flags:
            report.add("load", False, f"{', '.join(v1_flags)} apply to v1 packages; {target} is a classic environment")
            return _skip_rest(report)
        env = _load(report, source, module, dict(env_args or {}))
        if env is None:
            return _skip_rest(report)
    else:
        env = env_or_id
        report.add("load", True, "an environment object was given", skipped=True)
    report.env_id = getattr(env, "env_id", None) or report.target

    if not isinstance(env, Environment):
        report.add("environment", False, f"load_environment returned {type(env).__name__}, not a vf.Environment")
        return _skip_rest(report)
    names = env.rubric.get_reward_func_names() if env.rubric is not None else []
    if not report.add("environment", bool(names), f"{type(env).__name__}; reward functions: {', '.join(names) or 'none'}"):
        report.checks[-1].detail = f"{type(env).__name__} has a rubric without reward functions"

    rows = _check_dataset(report, env, num_examples)
    if rows:
        _check_rollouts(report, env, rows, rollouts_per_example, timeout_per_rollout)
    else:
        for name in ("rollouts", "rewards", "errors", "tools"):
            report.add(name, False, "no rows to run", skipped=True)
    _check_teardown(report, env)
    check_leftovers(report, threads_before, children_before, LEFTOVER_GRACE_S)
    return report


def _skip_rest(report: CheckReport) -> CheckReport:
    done = {c.name for c in report.checks}
    for name in CHECKS:
        if name not in done:
            report.add(name, False, "not run", skipped=True)
    return report


def _import(report: CheckReport, spec: Any, search_dirs: Sequence[Path]) -> tuple[Any, Any] | None:
    """Find and import what ``spec`` names (the ``load`` check fails when that does not work)."""
    from verifiers.utils import env_loading

    try:
        source = env_loading.resolve(spec, search_dirs=search_dirs)
        return source, env_loading.import_source(source)
    except Exception as exc:
        report.add("load", False, one_line(exc))
        return None


def _load(report: CheckReport, source: Any, module: Any, env_args: dict[str, Any]) -> Any:
    from verifiers.utils import env_loading

    try:
        env = env_loading.annotate(env_loading.factory_of(source, module)(**env_args), source, env_args)
    except Exception as exc:
        report.add("load", False, one_line(exc))
        return None
    report.add("load", True, f"{source.kind} {source.target}" + (f" {source.version}" if source.version else ""))
    return env


def _check_dataset(report: CheckReport, env: Any, n: int) -> list[dict[str, Any]]:
    try:
        rows = [dict(r) for r in env.get_eval_dataset(n=max(1, n))]
        train_rows = len(env.get_dataset(n=1)) if env._sources.get("train") is not None else None
    except Exception as exc:
        report.add("dataset", False, f"building the rows failed: {one_line(exc)}")
        return []
    problems = []
    for i, row in enumerate(rows):
        prompt = row.get("prompt")
        if isinstance(prompt, list):
            if not prompt or not all(isinstance(m, Mapping) and "role" in m for m in prompt):
                problems.append(f"row {i}: prompt is not a list of chat messages")
        elif not (isinstance(prompt, str) and prompt):
            problems.append(f"row {i}: no prompt")
        try:  # any JSON value (classic datasets hold numbers too: amc2023's answers are floats)
            json.dumps(row.get("answer", ""))
        except (TypeError, ValueError):
            problems.append(f"row {i}: answer is a {type(row.get('answer')).__name__}, not a JSON value")
        if not isinstance(row.get("info", {}), Mapping):
            problems.append(f"row {i}: info is {type(row.get('info')).__name__}, not a dict")
    if not rows:
        problems.append("the eval set (and the train set it falls back to) has no rows")
    if train_rows == 0:
        problems.append("the train set has no rows")
    detail = "; ".join(problems[:3]) if problems else f"{len(rows)} eval row(s) checked" + (
        "" if train_rows is None else ", train set present"
    )
    report.add("dataset", not problems, detail)
    return rows if not problems else []


def _check_rollouts(report: CheckReport, env: Any, rows: list[dict[str, Any]], rpe: int, timeout: float) -> None:
    from verifiers.testing.scripted import ScriptedServer

    expected = len(rows) * max(1, rpe)
    try:
        with ScriptedServer(scripted_replies(getattr(env, "parser", None), rows, report.replies), model="vf-check") as server, _judges_on(env, server.base_url) as judges:
            result = env.evaluate_sync(
                client=server.base_url, model=server.model, num_examples=len(rows),
                rollouts_per_example=rpe, timeout_per_rollout=timeout,
            )
            requests = [r for r in server.requests if r.get("model") != JUDGE_MODEL]
            judged = len(server.requests) - len(requests)
        outputs = [dict(o) for o in result["outputs"]]
    except Exception as exc:
        report.add("rollouts", False, f"evaluate raised {one_line(exc)}")
        for name in ("rewards", "errors", "tools"):
            report.add(name, False, "no rollouts", skipped=True)
        return
    report.rollouts = [
        {k: o.get(k) for k in ("example_id", "rollout_index", "reward", "metrics", "error", "stop_condition")}
        for o in outputs
    ]
    report.add(
        "rollouts",
        len(outputs) == expected and bool(requests),
        f"{len(outputs)}/{expected} rollouts, {len(requests)} model request(s)"
        + (f", {judged} judge request(s) answered by the scripted server" if judges else ""),
    )
    bad = []
    for o in outputs:
        values = {"reward": o.get("reward"), **{f"metric {k}": v for k, v in (o.get("metrics") or {}).items()}}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                bad.append(f"example {o.get('example_id')}: {name} = {value!r}")
    report.add("rewards", not bad, "; ".join(bad[:3]) or "all rewards and metrics finite")
    errors = [o["error"] for o in outputs if o.get("error")]
    report.add(
        "errors",
        not errors,
        "; ".join(f"{e.get('source')}: {e.get('type')}: {str(e.get('message'))[:200]}" for e in errors[:3])
        or "no rollout recorded an error",
    )
    offered = [t.get("function", t).get("name") for t in (env.oai_tools or [])]
    if not offered:
        report.add("tools", True, "the environment offers no tools", skipped=True)
        return
    answered = {
        m.get("tool_call_id") for r in requests for m in r.messages if m.get("role") == "tool"
    }
    missing = [name for i, name in enumerate(offered) if f"check-{i}" not in answered]
    report.add("tools", not missing, f"no tool result for {', '.join(missing)}" if missing else
               f"every tool answered ({', '.join(offered)})")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _check_teardown(report: CheckReport, env: Any) -> None:
    capture = _Capture()
    root = logging.getLogger("verifiers")
    root.addHandler(capture)
    try:
        env.close()
    except Exception as exc:
        report.add("teardown", False, f"close() raised {one_line(exc)}")
        return
    finally:
        root.removeHandler(capture)
    failed = [r.getMessage() for r in capture.records if "teardown" in r.getMessage()]
    if getattr(env, "_torn_down", None) is False:  # an aclose() override that skipped the base class's
        failed.append(f"{type(env).__name__}.close() did not run the @vf.teardown hooks (call super().aclose())")
    report.add("teardown", not failed, "; ".join(failed[:3]) or "teardown hooks ran")


