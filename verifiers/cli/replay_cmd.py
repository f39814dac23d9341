"""``vf replay <traces.jsonl | run folder>`` (also ``vf-replay``): re-score saved v1 traces offline.

Each saved episode is read back as the original's wire record (``verifiers.v1.episode``), its
traces' task rows are rebuilt as the taskset's own ``TaskData`` class, and the task's metrics and
rewards run again (``verifiers.v1.scoring``), then the env's ``finalize``: no model is called and
no runtime is started, so a hook that needs the rollout's ``runtime`` is not re-run: its saved
value is kept, and the summary names it. A hook that raises, hangs or returns a non-number is recorded on the trace, as in a
live run, never scored 0.

A trace whose rollout itself failed (a model, tool or setup error) has no finished transcript: it
is copied unchanged and counted as skipped. Scoring errors of the source run are dropped before
scoring again, which is how a fixed reward function is applied to an old run.

The taskset (and env) come from the run's ``configs/eval.json`` (a replay's output: its
``configs/replay.json``), else ``--taskset ID``; dotted
flags (``--taskset.task.rewards.correct.weight 2``, ``--env.n 4``) adjust that config. The input is
never written to: the re-scored episodes go to a new folder (default, as the original's:
``outputs/<taskset>--replay/<uuid>/`` under the current folder) as ``traces.jsonl`` (written to a temporary name and renamed when
complete), with ``replay.json`` (the summary) and ``configs/replay.json`` (the env config used).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.cli.errors import UserError

TRACES_FILE = "traces.jsonl"  # verifiers.v1.rollout.TRACES_FILE (not imported: it loads the engine)
SAVED_CONFIG = Path("configs") / "eval.json"  # (or the original's configs/resolved/eval.json: v1_eval.saved_config)
REPLAY_CONFIG = Path("configs") / "replay.json"  # {"env": the env table a replay used, "source": ...}
#: An episode line longer than this is refused unread (a hostile or corrupt file must not take
#: the machine's memory); real episodes, token ids and logprobs included, are far smaller.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Episodes held and re-scored at once (each up to MAX_LINE_BYTES read).
MAX_CONCURRENT = 1024
#: Re-scorings of one episode at most (``-r``): each is a line of the output.
MAX_RESCORES = 1000


@dataclass
class Source:
    traces: Path
    run_dir: Path
    saved: dict[str, Any] = field(default_factory=dict)  # configs/eval.json, when the run has one
    metadata: dict[str, Any] = field(default_factory=dict)


def find_source(path: Path) -> Source:
    if path.is_dir():
        traces = path / TRACES_FILE
        if not traces.is_file():
            hint = " (a classic run: its results.jsonl holds no v1 traces)" if (path / "results.jsonl").is_file() else ""
            raise UserError(f"{path} holds no {TRACES_FILE}{hint}")
    elif path.is_file():
        traces = path
    else:
        raise UserError(f"{path} does not exist")
    run_dir = traces.parent
    source = Source(traces=traces, run_dir=run_dir)
    from verifiers.cli.v1_eval import saved_config

    found = saved_config(run_dir)
    saved = found.relative_to(run_dir) if found is not None else REPLAY_CONFIG  # else a replay's own output
    for name, attr in ((saved, "saved"), (Path("metadata.json"), "metadata")):
        file = run_dir / name
        if file.is_file():
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise UserError(f"{file} is not valid JSON: {exc}") from None
            if isinstance(data, dict):
                setattr(source, attr, data)
    return source


def env_config_for(source: Source, taskset: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The ``[env]`` table to re-score with: the run's own, its taskset replaced by ``taskset``
    when given (the saved knobs are kept only for the same id), ``overrides`` on top."""
    from verifiers.cli.v1_eval import _merge

    env = dict(source.saved.get("env") or {})
    saved_taskset = dict(env.get("taskset") or {})
    if taskset:
        env["taskset"] = saved_taskset if saved_taskset.get("id") == taskset else {"id": taskset}
    elif saved_taskset.get("id"):
        env["taskset"] = saved_taskset
    elif source.metadata.get("taskset_id"):
        env["taskset"] = {"id": source.metadata["taskset_id"]}
    else:
        raise UserError(
            f"cannot tell which taskset made {source.traces} (no {SAVED_CONFIG} or metadata.json beside it)",
            hint=f"name it: vf replay {source.traces} --taskset TASKSET_ID",
        )
    if not env.get("id") and source.metadata.get("env_id") not in (None, "", "single-agent"):
        env["id"] = source.metadata["env_id"]
    return _merge(env, overrides)


