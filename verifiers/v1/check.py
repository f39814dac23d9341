"""The checker for v1 packages: what ``vf validate`` (and ``vf check``, ``vf push``, the hub's
sandboxed check) runs on a package whose ``__all__`` lists a ``Taskset`` subclass.

``verifiers.check.check_environment`` sends a v1 package here; the verdict is the same
:class:`~verifiers.checking.CheckReport` (one JSON schema for both APIs, so the hub reads either).

=============  =================================================================================
check          passes when
=============  =================================================================================
load           the package follows the v1 conventions (exactly one ``Taskset`` subclass in
               ``__all__``), its env builds with the given config and every role can start here
taskset        the taskset yields tasks: the first ``-n`` of them, or (``vf validate`` without ``-n``)
               every task of a bounded taskset (an ``INFINITE`` one then fails: bound it with
               ``-n``); a generator or an ``INFINITE`` taskset is sampled, never exhausted (within
               ``--timeout-per-rollout`` s)
tasks          each task's data survives the wire (JSON and back, as an env server ships
               it), its prompt is not empty (None: the env's agents write it), it has a hash and a
               key, and no two share an ``id``
setup          (``--only-setup``) ``Task.setup`` finishes in a fresh runtime, for each task
gold           ``Task.setup`` then ``Task.validate`` (the reference answer, no model) holds for each
               task, in a fresh runtime; skipped when no task defines it
noop           ``Task.setup``, ``finalize`` and the task's rewards on the untouched task (no agent, no
               model: the judges plugged into the task are not asked), in a fresh runtime: it does
               not already pass (reward below 1); skipped when no task declares a reward
rollouts       ``-n`` (default 2) tasks x ``-r`` episodes ran through the real v1 run path
               (``run_v1``: env, agents, harness, runtime, scoring) against the scripted model
traces         every episode record reads back as a ``WireEpisode``, with a trace that called the model
rewards        every reward and metric of every trace is a finite number, or None with the
               hook's error recorded on the trace; each episode recorded at least one reward
errors         no episode or trace recorded an error (setup, harness, model, reward, timeout ...)
teardown       the env's ``stop()`` ran without an exception and every rollout's runtime folder is gone
leftovers      no child process or non-daemon thread the check started is alive afterwards
=============  =================================================================================

By default gold and noop run on every task, as the original ``vf-validate`` runs them, and the
episodes on the first ``-n``; ``--only-setup`` / ``--only-gold`` / ``--only-noop`` run that check
alone and no episode (the verdict then needs it to pass). With ``V1CheckOptions.log`` (``vf
validate``'s run folder) each task's row goes to ``results.jsonl`` as it finishes
(:mod:`verifiers.v1.check_log`). Runtimes: the ``--runtime.*`` table replaces every role's runtime
and is the model-free checks' runtime (the local subprocess runtime by default; the original's
default, a remote sandbox, is not here).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from verifiers.checking import JUDGE_MODEL, CheckReport, check_leftovers, one_line, scripted_replies
from verifiers.v1.check_log import CheckLog

__all__ = ["CHECKS", "MODES", "V1CheckOptions", "check_v1"]

CHECKS = ("load", "taskset", "tasks", "setup", "gold", "noop", "rollouts", "traces", "rewards", "errors",
          "teardown", "leftovers")  # fmt: skip
MODES = ("all", "setup", "gold", "noop")
#: A noop check fails when the untouched task already scores this (the original's rule).
SOLVED = 1.0
CHECK_MODEL = "vf-check"


@dataclass
class V1CheckOptions:
    """What ``vf validate`` takes beyond ``vf check``'s flags (the original ``vf-validate``'s)."""

    taskset: dict[str, Any] = field(default_factory=dict)  # the taskset's knobs (--taskset.*)
    select: dict[str, Any] = field(default_factory=dict)  # SelectConfig fields (--select.*)
    runtime: dict[str, Any] | None = None  # --runtime.*: every role's and the model-free checks'
    mode: str = "all"  # --only-setup / --only-gold / --only-noop
    setup_timeout: float | None = None  # --timeout.setup
    check_timeout: float | None = None  # --timeout.total (each model-free check, after setup)
    max_concurrent: int | None = None  # -c: episodes / model-free checks in flight
    #: The model-free checks take every task of a bounded taskset (the selection's), the episodes
    #: the first ``-n``; False: both take the first ``-n`` (``vf check``, the hub's check).
    all_tasks: bool = False
    #: ``vf validate``'s run folder: a row per task in ``results.jsonl`` (None: rows are not kept).
    log: CheckLog | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")

    def flags(self) -> list[str]:
        """The options set away from their defaults, as flags (to refuse them on a classic package)."""
        out = [f"--taskset.{k}" for k in self.taskset] + [f"--select.{k}" for k in self.select]
        if self.runtime:
            out.append("--runtime.*")
        if self.mode != "all":
            out.append(f"--only-{self.mode}")
        if self.setup_timeout is not None or self.check_timeout is not None:
            out.append("--timeout.*")
        return out


def check_v1(
    report: CheckReport,
    source: Any,
    module: ModuleType,
    *,
    env_args: Mapping[str, Any],
    num_examples: int,
    rollouts_per_example: int,
    timeout_per_rollout: float,
    options: V1CheckOptions | None,
    threads_before: set[int | None],
    children_before: set[int],
) -> CheckReport:
    """Check the v1 package ``module`` (found as ``source`` by the classic loader) into ``report``.
    Never raises for a fault of the package."""
    options = options or V1CheckOptions()
    report.env_id = source.env_id
    report.required = "rollouts" if options.mode == "all" else options.mode
    env = _load(report, source, module, dict(env_args), options)
    if env is None:
        return _skip_rest(report)
    tasks = _check_taskset(report, env, num_examples, options, timeout_per_rollout)
    if tasks:
        _check_tasks(report, tasks)
    else:
        report.add("tasks", False, "no tasks", skipped=True)
    # a task set that failed a data check is still checked further where every task has a key (the
    # verdict has failed already; vf validate's rows say which tasks pass): one bad task in a large
    # taskset does not hide the others
    if not tasks or (not report.checks[-1].ok and not (options.all_tasks and _all_keyed(tasks))):
        for name in CHECKS[3:-2]:  # setup .. errors
            report.add(name, False, "no valid tasks to run", skipped=True)
        _stop_unused(report, env)
        check_leftovers(report, threads_before, children_before)
        return report
    if options.mode == "all":
        report.add("setup", True, "runs as part of gold, noop and the episodes", skipped=True)
        _model_free(report, env, tasks, options)
        _episodes(report, env, tasks[:num_examples], rollouts_per_example, timeout_per_rollout, options)
    else:
        for kind in ("setup", "gold", "noop"):
            if kind == options.mode:
                _model_free(report, env, tasks, options)
            else:
                report.add(kind, True, f"not run (--only-{options.mode})", skipped=True)
        for name in ("rollouts", "traces", "rewards", "errors"):
            report.add(name, True, f"not run (--only-{options.mode} checks without a model)", skipped=True)
        _stop_unused(report, env)
    check_leftovers(report, threads_before, children_before)
    return report


def _skip_rest(report: CheckReport) -> CheckReport:
    done = {c.name for c in report.checks}
    for name in CHECKS:
        if name not in done:
            report.add(name, False, "not run", skipped=True)
    return report


def _run(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code, also when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from verifiers.engine.threads import run_on_main_thread

        return run_on_main_thread(lambda: coro)  # the taskset's sync code on the main thread, as under vf eval
    with ThreadPoolExecutor(1, thread_name_prefix="vf-check") as pool:
        return pool.submit(asyncio.run, coro).result()


# ------------------------------------------------------------------------------------------ load
def _roles(table: Mapping[str, Any], taskset_id: str) -> list[str]:
    from verifiers.v1.agents import AgentConfig
    from verifiers.v1.env import environment_class

    cls = environment_class(taskset_id, table.get("id") or None).config_type()
    return [
        name for name, f in cls.model_fields.items()
        if isinstance(f.default, AgentConfig) or (isinstance(f.annotation, type) and issubclass(f.annotation, AgentConfig))
    ]  # fmt: skip


def _load(report: CheckReport, source: Any, module: ModuleType, env_args: dict[str, Any], options: V1CheckOptions) -> Any:
    from verifiers.v1.env import env_table, load_environment
    from verifiers.v1.plugins import PluginError, plugin_class
    from verifiers.v1.taskset import Taskset

    try:
        taskset_cls = plugin_class(module, Taskset, "taskset")
    except PluginError as exc:
        report.add("load", False, f"{exc} (a v1 package lists exactly one Taskset subclass in __all__; "
                                  "a classic one defines load_environment())")  # fmt: skip
        return None
    taskset_id = source.module
    try:
        table = env_table(taskset_id, env_args)
        table["taskset"] = {**table["taskset"], **options.taskset, "id": taskset_id}
        if options.runtime:
            for role in _roles(table, taskset_id):
                spec = table.get(role)
                table[role] = {**(spec if isinstance(spec, dict) else {}), "runtime": dict(options.runtime)}
        env = load_environment(table)
        env.check()
    except Exception as exc:
        report.add("load", False, one_line(exc))
        return None
    # each role's harness as it resolved: one the role names, else the taskset package's own, else null
    roles = ", ".join(f"{n}: {_harness_id(env._harnesses.get(n)) if n in env._harnesses else _harness_id(s.harness)} "
                      f"harness on {s.runtime.type}" for n, s in env._agent_specs.items())  # fmt: skip
    version = f" {source.version}" if source.version else ""
    own = type(env).__module__.split(".")[0] == source.module.split(".")[0]  # the package's own Env class
    label = type(env).__name__ if own else env.env_id
    report.add("load", True, f"v1 package {source.module}{version}: {taskset_cls.__name__}, env {label} ({roles})")
    return env


def _harness_id(harness: Any) -> str:
    """A role's harness as the report names it: its id (a config, a table or a bare id)."""
    if isinstance(harness, dict):
        return str(harness.get("id") or "null")
    config = getattr(harness, "config", None)  # a loaded Harness: its config's id
    if config is not None and getattr(config, "id", None):
        return str(config.id)
    return str(getattr(harness, "id", None) or harness or "null")


