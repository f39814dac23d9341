"""``vf debug`` / ``vf-debug``: set up tasks of a v1 taskset in their runtimes, run one shell command
or script in each, and keep each as a trace (the original ``vf-debug``'s command line and records).

``vf debug <taskset-id | package folder> (--command CMD | --script-path FILE) [options] [@ file.toml]``

For each selected task (every task of a bounded taskset, or ``-n`` / ``--select.*``), up to ``-c``
at once: a fresh runtime starts, the task's ``setup`` runs, then the action: ``sh -lc CMD``, or the
host script, copied to a temporary file outside the task's work folder (so it is not part of the
state being inspected), made executable and run. No model and no agent take part.

Each task's trace goes to ``traces.jsonl`` (one single-trace episode a line, the record ``vf eval``
writes) in ``outputs/<taskset>--debug/<uuid>/`` (or ``-o DIR``), beside ``configs/debug.json``. Its
``info.debug`` holds the outcome: ``ok``, ``reason`` (``pass``, ``nonzero_exit``, ``timeout``,
``error``, ``cancelled``, ``not_run``), ``exit_code``, ``elapsed``, ``stdout``, ``stderr``, and
``error`` / ``error_type`` for a failure; a failed action is also an error on the trace. One line per
task is printed. Exit status 0 when every action passed, 1 otherwise (the original exits 0 either
way); Ctrl-C stops it with each runtime stopped and what finished kept.

Options: ``--taskset.KNOB V`` (``--taskset.id`` names the taskset too), ``--select.*`` (``-n`` =
``--select.limit``, ``-s`` = ``--select.shuffle``), ``--runtime.*`` (``--runtime.type subprocess``,
the default, or ``sandbox``), ``--timeout.setup S`` (the task's own by default), ``--timeout.total
S`` (the action), ``-c`` / ``--max-concurrent`` (128), ``-o`` / ``--output-dir``, ``-v``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, model_validator

from verifiers.cli import v1_args
from verifiers.cli.errors import UserError, guarded

USAGE = """usage: vf debug <taskset-id | folder> (--command CMD | --script-path FILE) [-n N] [--select.KEY V]
                [--taskset.KNOB V] [--runtime.type subprocess|sandbox] [--timeout.setup S] [--timeout.total S]
                [-c N] [-o DIR] [-v] [@ file.toml]
Sets up each task in a fresh runtime, runs the command (sh -lc) or the host script there, and
saves each task's trace with the outcome (info.debug) to outputs/<taskset>--debug/<uuid>/traces.jsonl."""

SHORT = {"-n": "select.limit", "-s": "select.shuffle", "-c": "max_concurrent", "-o": "output_dir", "-v": "verbose",
         "-p": "env_dir_path"}  # fmt: skip
SPEC = v1_args.FlagSpec(
    "vf debug", USAGE, SHORT, {"taskset": "taskset.id", "script": "script_path", "num_examples": "select.limit"},
    frozenset({"verbose", "select.shuffle"}), text=frozenset({"command", "script_path"}),
)  # fmt: skip
#: A script travels to the runtime as one argument of its program: Linux takes up to 128 KiB.
MAX_SCRIPT_BYTES = 120 * 1024
#: Copies the script (``$1``) to a fresh temporary file in the runtime, runs it, removes it.
RUN_SCRIPT = (
    'f=$(mktemp "${TMPDIR:-/tmp}/vf-debug-XXXXXX") || exit 125; '
    'printf "%s" "$1" > "$f" && chmod +x "$f" && "$f"; rc=$?; rm -f "$f"; exit $rc'
)
OUTPUT_LIMIT = 1 << 20  # stdout / stderr kept per task (the rest is cut, and says so)

log = logging.getLogger("verifiers.debug")


class DebugOptions(v1_args.TasksetOptions):
    """The command line (and ``@ file``) of ``vf debug``; unknown keys are refused."""

    command: str | None = None
    script_path: Path | None = Field(None, validation_alias=AliasChoices("script_path", "script"))
    max_concurrent: int = Field(128, ge=1, validation_alias=AliasChoices("max_concurrent", "c"))
    output_dir: Path | None = Field(None, validation_alias=AliasChoices("output_dir", "o"))

    @model_validator(mode="after")
    def _one_action(self) -> DebugOptions:
        if (self.command is None) == (self.script_path is None):
            raise ValueError("pass exactly one of --command or --script-path")
        if self.script_path is not None:
            if not self.script_path.is_file():
                raise ValueError(f"--script-path {self.script_path} is not a file")
            if self.script_path.stat().st_size > MAX_SCRIPT_BYTES:
                raise ValueError(f"--script-path {self.script_path} is over {MAX_SCRIPT_BYTES // 1024} KiB: run a "
                                 "smaller script that fetches the rest, or use --command")  # fmt: skip
        return self