def output_folder(source: Source, output: Path | None, taskset_id: str) -> Path:
    """``output``, else the original's default: ``outputs/<taskset>--replay/<uuid>`` under the
    current folder (a fresh one each time)."""
    out = output if output is not None else Path("outputs") / f"{taskset_id.replace('/', '--')}--replay" / str(uuid.uuid4())
    target = out / TRACES_FILE
    if target.resolve() == source.traces.resolve():
        raise UserError(f"the output {target} is the input: vf replay never overwrites the traces it reads")
    if target.exists():
        raise UserError(f"{target} already exists", hint="choose another folder with -o/--output")
    return out


def read_lines(path: Path) -> Iterator[tuple[int, bytes | None, str | None]]:
    """(line number, raw line, why it is unreadable) for each non-blank line, streamed."""
    with open(path, "rb") as fh:
        number = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass  # skip the rest of the oversized line without holding it
                yield number, None, f"longer than {MAX_LINE_BYTES} bytes"
                continue
            if line.strip():
                yield number, line, None


@dataclass
class Outcome:
    """What re-scoring one line did."""

    line: int
    record: dict[str, Any] | None = None  # the new line (None: unreadable)
    problem: str | None = None
    old_reward: float | None = None
    new_reward: float | None = None
    traces: int = 0
    rescored: int = 0
    skipped: list[str] = field(default_factory=list)  # why traces were not re-scored
    scoring_errors: list[str] = field(default_factory=list)
    not_rerun: set[str] = field(default_factory=set)  # hooks that need a runtime
    old_scores: dict[str, list[float]] = field(default_factory=dict)
    new_scores: dict[str, list[float]] = field(default_factory=dict)
    type_mismatch: str | None = None