# -------------------------------------------------------------------------------------- tasks
def _sample(view: Any, count: int | None, wait_s: float | None) -> list[Any]:
    """The first ``count`` tasks of ``view`` (None: all of a bounded one), read in a daemon thread
    for at most ``wait_s`` seconds (a ``load()`` that blocks forever fails the check instead of
    hanging it)."""
    out: list[Any] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            out.extend(view.take(count) if count is not None else view)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=read, name="vf-check-taskset", daemon=True)
    thread.start()
    if wait_s is None:
        while thread.is_alive():  # short joins: a Ctrl-C reaches this thread between them
            thread.join(0.2)
    thread.join(wait_s)
    if thread.is_alive():
        raise TimeoutError(f"load() did not give {count} task(s) in {wait_s:g} s")
    if failure:
        raise failure[0]
    return out


def _check_taskset(report: CheckReport, env: Any, n: int, options: V1CheckOptions, wait_s: float) -> list[Any]:
    """The tasks to check: the first ``n`` (or ``-n``), or with ``options.all_tasks`` and no ``-n``
    every task of a bounded taskset (an endless one is then refused; with a count it is sampled,
    never exhausted)."""
    from verifiers.v1.configs import SelectConfig

    taskset = env.taskset
    count: int | None = None
    try:
        select = dict(options.select)
        limit = select.pop("limit", None)
        view = taskset.select(SelectConfig(**select)) if select else taskset
        if options.all_tasks and limit is None and not view.bounded:
            # ``vf validate`` checks every task unless bounded: an endless one is refused, as the
            # original refuses it, never sampled as if it were the whole set
            report.add("taskset", False, f"{type(taskset).__name__} is infinite - bound the run with -n")
            return []
        if limit is not None or not options.all_tasks:
            count = max(1, int(limit if limit is not None else n))
        # every task of a bounded taskset: as long as its load() takes (Ctrl-C stops it), as the
        # original reads it
        tasks = _sample(view, count, wait_s if count is not None else None)
    except TimeoutError:
        report.add("taskset", False, f"{type(taskset).__name__}.load() gave fewer than {count} task(s) in {wait_s:g} s (does it hang?)")
        return []
    except Exception as exc:
        report.add("taskset", False, f"iterating {type(taskset).__name__} failed: {one_line(exc)}")
        return []
    if not tasks:
        report.add("taskset", False, f"{type(taskset).__name__}.load() yielded no tasks" + (" for this selection" if options.select else ""))
        return []
    kind = ("sampled from an endless (INFINITE) taskset" if not taskset.bounded
            else "taken from the start" if count is not None else "(all of them)")  # fmt: skip
    report.add("taskset", True, f"{len(tasks)} task(s) of {type(taskset).__name__} {kind}")
    return tasks