def load_taskset(target: str, knobs: dict[str, Any], search_dirs: list[Path]) -> Any:
    """The taskset of the v1 package ``target`` (an id, an installed package or a folder), with
    its ``--taskset.*`` knobs, as ``vf validate`` loads it."""
    from verifiers.utils import env_loading
    from verifiers.v1.env import env_table, load_environment
    from verifiers.v1.plugins import PluginError

    try:
        source = env_loading.resolve(target, search_dirs=search_dirs)
        module = env_loading.import_source(source)
    except Exception as exc:
        raise UserError(f"cannot load {target!r}: {exc}") from None
    if not env_loading.is_v1_package(source, module):
        raise UserError(f"{target} is a classic environment: vf debug runs the tasks of a v1 taskset",
                        hint="vf eval runs a classic environment's rollouts")  # fmt: skip
    table = env_table(source.module, {})
    table["taskset"] = {**table["taskset"], **knobs, "id": source.module}
    try:
        return load_environment(table).taskset
    except (PluginError, ImportError, TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None


def _cut(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + f"\n[... {len(text) - OUTPUT_LIMIT} more characters cut]"


async def _action(runtime: Any, opts: DebugOptions, script: bytes | None) -> dict[str, Any]:
    """Run the command or the script under ``--timeout.total``: the outcome's fields."""
    start = time.time()
    if script is None:
        head: dict[str, Any] = {"action": "command", "command": opts.command}
        argv = ["sh", "-lc", str(opts.command)]
    else:
        head = {"action": "script", "script_path": str(opts.script_path)}
        argv = ["sh", "-c", RUN_SCRIPT, "vf-debug", script.decode("utf-8", "surrogateescape")]
    try:
        async with asyncio.timeout(opts.timeout.total):
            result = await runtime.run(argv)
    except TimeoutError:
        return head | _failure("timeout", f"debug action timed out after {opts.timeout.total:g}s", "TimeoutError", start)
    except Exception as exc:
        return head | _failure("error", str(exc), type(exc).__name__, start)
    ok = result.exit_code == 0
    return head | {
        "ok": ok, "reason": "pass" if ok else "nonzero_exit", "exit_code": result.exit_code,
        "elapsed": round(time.time() - start, 2), "stdout": _cut(result.stdout), "stderr": _cut(result.stderr),
    }  # fmt: skip


def _failure(reason: str, message: str, error_type: str, start: float) -> dict[str, Any]:
    return {"ok": False, "reason": reason, "exit_code": None, "elapsed": round(time.time() - start, 2),
            "error": message, "error_type": error_type, "stdout": "", "stderr": ""}  # fmt: skip


async def debug_task(task: Any, opts: DebugOptions, runtime_cfg: Any, script: bytes | None) -> Any:
    """One task: a fresh runtime, ``setup``, the action; its trace (never raises for the task's faults;
    a cancellation is recorded on the trace, then passed on)."""
    from verifiers.v1.configs import WireAgentConfig
    from verifiers.v1.runtimes import make_task_runtime
    from verifiers.v1.scoring import invoke
    from verifiers.v1.trace import AgentInfo, Error, Trace

    trace = Trace.for_task(task, agent=AgentInfo(config=WireAgentConfig(), name="debug", trainable=False))
    debug: dict[str, Any] = {"task": {"idx": task.data.idx, "name": task.data.name}, "ok": False, "reason": "not_run",
                             "action": "command" if script is None else "script"}  # fmt: skip
    timing = trace.timing
    setup_limit = opts.timeout.setup if opts.timeout.setup is not None else task.data.timeout.setup
    runtime = None
    cancelled: BaseException | None = None
    try:
        timing.boot.start = time.time()
        runtime = make_task_runtime(runtime_cfg, task)
        await runtime.start()
        trace.agent.runtime = runtime.info
        timing.boot.end = timing.setup.start = time.time()
        try:
            async with asyncio.timeout(setup_limit):
                await invoke(task.setup, {"trace": trace, "runtime": runtime})
        except TimeoutError:
            raise TimeoutError(f"setup timed out after {setup_limit:g}s") from None
        timing.setup.end = timing.agent.start = time.time()
        debug.update(await _action(runtime, opts, script))
        timing.agent.end = time.time()
        trace.ok = bool(debug["ok"])
        if not trace.ok:
            trace.errors.append(Error(type=debug.get("error_type") or "DebugActionError",
                                      message=str(debug.get("error") or f"debug action failed: {debug['reason']}")))  # fmt: skip
        trace.stop(str(debug["reason"]))
    except asyncio.CancelledError as exc:
        cancelled = exc
        _record_failure(trace, debug, "cancelled", f"{_stage(timing)} cancelled", "CancelledError")
    except Exception as exc:
        reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        _record_failure(trace, debug, reason, str(exc) or type(exc).__name__, type(exc).__name__)
    finally:
        trace.split_agent_time()
        trace.info["debug"] = debug
        if runtime is not None:
            try:
                await runtime.stop()
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
            except Exception:
                log.warning("runtime teardown failed (task %s)", task.data.idx, exc_info=True)
    if cancelled is not None:
        trace.info["debug"]["_cancelled"] = True
    return trace


def _stage(timing: Any) -> str:
    return "debug action" if timing.agent.start else "setup" if timing.setup.start else "boot"


def _record_failure(trace: Any, debug: dict[str, Any], reason: str, message: str, error_type: str) -> None:
    from verifiers.v1.trace import Error

    now = time.time()
    timing = trace.timing
    for span in (timing.boot, timing.setup, timing.agent):
        if span.start and not span.end:
            span.end = now
    start = timing.agent.start or timing.setup.start or timing.boot.start or now
    debug.update(_failure(reason, message, error_type, start))
    trace.errors.append(Error(type=error_type, message=message))
    trace.ok = False
    trace.stop("error")


def _line(trace: Any) -> bytes:
    """The trace as one ``traces.jsonl`` line: a single-trace episode."""
    from verifiers.v1.episode import EnvInfo, Episode

    episode = Episode(env=EnvInfo(id=""), task=trace.task, traces=[trace], ok=trace.ok)
    try:
        return episode.to_json() + b"\n"
    except ValueError:  # a lone surrogate in the output: the dict path writes what it can
        return json.dumps(episode.to_record(), default=str).encode() + b"\n"


def _append(path: Path, line: bytes) -> None:
    with open(path, "ab") as f:  # one whole line per write
        f.write(line)


async def run_debug(opts: DebugOptions, tasks: list[Any], out: Path, say: Any) -> list[Any]:
    from verifiers.v1.runtimes import SubprocessConfig, resolve_runtime_config

    runtime_cfg = resolve_runtime_config(opts.runtime) if opts.runtime else SubprocessConfig()
    script = opts.script_path.read_bytes() if opts.script_path is not None else None
    gate = asyncio.Semaphore(opts.max_concurrent)
    traces_file = out / "traces.jsonl"
    traces_file.touch()

    async def one(task: Any) -> Any:
        async with gate:
            trace = await debug_task(task, opts, runtime_cfg, script)
        info = trace.info["debug"]
        cancelled = info.pop("_cancelled", False)
        await asyncio.to_thread(_append, traces_file, _line(trace))
        detail = f" - {info['error']}" if info.get("error") else ""
        say(f"idx={task.data.idx} ok={info['ok']} reason={info['reason']}{detail}")
        if cancelled:
            raise asyncio.CancelledError
        return trace

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def run(argv: list[str]) -> int:
    target, tree = v1_args.parse_argv(argv, SPEC)
    if target is None:
        raise UserError("name the taskset to debug", hint="vf debug <taskset-id | folder> --command 'ls'  (or @ file.toml)")
    target = v1_args.resolve_target(target)
    try:
        opts = DebugOptions.model_validate(tree)
    except ValidationError as exc:
        from verifiers.v1.plugins import validation_message

        raise UserError(f"vf debug: {validation_message(exc)}") from None
    if opts.verbose:
        logging.getLogger("verifiers").setLevel(logging.DEBUG)
    from verifiers.v1.configs import SelectConfig

    taskset = load_taskset(target, {k: v for k, v in opts.taskset.items() if k != "id"},
                           [d for d in (opts.env_dir_path, Path("environments")) if d is not None])  # fmt: skip
    select = dict(opts.select)
    try:
        view = taskset.select(SelectConfig(**select)) if select else taskset
    except (TypeError, ValueError) as exc:
        raise UserError(f"--select: {exc}") from None
    if not view.bounded:
        raise UserError(f"{type(taskset).__name__} is endless (INFINITE)", hint="bound the run with -n N")
    tasks = list(view)
    if not tasks:
        raise UserError("the selection holds no tasks")
    try:
        from verifiers.v1.runtimes import resolve_runtime_config

        if opts.runtime:
            resolve_runtime_config(opts.runtime)
    except Exception as exc:
        raise UserError(f"--runtime: {exc}") from None
    name = str(getattr(taskset.config, "id", None) or target).replace("/", "--")
    out = opts.output_dir if opts.output_dir is not None else Path("outputs") / f"{name}--debug" / str(uuid.uuid4())
    if (out / "traces.jsonl").exists() and (out / "traces.jsonl").stat().st_size > 0:
        raise UserError(f"{out} already holds a debug run", hint="choose another folder with -o")
    (out / "configs").mkdir(parents=True, exist_ok=True)
    saved = opts.model_dump(mode="json", exclude={"env_dir_path"})
    saved["taskset"] = {**opts.taskset, "id": target}
    (out / "configs" / "debug.json").write_text(json.dumps(saved, indent=2, default=str), encoding="utf-8")
    print(f"debugging {len(tasks)} task(s) of {target} on the {(opts.runtime or {}).get('type', 'subprocess')} runtime; "
          f"results: {out}", file=sys.stderr, flush=True)  # fmt: skip

    from verifiers.engine.threads import run_on_main_thread

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        traces = run_on_main_thread(lambda: run_debug(opts, tasks, out, say))
    except KeyboardInterrupt:
        print(f"interrupted; partial results: {out}", file=sys.stderr)
        return 130
    print(f"traces: {out / 'traces.jsonl'}", file=sys.stderr)
    return 0 if all(t.info["debug"]["ok"] for t in traces) else 1


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-debug`` (and the body of ``vf debug``)."""
    raise SystemExit(guarded(run)(list(sys.argv[1:] if argv is None else argv)))