class Replayer:
    def __init__(self, env: Any) -> None:
        from verifiers.v1.configs import WireAgentConfig
        from verifiers.v1.episode import Episode
        from verifiers.v1.task import WireTaskData

        self.env = env
        self.task_cls = type(env.taskset).task_type()
        self.data_cls = self.task_cls.data_type()
        self.task_config = env.taskset.config.task
        self.episode_type = Episode[WireTaskData, self.task_cls.state_type(), WireAgentConfig]

    def task_for(self, data: Any) -> Any:
        """The taskset's ``Task`` over a saved row rebuilt as its declared ``TaskData`` class."""
        row = self.data_cls.model_validate(data.model_dump())
        return self.task_cls(row, config=self.task_config)

    async def replay(self, number: int, raw: bytes) -> Outcome:
        from pydantic import ValidationError

        out = Outcome(line=number)
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError(f"a {type(rec).__name__}, not an episode object")
            episode = self.episode_type.model_validate(rec)
        except (ValueError, ValidationError, RecursionError) as exc:
            out.problem = _one_line(exc)
            return out
        old = rec.get("reward")
        out.old_reward = float(old) if isinstance(old, int | float) and not isinstance(old, bool) else None
        out.traces = len(episode.traces)
        for trace in episode.traces:
            for name, r in trace.rewards.items():
                if r is not None:
                    out.old_scores.setdefault(name, []).append(r.score)
        failed = [e for e in episode.errors if not _finalize_error(e.message)]
        if failed:
            out.skipped.append(f"the episode failed: {failed[0].type}: {failed[0].message}"[:300])
            out.record = rec
            return out
        episode.errors = []  # a finalize error is run again below
        for trace in episode.traces:
            await self._rescore_trace(trace, out)
        try:
            episode_task = self.task_for(episode.task.data)
        except ValidationError:
            episode_task = None
        if episode_task is not None:
            from verifiers.v1.rollout import finalize_episode

            await finalize_episode(self.env, episode_task, episode)
        else:
            episode.ok = False
        out.record = self._record(rec, episode, episode_task)
        new = out.record.get("reward")
        out.new_reward = float(new) if isinstance(new, int | float) else None
        for trace in episode.traces:
            for name, r in trace.rewards.items():
                if r is not None:
                    out.new_scores.setdefault(name, []).append(r.score)
        return out

    async def _rescore_trace(self, trace: Any, out: Outcome) -> None:
        import time

        from pydantic import ValidationError

        from verifiers.v1.scoring import is_scoring_error

        rollout_errors = [e for e in trace.errors if not is_scoring_error(e)]
        if rollout_errors:
            out.skipped.append(f"trace {trace.agent.name}: the rollout failed: {rollout_errors[0].type}: {rollout_errors[0].message}"[:300])
            return
        if trace.task.type != self.task_cls.__name__:
            out.type_mismatch = f"{trace.task.type} (re-scored as {self.task_cls.__name__})"
        trace.errors, trace.ok = [], True
        try:
            task = self.task_for(trace.task.data)
        except ValidationError as exc:
            from verifiers.v1.errors import TaskError

            trace.rewards, trace.metrics = {}, {}
            trace.record_error(TaskError(f"replay: the saved task does not rebuild as {self.data_cls.__name__}: {_one_line(exc)}"))
            out.scoring_errors.append(trace.errors[-1].message)
            return
        self._keep_runtime_scores(task, trace, out)
        trace.timing.scoring.start = time.time()
        await task.score(trace)
        trace.timing.scoring.end = time.time()
        trace.ok = not trace.errors
        out.rescored += 1
        out.scoring_errors.extend(e.message for e in trace.errors)

    def _keep_runtime_scores(self, task: Any, trace: Any, out: Outcome) -> None:
        """Clear the trace's scores for scoring again, but keep what the hooks that need the
        rollout's runtime measured (they cannot run offline): a reward that reads such a metric,
        and the env's finalize, see what the rollout saw. A kept value is held to the rules of a
        live score: a finite number (else the key is left unscored and a ``TaskError`` says why),
        and a kept reward's weight is the one its hook declares now, never the file's. A runtime
        metric may have written several keys (a mapping), so every saved metric key that no hook
        scored again is kept when the task has one."""
        from verifiers.v1.errors import TaskError
        from verifiers.v1.scoring import InvalidScore, _number, needs_runtime
        from verifiers.v1.trace import Reward

        metric_fns, reward_fns = task.hooks("metric"), task.hooks("reward")
        runtime_metrics = [fn for fn in metric_fns if needs_runtime(fn)]
        runtime_rewards = {fn.__name__: fn for fn in reward_fns if needs_runtime(fn)}
        out.not_rerun.update(f"metric {fn.__name__}" for fn in runtime_metrics)
        out.not_rerun.update(f"reward {name}" for name in runtime_rewards)
        saved_metrics, saved_rewards = dict(trace.metrics), dict(trace.rewards)
        trace.metrics, trace.rewards = {}, {}
        rescored = {fn.__name__ for fn in metric_fns if not needs_runtime(fn)}
        for key, value in saved_metrics.items() if runtime_metrics else ():
            if key in rescored:
                continue
            try:
                trace.metrics[key] = None if value is None else _number("metric", key, value)
            except InvalidScore as exc:
                trace.metrics[key] = None
                trace.record_error(TaskError(f"replay: the saved {exc}; left unscored"))
        for name, fn in runtime_rewards.items():
            saved = saved_rewards.get(name)
            if saved is None:
                continue
            try:
                trace.rewards[name] = Reward(score=_number("reward", name, saved.score), weight=float(getattr(fn, "reward_weight", 1.0)))
            except InvalidScore as exc:
                trace.rewards[name] = None
                trace.record_error(TaskError(f"replay: the saved {exc}; left unscored"))

    def _record(self, rec: dict[str, Any], episode: Any, task: Any) -> dict[str, Any]:
        from verifiers.v1.rollout import episode_record, fill_state

        state: dict[str, Any] = {
            "_episode": episode, "_task": task, "_env_id": episode.env.id,
            "example_id": rec.get("example_id"), "rollout_index": rec.get("rollout_index", 0),
            "timing": rec.get("timing") or {},
        }  # fmt: skip
        fill_state(state, episode, self.env)
        return episode_record(state)


def _finalize_error(message: str) -> bool:
    from verifiers.v1.rollout import is_finalize_error

    return is_finalize_error(message)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