def _prompt_problem(prompt: Any) -> str | None:
    if prompt is None:  # allowed: the env's own agents may write the first message (user-sim)
        return None
    if isinstance(prompt, str):
        return None if prompt.strip() else "an empty prompt"
    if isinstance(prompt, list):
        return None if prompt else "an empty message list as its prompt"
    return f"a prompt of type {type(prompt).__name__}"


def _check_tasks(report: CheckReport, tasks: Sequence[Any]) -> None:
    from verifiers.v1.task import WireTaskData

    problems: list[str] = []
    ids: dict[str, int] = {}
    for task in tasks:
        where = f"task {task.data.idx}" + (f" ({task.data.name})" if task.data.name else "")
        try:
            text = task.data.model_dump_json()
            if type(task.data).model_validate_json(text) != task.data:
                problems.append(f"{where}: its data changes when read back from JSON")
            WireTaskData.model_validate_json(text)
            _ = task.hash, task.key
        except Exception as exc:
            problems.append(f"{where}: its data does not survive the wire: {one_line(exc)}")
            continue
        if why := _prompt_problem(task.data.prompt):
            problems.append(f"{where} has {why}")
        if task.data.id is not None:
            if task.data.id in ids:
                problems.append(f"{where} has the id {task.data.id!r} of task {ids[task.data.id]}")
            ids.setdefault(task.data.id, task.data.idx)
    unprompted = sum(1 for t in tasks if t.data.prompt is None)
    detail = "; ".join(problems[:3]) or f"{len(tasks)} task(s): data survives the wire" + (
        f", {unprompted} without a prompt (the env writes it)" if unprompted else ", prompts present"
    )
    report.add("tasks", not problems, detail)