#: Messages of one kind (unreadable lines, skipped traces, scoring errors) a summary keeps.
KEEP_MESSAGES = 100


class Messages:
    """Every message counted, only the first `KEEP_MESSAGES` kept: a hostile file of millions of
    bad lines must not hold millions of messages in memory. ``len`` is the count."""

    def __init__(self) -> None:
        self.count = 0
        self.kept: list[str] = []

    def append(self, message: str) -> None:
        self.count += 1
        if len(self.kept) < KEEP_MESSAGES:
            self.kept.append(message)

    def extend(self, messages: Any) -> None:
        for m in messages:
            self.append(m)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return iter(self.kept)

    def __getitem__(self, index: slice) -> list[str]:
        return self.kept[index]


@dataclass
class Summary:
    source: str
    output: str
    taskset: str
    env: str
    episodes: int = 0
    unreadable: Messages = field(default_factory=Messages)
    traces: int = 0
    rescored: int = 0
    skipped: Messages = field(default_factory=Messages)
    scoring_errors: Messages = field(default_factory=Messages)
    not_rerun: set[str] = field(default_factory=set)
    type_mismatches: set[str] = field(default_factory=set)
    old_rewards: list[float] = field(default_factory=list)
    new_rewards: list[float] = field(default_factory=list)
    changed: int = 0
    old_scores: dict[str, list[float]] = field(default_factory=dict)
    new_scores: dict[str, list[float]] = field(default_factory=dict)

    def add(self, o: Outcome) -> None:
        if o.record is None:
            self.unreadable.append(f"line {o.line}: {o.problem}")
            return
        self.episodes += 1
        self.traces += o.traces
        self.rescored += o.rescored
        self.skipped.extend(f"line {o.line}: {s}" for s in o.skipped)
        self.scoring_errors.extend(f"line {o.line}: {s}" for s in o.scoring_errors)
        self.not_rerun |= o.not_rerun
        if o.type_mismatch:
            self.type_mismatches.add(o.type_mismatch)
        if o.old_reward is not None and o.new_reward is not None:
            self.old_rewards.append(o.old_reward)
            self.new_rewards.append(o.new_reward)
            self.changed += not math.isclose(o.old_reward, o.new_reward, rel_tol=1e-9, abs_tol=1e-9)
        for mine, theirs in ((self.old_scores, o.old_scores), (self.new_scores, o.new_scores)):
            for k, vs in theirs.items():
                mine.setdefault(k, []).extend(vs)

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "output": self.output, "taskset": self.taskset, "env": self.env,
            "num_episodes": self.episodes, "num_traces": self.traces, "num_rescored": self.rescored,
            "num_skipped": len(self.skipped), "skipped": self.skipped[:KEEP_MESSAGES],
            "num_unreadable": len(self.unreadable), "unreadable": self.unreadable[:KEEP_MESSAGES],
            "num_scoring_errors": len(self.scoring_errors), "scoring_errors": self.scoring_errors[:KEEP_MESSAGES],
            "not_rerun": sorted(self.not_rerun), "task_type_mismatches": sorted(self.type_mismatches),
            "old_avg_reward": _mean(self.old_rewards), "new_avg_reward": _mean(self.new_rewards),
            "num_changed": self.changed,
            "old_avg_scores": {k: _mean(v) for k, v in sorted(self.old_scores.items())},
            "new_avg_scores": {k: _mean(v) for k, v in sorted(self.new_scores.items())},
        }  # fmt: skip


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def refuse_multi_agent(env: Any, source: Path) -> None:
    """As the original: a run of an env with its own multi-agent play is not replayed. Re-scoring
    runs per trace, from what the traces saved, and cannot redo the env's cross-trace scoring from
    live state it kept (a custom ``State``, an env's own bookkeeping), which would come out wrong.
    The single-agent env is replayed, and so is the built-in best-of-n, whose ``finalize`` reads
    only its traces' rewards."""
    from verifiers.v1.envs.best_of_n import BestOfNEnv
    from verifiers.v1.envs.single_agent import SingleAgentEnv

    if not isinstance(env, SingleAgentEnv | BestOfNEnv):
        raise UserError(f"{source} is a multi-agent run ({type(env).__name__}): offline re-scoring runs per trace and "
                        "cannot redo the env's own cross-trace scoring, so multi-agent runs are not replayed "
                        "(single-agent and best-of-n runs are)")  # fmt: skip