# ------------------------------------------------------------------------- model-free checks
def _all_keyed(tasks: Sequence[Any]) -> bool:
    try:
        return all(isinstance(t.hash, str) for t in tasks)
    except Exception:
        return False


def _model_free(report: CheckReport, env: Any, tasks: Sequence[Any], options: V1CheckOptions) -> None:
    """The model-free checks of ``options.mode`` on each task, each check in its own fresh runtime
    (``--runtime.*``, else the runtime of the env's first role): ``setup``, ``gold`` or ``noop``
    alone, or gold then noop (the default). One row per task goes to ``options.log`` as it
    finishes; the report gets one line per check, over every task."""
    from verifiers.v1.runtimes import SubprocessConfig, resolve_runtime_config

    kinds = ("gold", "noop") if options.mode == "all" else (options.mode,)
    try:
        if options.runtime:
            runtime_cfg = resolve_runtime_config(options.runtime)
        else:
            roles = [spec.runtime for spec in env._agent_specs.values() if getattr(spec, "runtime", None) is not None]
            runtime_cfg = roles[0] if roles else SubprocessConfig()
    except Exception as exc:
        for kind in kinds:
            report.add(kind, False, f"--runtime: {one_line(exc)}")
        return
    log = options.log
    keys = [t.hash for t in tasks]
    todo = log.plan(keys, options.mode) if log is not None else [True] * len(tasks)
    rows: list[dict[str, Any]] = list(log.rows) if log is not None else []  # with --resume: the kept ones
    teardown: list[str] = []

    async def one(gate: asyncio.Semaphore, position: int, task: Any) -> None:
        async with gate:
            start = time.time()
            checks = [await _one_model_free(kind, task, runtime_cfg, options, teardown) for kind in kinds]
        row = checks[0] if len(checks) == 1 else _combined(task, checks, time.time() - start)
        row.update(task_position=position, task_key=keys[position])
        rows.append(row)
        if log is not None:
            log.add(row)

    async def all_tasks() -> None:
        gate = asyncio.Semaphore(options.max_concurrent or MODEL_FREE_CONCURRENCY)
        await asyncio.gather(*(one(gate, i, t) for i, t in enumerate(tasks) if todo[i]))

    try:
        _run(all_tasks())
    except Exception as exc:
        for kind in kinds:
            report.add(kind, False, f"the {kind} check could not run: {one_line(exc)}")
        return
    rows.sort(key=lambda r: r.get("task_position", 0))
    kept = todo.count(False)
    for kind in kinds:
        subrows = [r if options.mode != "all" else _sub(r, kind) for r in rows]
        bad = [f"task {r.get('index')}: {_why(r)}" for r in subrows if r.get("valid") is not True and r.get("reason") != "unchecked"]
        if kind == kinds[-1] and options.mode == "all":  # the episodes' teardown check is separate: fail it here
            bad += teardown
        unchecked = sum(1 for r in subrows if r.get("reason") == "unchecked")
        resumed = f" ({kept} kept from the run folder)" if kept else ""
        if not bad and unchecked == len(subrows):
            report.add(kind, True, NOTHING_TO_CHECK[kind] + f" ({unchecked} unchecked)", skipped=True)
        else:
            checked = len(subrows) - unchecked
            report.add(kind, not bad, "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
                       or f"{checked} task(s) valid" + (f", {unchecked} unchecked" if unchecked else "") + resumed)  # fmt: skip
    if options.mode != "all":  # in the default mode the episodes' teardown is the check
        report.add("teardown", not teardown, "; ".join(teardown[:3]) or "every runtime stopped")


#: What a check with nothing to check says (every task unchecked).
NOTHING_TO_CHECK = {
    "setup": "no task to set up",
    "gold": "no task defines validate() (the reference answer checked without a model)",
    "noop": "no task declares a reward to score untouched",
}
#: Tasks checked at once by the model-free checks when ``-c`` is not given (the original's default).
MODEL_FREE_CONCURRENCY = 128


def _sub(row: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    sub = row.get(kind)
    return sub if isinstance(sub, dict) else {}


def _why(row: Mapping[str, Any]) -> str:
    """The report's words for a row that is not valid."""
    if row.get("reason") == "invalid":
        if row.get("mode") == "noop":
            reward = row.get("reward")
            shown = f"{reward:g}" if isinstance(reward, int | float) and not isinstance(reward, bool) else repr(reward)
            return f"passes untouched (reward {shown}): its rewards do not need the agent"
        if row.get("mode") == "gold":
            return "validate() returned False: the reference answer does not pass"
    return str(row.get("error") or row.get("reason"))


def _combined(task: Any, rows: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    """The default mode's row of one task: its gold and noop rows and the verdict of both."""
    gold, noop = rows
    if all(r["valid"] is True for r in rows):
        reason = "valid"
    else:
        found = {r["reason"] for r in rows}
        reason = next((r for r in ("error", "timeout", "invalid") if r in found), "unchecked")
    failed = [r for r in rows if r["reason"] not in ("valid", "unchecked")]
    return {
        "index": task.data.idx,
        "name": task.data.name,
        "mode": "all",
        "valid": None if reason == "unchecked" else reason == "valid",
        "reason": reason,
        "elapsed": round(elapsed, 2),
        "error": "; ".join(f"{r['mode']}: {_why(r)}" for r in failed) or None,
        "error_type": "+".join(sorted({r["error_type"] for r in failed if r["error_type"]})) or None,
        "gold": gold,
        "noop": noop,
    }


async def _one_model_free(kind: str, task: Any, runtime_cfg: Any, options: V1CheckOptions, teardown: list[str]) -> dict[str, Any]:
    """One task's ``kind`` check in a fresh runtime, as a row of ``results.jsonl`` (the original's
    shape): valid, invalid, unchecked (nothing to check), error or timeout."""
    from verifiers.v1.configs import WireAgentConfig
    from verifiers.v1.runtimes import make_task_runtime
    from verifiers.v1.scoring import invoke, score_task
    from verifiers.v1.task import Task
    from verifiers.v1.trace import AgentInfo, Trace

    start = time.time()
    row: dict[str, Any] = {"index": task.data.idx, "name": task.data.name, "mode": kind}
    trace: Any = None

    def done(valid: bool | None, reason: str, error: str | None = None, error_type: str | None = None) -> dict[str, Any]:
        row.update(valid=valid, reason=reason, elapsed=round(time.time() - start, 2), error=error, error_type=error_type)
        if kind == "noop":
            rewards = dict(trace.rewards) if trace is not None else {}
            row["reward"] = trace.reward if rewards and reason not in ("error", "timeout") else None
            row["rewards"] = {name: r.score if r is not None else None for name, r in rewards.items()}
        return row

    runtime = None
    try:
        trace = Trace.for_task(task, agent=AgentInfo(config=WireAgentConfig(), name="validate", trainable=False))
        runtime = make_task_runtime(runtime_cfg, task)
        await runtime.start()
        setup_limit = options.setup_timeout if options.setup_timeout is not None else task.data.timeout.setup
        try:
            async with asyncio.timeout(setup_limit):
                await invoke(task.setup, {"trace": trace, "runtime": runtime})
        except TimeoutError:
            return done(False, "timeout", f"setup() did not finish within {setup_limit:g} s", "TimeoutError")
        if kind == "setup":
            return done(True, "valid")
        try:
            async with asyncio.timeout(options.check_timeout):
                if kind == "gold":
                    valid = await task.validate(runtime)
                    if valid is True:
                        return done(True, "valid")
                    if valid is None:
                        return done(None, "unchecked")
                    if valid is False:
                        return done(False, "invalid")
                    return done(False, "error", f"validate() returned {type(valid).__name__}, not a bool or None", "TypeError")
                await invoke(task.finalize, {"trace": trace, "runtime": runtime})
                if type(task).score is Task.score:  # the judges plugged into the task are not asked
                    await score_task(task, trace, runtime, judges=False)
                else:
                    await task.score(trace, runtime)
        except TimeoutError:
            return done(False, "timeout", f"{kind} did not finish within {options.check_timeout:g} s", "TimeoutError")
        if trace.errors:
            e = trace.errors[0]
            return done(False, "error", f"scoring the untouched task failed: {e.type}: {e.message}"[:500], e.type)
        if not trace.rewards:
            return done(None, "unchecked")
        if trace.reward >= SOLVED:
            return done(False, "invalid")
        return done(True, "valid")
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except Exception as exc:
        return done(False, "error", one_line(exc), type(exc).__name__)
    finally:
        if runtime is not None:
            try:
                await runtime.stop()
            except Exception as exc:
                teardown.append(f"task {task.data.idx}: runtime.stop() raised {one_line(exc)}")


def _stop_unused(report: CheckReport, env: Any) -> None:
    """The env's ``stop()`` for a check that ran no episode (``start()`` never ran either)."""
    if any(c.name == "teardown" for c in report.checks):
        return
    try:
        _run(env.stop())
    except Exception as exc:
        report.add("teardown", False, f"stop() raised {one_line(exc)}")
        return
    report.add("teardown", True, "stop() ran")


# ----------------------------------------------------------------------------------- episodes
def _prompt_row(task: Any) -> dict[str, Any]:
    prompt = task.data.prompt
    if isinstance(prompt, list):
        prompt = [m.model_dump(mode="json") if hasattr(m, "model_dump") else dict(m) for m in prompt]
    answer = getattr(task.data, "answer", None)
    return {"prompt": prompt, "answer": "" if answer is None else answer}


def _episodes(report: CheckReport, env: Any, tasks: Sequence[Any], rpe: int, timeout: float, options: V1CheckOptions) -> None:
    from verifiers.clients import ModelClient
    from verifiers.testing.scripted import ScriptedServer
    from verifiers.v1.context import answering_all
    from verifiers.v1.rollout import run_v1

    stop_errors: list[BaseException] = []
    stopped: list[bool] = []
    original_stop = env.stop

    async def stop() -> None:  # the teardown check reads what the run's stop() did
        stopped.append(True)
        try:
            await original_stop()
        except Exception as exc:
            stop_errors.append(exc)

    env.stop = stop
    # a role with its own endpoint asks the scripted model too: a check makes no networked or paid call
    redirected = [name for name, spec in env._agent_specs.items() if spec.client is not None]
    for name in redirected:
        env._agent_specs[name].client = None
    expected = len(tasks) * max(1, rpe)
    rows = [_prompt_row(t) for t in tasks]

    async def run(base_url: str) -> Any:
        client = ModelClient.from_any(base_url)
        try:
            with answering_all(JUDGE_MODEL):  # judges, own endpoint or not, ask the scripted model
                return await run_v1(env, list(tasks), client, model=CHECK_MODEL, num_rollouts=max(1, rpe),
                                    max_concurrent=options.max_concurrent, timeout=timeout)  # fmt: skip
        finally:
            await client.aclose()

    try:
        with ScriptedServer(scripted_replies(None, rows, report.replies), model=CHECK_MODEL) as server:
            out = _run(run(server.base_url))
            requests = len(server.requests)
        records = [dict(r) for r in out["outputs"]]
    except Exception as exc:
        report.add("rollouts", False, f"the run raised {one_line(exc)}")
        for name in ("traces", "rewards", "errors"):
            report.add(name, False, "no episodes", skipped=True)
        _check_teardown(report, stopped, stop_errors, [])
        return
    report.rollouts = [
        {k: r.get(k) for k in ("example_id", "rollout_index", "reward", "metrics", "error", "stop_condition")} for r in records
    ]
    report.add("rollouts", len(records) == expected and requests > 0,
               f"{len(records)}/{expected} episodes, {requests} model request(s)"
               + (f"; the own client of {', '.join(redirected)} answered by the scripted model" if redirected else ""))  # fmt: skip
    _check_records(report, records)
    _check_teardown(report, stopped, stop_errors, records)


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _check_records(report: CheckReport, records: list[dict[str, Any]]) -> None:
    from verifiers.v1.episode import WireEpisode

    malformed: list[str] = []
    bad_scores: list[str] = []
    errors: list[str] = []
    failed_hooks = 0
    for rec in records:
        where = f"example {rec.get('example_id')} rollout {rec.get('rollout_index')}"
        try:
            episode = WireEpisode.model_validate({k: v for k, v in rec.items() if k in WireEpisode.model_fields})
        except Exception as exc:
            malformed.append(f"{where}: not a WireEpisode: {one_line(exc)}")
            continue
        errors += [f"{where}: env: {e.type}: {e.message}"[:300] for e in episode.errors]
        if not episode.traces:
            malformed.append(f"{where}: no trace")
        if not _finite(rec.get("reward")):
            bad_scores.append(f"{where}: reward = {rec.get('reward')!r}")
        # per episode, not per trace: in a multi-agent env a seat may never get a turn (the game ended
        # first) or go unscored, as the env decides
        failed = any(t.errors for t in episode.traces) or bool(episode.errors)
        if episode.traces and not any(t.calls for t in episode.traces) and not failed:
            malformed.append(f"{where}: no trace holds a model call")
        if episode.traces and not any(t.rewards for t in episode.traces) and not failed:
            bad_scores.append(f"{where}: no reward was recorded (does the task declare a @vf.reward?)")
        for trace in episode.traces:
            who = f"{where} {trace.agent.name}"
            errors += [f"{who}: {e.type}: {e.message}"[:300] for e in trace.errors]
            recorded = " ".join(f"{e.type} {e.message}" for e in trace.errors)
            values = {**{f"reward {k}": (None if r is None else r.score) for k, r in trace.rewards.items()},
                      **{f"metric {k}": v for k, v in trace.metrics.items()}}  # fmt: skip
            for name, value in values.items():
                if value is None:
                    if name.split(" ", 1)[1] not in recorded:  # None is fine only with the hook's error on record
                        bad_scores.append(f"{who}: {name} is None with no error recorded")
                    else:
                        failed_hooks += 1
                elif not _finite(value):
                    bad_scores.append(f"{who}: {name} = {value!r}")
    report.add("traces", not malformed, "; ".join(malformed[:3]) or f"{len(records)} episode record(s) read back as WireEpisode")
    report.add("rewards", not bad_scores, "; ".join(bad_scores[:3]) or "every reward and metric is a finite number"
               + (f" or None with its hook's error recorded ({failed_hooks})" if failed_hooks else ""))  # fmt: skip
    report.add("errors", not errors, "; ".join(errors[:3]) or "no episode or trace recorded an error")


def _check_teardown(report: CheckReport, stopped: list[bool], stop_errors: list[BaseException], records: list[dict[str, Any]]) -> None:
    problems = [f"stop() raised {one_line(e)}" for e in stop_errors]
    if not stopped:
        problems.append("the env's stop() never ran")
    deadline = time.monotonic() + 5.0
    left: list[str] = []
    while True:  # a rollout's runtime folder (the subprocess runtime's temporary one) is removed by stop()
        left = [
            w for rec in records for t in rec.get("traces") or []
            if isinstance(w := ((t.get("agent") or {}).get("runtime") or {}).get("workdir"), str)
            and Path(w).name.startswith("vf-rollout-") and Path(w).exists()
        ]  # fmt: skip
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if left:
        problems.append(f"{len(left)} runtime folder(s) left behind (runtimes not stopped), e.g. {left[0]}")
    report.add("teardown", not problems, "; ".join(problems[:3]) or "stop() ran; every runtime stopped")