async def replay_file(replayer: Replayer, source: Path, part: Path, summary: Summary, *,
                      limit: int | None, max_concurrent: int, rescores: int = 1) -> None:  # fmt: skip
    """Re-score ``source`` into ``part``, ``max_concurrent`` episodes at a time, in input order;
    each episode ``rescores`` times (each its own line: a judge's variance over one run)."""
    window: list[tuple[int, bytes]] = []

    async def flush(fh: Any) -> None:
        outcomes = await asyncio.gather(*(replayer.replay(n, raw) for n, raw in window))
        for o in outcomes:
            summary.add(o)
            if o.record is not None:
                fh.write(json.dumps(o.record, separators=(",", ":")) + "\n")
        window.clear()

    seen = 0
    # blocking file I/O on the loop is fine here: nothing else runs between the windows
    with open(part, "w", encoding="utf-8") as fh:  # noqa: ASYNC230
        for number, raw, problem in read_lines(source):
            if limit is not None and seen >= limit:
                break
            seen += 1
            if raw is None:
                summary.unreadable.append(f"line {number}: {problem}")
                continue
            for _ in range(rescores):
                window.append((number, raw))
                if len(window) >= max_concurrent:
                    await flush(fh)
        if window:
            await flush(fh)
        fh.flush()
        os.fsync(fh.fileno())


def run_replay(path: Path, *, taskset: str | None = None, output: Path | None = None, limit: int | None = None,
               max_concurrent: int = 16, overrides: dict[str, Any] | None = None, rescores: int = 1,
               dry_run: bool = False) -> int:  # fmt: skip
    """Re-score, write, print the summary; 0 when every trace that could be re-scored was, with no
    scoring error and no unreadable line, else 1. ``dry_run``: the config is resolved and written
    (``configs/replay.json``), nothing is re-scored."""
    from rich.console import Console

    from verifiers.v1.env import load_environment
    from verifiers.v1.plugins import PluginError

    if limit is not None and limit < 0:
        raise UserError("-n/--num-episodes must be 0 or more")
    if not 1 <= max_concurrent <= MAX_CONCURRENT:
        raise UserError(f"-c/--max-concurrent must be between 1 and {MAX_CONCURRENT}")
    if not 1 <= rescores <= MAX_RESCORES:
        raise UserError(f"-r/--num-rescores must be between 1 and {MAX_RESCORES}")
    source = find_source(path)
    env_table = env_config_for(source, taskset, overrides or {})
    try:
        env = load_environment(env_table)
    except (PluginError, ImportError, TypeError, ValueError) as exc:
        raise UserError(f"cannot load the taskset to re-score with: {exc}") from None
    refuse_multi_agent(env, source.traces)
    out = output_folder(source, output, str(env.config.taskset.id))
    out.mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    from verifiers.v1.configs.flags import resolved_like

    saved_env = resolved_like(env_table, env.config)  # command-line values as they ran
    (out / REPLAY_CONFIG).write_text(json.dumps({"env": saved_env, "source": str(source.traces)}, indent=2, default=str))
    if dry_run:
        print(f"config: {out / REPLAY_CONFIG}", flush=True)
        return 0
    summary = Summary(source=str(source.traces), output=str(out / TRACES_FILE), taskset=str(env.config.taskset.id), env=env.env_id)
    part = out / f".{TRACES_FILE}.part"
    from verifiers.engine.threads import reset_sync_pool, run_on_main_thread

    try:
        # the taskset's sync hooks on this, the main thread, as under vf eval
        run_on_main_thread(lambda: replay_file(Replayer(env), source.traces, part, summary, limit=limit,
                                               max_concurrent=max_concurrent, rescores=rescores))  # fmt: skip
        os.replace(part, out / TRACES_FILE)
    finally:
        part.unlink(missing_ok=True)
        reset_sync_pool()  # the lane's idle threads end: the interpreter does not wait on them
    (out / "replay.json").write_text(json.dumps(summary.as_json(), indent=2))
    print_summary(Console(), summary)
    return 1 if summary.scoring_errors or summary.unreadable else 0


def print_summary(console: Any, s: Summary) -> None:
    from rich.table import Table

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    table = Table(title=f"replay of {s.taskset} ({s.env})", show_header=True)
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_row("avg reward", fmt(_mean(s.old_rewards)), fmt(_mean(s.new_rewards)))
    for name in sorted(set(s.old_scores) | set(s.new_scores)):
        table.add_row(f"  {name}", fmt(_mean(s.old_scores.get(name, []))), fmt(_mean(s.new_scores.get(name, []))))
    console.print(table)
    console.print(
        f"episodes {s.episodes}, traces {s.traces}: re-scored {s.rescored}, skipped {len(s.skipped)}, "
        f"scoring errors {len(s.scoring_errors)}, unreadable lines {len(s.unreadable)}; "
        f"episode reward changed in {s.changed} of {len(s.old_rewards)}",
        soft_wrap=True,
    )
    if s.not_rerun:
        console.print(f"not re-run (they need the rollout's runtime; their saved values are kept): {', '.join(sorted(s.not_rerun))}", soft_wrap=True)
    if s.type_mismatches:
        console.print(f"note: traces of another task class: {', '.join(sorted(s.type_mismatches))}", soft_wrap=True)
    for label, items in (("skipped", s.skipped), ("scoring error", s.scoring_errors), ("unreadable", s.unreadable)):
        for item in items[:3]:
            console.print(f"{label}: {item}", markup=False, highlight=False, soft_wrap=True)
        if len(items) > 3:
            console.print(f"{label}: ... and {len(items) - 3} more (replay.json lists up to 100)", soft_wrap=True)
    console.file.flush()
    print(f"traces: {s.output}", flush=True)  # whole, for scripts (never wrapped)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf replay",
        description="Re-score saved v1 traces without calling the model; writes a new traces file.",
        epilog="Dotted flags adjust the run's env config: --taskset.task.rewards.NAME.weight 2, --env.n 4.",
        allow_abbrev=False,
    )
    p.add_argument("source", type=Path, help="a v1 run folder or its traces.jsonl")
    p.add_argument("--taskset", "--taskset.id", dest="taskset", default=None,
                   help="taskset id to re-score with (default: the run's own)")  # fmt: skip
    p.add_argument("-o", "--output", "--output-dir", dest="output", type=Path, default=None,
                   help="folder for the new traces.jsonl (default: outputs/<taskset>--replay/<uuid>)")  # fmt: skip
    p.add_argument("-n", "--num-episodes", "--num-traces", dest="limit", type=int, default=None, help="re-score the first N lines only")
    p.add_argument("-r", "--num-rescores", dest="rescores", type=int, default=1,
                   help="re-score each episode this many times, each its own line (a judge's variance)")  # fmt: skip
    p.add_argument("-c", "--max-concurrent", type=int, default=16, help="episodes re-scored at once (default 16)")
    p.add_argument("--dry-run", action="store_true", help="resolve and write the config (configs/replay.json), re-score nothing")
    # the original's display switches: taken; the summary table is printed either way
    p.add_argument("--rich", "--no-rich", dest="rich", action="store_const", const=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    from verifiers.cli.v1_eval import _set, _value

    args, rest = parser().parse_known_args(argv)
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        tok = rest[i]
        name, eq, value = tok.partition("=")
        if not name.startswith(("--env.", "--taskset.")):
            raise UserError(f"unknown argument {tok!r}", hint="vf replay --help")
        key = name[2:]
        key = key if key.startswith("env.") else f"env.{key}"
        if not eq:
            if i + 1 >= len(rest):
                raise UserError(f"{name} needs a value")
            i += 1
            value = rest[i]
        _set(overrides, key, _value(value))
        i += 1
    return args, overrides.get("env", {})


def main(argv: list[str] | None = None) -> None:
    """``vf replay`` and the ``vf-replay`` console script."""
    from verifiers.cli.errors import guarded

    @guarded
    def command(args_in: list[str]) -> int:
        args, overrides = parse(args_in)
        return run_replay(args.source, taskset=args.taskset, output=args.output, limit=args.limit,
                          max_concurrent=args.max_concurrent, overrides=overrides, rescores=args.rescores,
                          dry_run=args.dry_run)  # fmt: skip

    raise SystemExit(command(list(sys.argv[1:] if argv is None else argv)))
