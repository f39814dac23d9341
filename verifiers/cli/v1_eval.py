"""``vf eval`` for v1 environments: ``vf eval <taskset-id> [flags]`` and ``vf eval @ config.toml``.

The original's keys: ``model``, ``[client]`` (``base_url``, ``api_key_var``), ``[sampling]``,
``[env]`` (``id``, ``[env.taskset]``, ``[env.<role>.harness]``, ``[env.<role>.runtime]``),
``[select]`` (``limit`` / ``-n``), ``num_rollouts`` / ``-r``, ``max_concurrent`` / ``-c``,
``output_dir`` / ``-o``, ``[run]`` (``name``, ``dir``), ``resume``, ``dry_run``, ``clean``, ``rich``;
``[client]`` also takes ``headers_from_env`` and the per-phase ``timeout`` table. Any key can be set with a
dotted flag (``--env.agent.max-turns 3``, ``--sampling.temperature=0.2``; ``-`` and ``_`` are the
same), each value typed by the knob it sets (``configs.flags``); flags override the file. The run writes ``output_dir/<run>/traces.jsonl`` (one episode a
line), ``metadata.json`` and ``configs/eval.json`` (also at the original's ``configs/resolved/eval.json``);
``--resume`` (with the same config, or ``--resume <run folder>``) keeps the complete episodes
already written, and refuses a changed plan (:data:`PLAN_KEYS`).

``vf eval`` and ``vf-eval`` send a command line here when :func:`wants_v1` says it is one.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator

from verifiers.cli.errors import UserError
from verifiers.v1.configs import BaseConfig
from verifiers.v1.configs.client import BaseClientConfig
from verifiers.v1.configs.select import SelectCLIConfig

SHORT = {"-m": "model", "-n": "select.limit", "-r": "num_rollouts", "-c": "max_concurrent", "-o": "output_dir",
         "-b": "client.base_url", "-k": "client.api_key_var", "-s": "select.shuffle", "-v": "verbose"}  # fmt: skip
LONG_ALIASES = {
    "base_url": "client.base_url", "api_key_var": "client.api_key_var", "num_examples": "select.limit",
    "rollouts_per_example": "num_rollouts", "api_base_url": "client.base_url", "save_dataset": "save",
    "max_tokens": "sampling.max_tokens", "temperature": "sampling.temperature",
}  # fmt: skip
FLAGS = {"verbose", "resume", "save", "select.shuffle", "push", "push_samples", "push_anyway", "dry_run", "clean",
         "rich", "rich.show_logs"}  # take no value  # fmt: skip
#: What a run does after it ends, not part of its plan: left out of configs/eval.json (a resume does not push again).
AFTER_RUN = {"resume", "push", "push_samples", "push_anyway", "hub", "dry_run", "clean"}


SAVED_CONFIGS = (Path("configs") / "eval.json", Path("configs") / "resolved" / "eval.json")
"""Where a run folder keeps the config it ran with: ours, then the original's resolved dump."""


def saved_config(run_dir: Path) -> Path | None:
    """The config a run folder was run with (ours or the original's), None when it has none."""
    return next((run_dir / rel for rel in SAVED_CONFIGS if (run_dir / rel).is_file()), None)


class ClientSection(BaseClientConfig):
    """``[client]``: the original's client config (``verifiers.v1.configs.client``), ``type``
    ``eval`` or ``train``; ``train`` (its TrainClient: vLLM's token endpoint with client-side
    rendering) is refused, its own keys taken so that the refusal is the one line it gets."""

    type: Literal["eval", "train"] = "eval"
    renderer: Any = None
    renderer_model_name: str | None = None
    multiplex: int | None = None


class RunSection(BaseConfig):
    name: str | None = None
    dir: str | None = None
    attach: str | None = None
    """The original's hosted-platform run to stream into: refused here (``--push`` posts to our hub)."""


class V1EvalConfig(BaseConfig):
    FLAGS_LATER = frozenset({"env", "sampling"})  # the env's own configs type it when it loads; sampling: below
    env: dict[str, Any] = Field(default_factory=dict)
    run: RunSection = RunSection()
    model: str | None = Field(None, validation_alias=AliasChoices("model", "m"))
    client: ClientSection = ClientSection()
    sampling: dict[str, Any] = Field(default_factory=dict)
    select: SelectCLIConfig = SelectCLIConfig()
    num_rollouts: int = Field(1, ge=1, validation_alias=AliasChoices("num_rollouts", "group_size", "rollouts_per_example", "r"))
    max_concurrent: int | None = Field(128, ge=1, validation_alias=AliasChoices("max_concurrent", "c"))
    max_concurrent_requests: int | None = Field(None, ge=1)
    rollout_timeout: float | None = Field(None, gt=0)
    output_dir: Path = Field(Path("outputs"), validation_alias=AliasChoices("output_dir", "o"))
    resume: bool = False
    verbose: bool = Field(False, validation_alias=AliasChoices("verbose", "v"))
    save: bool = True
    push: bool = False
    """Post the run to the hub as an eval result of the taskset's environment version (``vf eval --push``)."""
    push_samples: bool = False
    push_anyway: bool = False
    hub: str | None = None
    max_error_rate: float = Field(0.1, ge=0.0, le=1.0)
    """With ``push``: a run with a larger share of failed episodes is not pushed (exit 1)."""
    dry_run: bool = False
    """Resolve and check the config, print it (JSON), and exit without running."""
    clean: bool = False
    """Delete the run's folder (``output_dir / run.dir``) first: only a folder that holds a run."""
    rich: bool | dict[str, Any] | None = None
    """The original's live dashboard switch (``--rich.show-logs`` is taken; our progress line is
    shown either way, on a terminal). ``--no-rich``: each trace is printed as JSON on stdout after
    the run, as the original prints it, and the summary goes to stderr."""

    @field_validator("sampling", mode="before")
    @classmethod
    def _typed_sampling(cls, value: Any) -> Any:
        # command-line values typed by the sampling knobs' own fields (``reasoning_effort`` stays
        # text); a provider's own key reads JSON (``--sampling.top_k 20``)
        from verifiers.v1.configs import SamplingConfig
        from verifiers.v1.configs.flags import has_flags, typed_fields

        value = typed_fields(SamplingConfig, value) if isinstance(value, dict) and has_flags(value) else value
        if isinstance(value, dict) and "max_completion_tokens" in value and "max_tokens" not in value:
            # one spelling for the cap, as the original sends it (its SamplingConfig reads both)
            value = {("max_tokens" if k == "max_completion_tokens" else k): v for k, v in value.items()}
        return value


LIST_FLAGS = frozenset(f"select.{side}.{field}" for side in ("include", "exclude") for field in ("idx", "ids", "keys", "names"))
"""Flags whose value is a list: each takes one value or several."""


def _json_list(text: str) -> list[Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _value(text: str, key: str = "") -> Any:
    """A flag's value: the text as written (``FlagText``), typed by the config field it lands in,
    as the original's typed flags are (``--env.taskset.subset 2024`` stays the text ``"2024"`` for a
    text knob, and is the number 2024 for a number knob; ``configs.flags``). ``None`` is None, as
    the original's flags spell it (``-c None``)."""
    from verifiers.v1.configs.flags import FlagText

    if text == "None":
        return None
    return FlagText(text)


def _is_flag(token: str) -> bool:
    """Whether a token is a flag, not a value (``-1`` and ``-0.5`` are values)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = [k.replace("-", "_") for k in dotted.split(".")]
    node = tree
    for k in keys[:-1]:
        nxt = node.get(k)
        if not isinstance(nxt, dict):
            nxt = node[k] = {}
        node = nxt
    node[keys[-1]] = value


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"config file {path} does not exist")
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
        else:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"config file {path}: the top level must be a table")
    return data


def parse_argv(argv: list[str]) -> tuple[dict[str, Any], Path | None]:
    """The config tree ``argv`` describes (file first, flags over it), and a ``--resume`` folder."""
    file_data: dict[str, Any] = {}
    flags: dict[str, Any] = {}
    resume_dir: Path | None = None
    positional: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "@":
            if i >= len(argv):
                raise UserError("`@` needs a config file: vf eval @ config.toml")
            file_data = _merge(file_data, read_config_file(Path(argv[i])))
            i += 1
            continue
        if tok.startswith("@") and len(tok) > 1:
            file_data = _merge(file_data, read_config_file(Path(tok[1:])))
            continue
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if name in SHORT:
            key = SHORT[name]
        elif name.startswith("--"):
            key = name[2:].replace("-", "_")
            key = LONG_ALIASES.get(key, key)
        else:
            raise UserError(f"unknown flag {name}")
        negate = key.startswith("no_") and not eq
        if negate:
            key = key[3:]
        if key == "resume" and not eq and i < len(argv) and not argv[i].startswith("-") and Path(argv[i]).is_dir():
            resume_dir = Path(argv[i])
            i += 1
            flags["resume"] = True
            continue
        if key in LIST_FLAGS:
            # a list of tasks to match, as the original's flags take one: one value or several
            # (``--select.include.names t3 t5``: every word up to the next flag), or a JSON list;
            # names, ids and keys stay text (``--select.include.ids 123``), an empty ``=`` is none
            items = [value] if eq and value else []
            while not eq and i < len(argv) and not _is_flag(argv[i]) and not argv[i].startswith("@"):
                items.append(argv[i])
                i += 1
                if len(items) == 1 and _json_list(items[0]) is not None:
                    break  # a JSON list is the whole value
            if not items and not eq:
                raise UserError(f"{name} needs a value")
            whole = _json_list(items[0]) if len(items) == 1 else None
            if whole is not None:
                val = whole
            elif key.endswith(".idx"):
                val = [_value(item, key) for item in items]
            else:
                val = list(items)
        elif eq:
            val: Any = _value(value, key)
        elif negate or key in FLAGS or key.rsplit(".", 1)[-1] in FLAGS:
            val = not negate
            if not negate and i < len(argv) and argv[i].lower() in ("true", "false"):
                val = argv[i].lower() == "true"  # ``--save false``, as the original's bool flags take
                i += 1
        elif i >= len(argv) or _is_flag(argv[i]):
            if "." not in name:  # a short flag or an alias (``-n``, ``--temperature``) needs its value
                raise UserError(f"{name} needs a value")
            # a bare knob flag: true for a true/false knob, as the original's (``--env.taskset.hint``);
            # any other knob refuses it when its config is checked
            from verifiers.v1.configs.flags import BARE

            val = BARE
        else:
            val = _value(argv[i], key)
            i += 1
            if "." in name:
                # a config knob given several values is a list, as the original's
                # (``--env.taskset.words a b``); a bare word is the taskset id only first
                more = []
                while i < len(argv) and not _is_flag(argv[i]) and not argv[i].startswith("@"):
                    more.append(_value(argv[i], key))
                    i += 1
                if more:
                    val = [val, *more]
        _set(flags, key, val)
    if len(positional) > 1:
        raise UserError(f"one taskset id, got {positional}")
    tree = _merge(file_data, flags)
    if positional:
        # the command line's own two ways of naming it must agree (a file's id is overridden by it)
        env_flags = flags.get("env") if isinstance(flags.get("env"), dict) else {}
        given = (env_flags.get("taskset") or {}).get("id") if isinstance(env_flags.get("taskset"), dict) else None
        if given is not None and str(given) != positional[0]:
            raise UserError(f"--env.taskset.id is set twice, with different ids: {positional[0]!r} and {given!r}; give one")
        _set(tree, "env.taskset.id", positional[0])
    return tree, resume_dir


def _clean(folder: Path, cfg: V1EvalConfig) -> None:
    """``clean``: the run's old folder goes, only when it is a run folder inside ``output_dir``
    (a ``run.dir`` of ``..`` or ``/`` never deletes what is not a run)."""
    import shutil

    root, target = cfg.output_dir.resolve(), folder.resolve()
    if target == root or root not in target.parents or folder.is_symlink():
        raise UserError(f"clean: {folder} is not a run folder inside {cfg.output_dir}; nothing was deleted")
    if not (saved_config(folder) is not None or (folder / "traces.jsonl").is_file()):
        raise UserError(f"clean: {folder} holds no run (no configs/eval.json or traces.jsonl); nothing was deleted")
    if cfg.resume:
        raise UserError("clean deletes the run that resume would continue: choose one")
    shutil.rmtree(folder)


def _run_folder(cfg: V1EvalConfig, env: Any) -> Path:
    name = cfg.run.dir or cfg.run.name
    if not name:
        import uuid

        # the time sorts a listing; the random part keeps runs started in the same second apart
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        taskset = str(env.config.taskset.id).replace("/", "--")
        name = f"{taskset}--{(cfg.model or 'model').replace('/', '--')}--{stamp}-{uuid.uuid4().hex[:8]}"
    return cfg.output_dir / name


def run(argv: list[str]) -> int:
    """Run a v1 eval; the exit code (0: the run ended, its failed episodes recorded as rows; 1: it
    could not run, or a push was refused)."""
    from rich.console import Console

    from verifiers.cli.render import summary_table
    from verifiers.v1.env import load_environment
    from verifiers.v1.plugins import PluginError

    tree, resume_dir = parse_argv(argv)
    if resume_dir is not None:
        saved = saved_config(resume_dir)
        if saved is None:
            raise UserError(f"{resume_dir} is not a v1 run folder (no configs/eval.json)")
        # what a run did after it ended is not part of its plan (the original's saved config holds
        # its ``push = true`` default): a resume never pushes unless asked again
        base = {k: v for k, v in read_config_file(saved).items() if k not in AFTER_RUN}
        tree = _merge(base, tree)
        tree.setdefault("run", {})["dir"] = resume_dir.name
        tree["output_dir"] = str(resume_dir.parent)
    _taskset_by_folder(tree)
    try:
        cfg = V1EvalConfig.model_validate(tree)
    except ValidationError as exc:
        from verifiers.v1.plugins import validation_message

        raise UserError(f"eval config: {validation_message(exc)}") from None
    if cfg.resume and not (cfg.run.dir or cfg.run.name):
        raise UserError("resume needs the run's folder: set run.dir (or run.name) in the config, or pass --resume <run folder>")
    if cfg.client.type == "train":
        raise UserError(
            "client.type = 'train' is the original's TrainClient (vLLM's token endpoint, rendered on the "
            "client); vf eval speaks OpenAI chat completions: use type = 'eval' (token ids come back when "
            "the server gives them), or vf train to train"
        )
    if cfg.run.attach:
        raise UserError("run.attach streams into a run on the original's hosted platform; this vf eval posts "
                        "finished runs to a verifiers hub with --push instead: drop run.attach")  # fmt: skip
    if cfg.push_samples:  # as in the classic vf eval: --push-samples implies --push
        cfg = cfg.model_copy(update={"push": True})
    if cfg.push and not cfg.save:
        raise UserError("push uploads the saved run: drop save = false (--no-save)")
    taskset = cfg.env.get("taskset")
    version = taskset_version(str(taskset.get("id") or "")) if isinstance(taskset, dict) else None
    try:
        env = load_environment(cfg.env)
        env.check()
    except (PluginError, ImportError, TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None
    view = env.taskset.select(cfg.select)
    if not view.bounded:
        # every selected task is read up front: an endless one is refused, as the original refuses
        # it, instead of reading forever
        raise UserError(f"{type(env.taskset).__name__} is infinite - bound the run with -n")
    tasks = list(view)
    if not tasks:
        raise UserError("the selection holds no tasks")
    folder = _run_folder(cfg, env) if cfg.save else None
    if cfg.dry_run:
        import sys

        from verifiers.v1.configs.flags import resolved_like

        dump = cfg.model_dump(mode="json", exclude={"dry_run", "clean"})
        dump["env"] = resolved_like(cfg.env, env.config)
        sys.stdout.write(json.dumps(dump, indent=2) + "\n")
        if folder is not None and saved_config(folder) is None and not (folder / "traces.jsonl").exists():
            # as the original: the resolved config where a run will keep it, to start it with
            # ``@ file``; never into a folder that already holds a run (its config is what ran)
            resolved = folder / SAVED_CONFIGS[1]
            resolved.parent.mkdir(parents=True, exist_ok=True)
            resolved.write_text(json.dumps({k: v for k, v in dump.items() if k not in AFTER_RUN}, indent=2), encoding="utf-8")
            sys.stderr.write(f"resolved config: {resolved}\n")
        return 0
    if cfg.clean and folder is not None and folder.exists():
        _clean(folder, cfg)
    traces = folder / "traces.jsonl" if folder is not None else None
    if traces is not None and not cfg.resume and traces.exists() and traces.stat().st_size > 0:
        raise UserError(f"{folder} already holds a run", hint=f"resume it: vf eval --resume {folder}")
    err = Console(stderr=True)
    # the loop in a helper thread; the taskset's sync hooks and tools on this, the main thread.
    # SIGTERM (a scheduler's stop) ends the run as Ctrl-C does, every rollout's own cleanup run
    # and what finished saved, as the original handles it
    import os
    import signal
    import threading

    from verifiers.engine.threads import run_on_main_thread

    previous = None
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler  # SIGINT ignored: SIGTERM stays the default
    ):
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    try:
        return run_on_main_thread(lambda: _run(cfg, env, tasks, folder, err, summary_table, version))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


async def _run(cfg: V1EvalConfig, env: Any, tasks: list[Any], folder: Path | None, err: Any, summary_table: Any,
               version: str | None = None) -> int:  # fmt: skip
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from verifiers.clients import ModelClient
    from verifiers.v1.configs.flags import resolved_like
    from verifiers.v1.rollout import run_v1

    client = ModelClient.from_any(cfg.client.client_fields())
    try:
        model = cfg.model
        if model is None:
            try:
                models = await client.models()
            except Exception as exc:
                raise UserError(f"no model given and the server at {cfg.client.base_url} did not list one ({exc})", hint="pass -m MODEL") from None
            if not models:
                raise UserError(f"no model given and the server at {cfg.client.base_url} serves none", hint="pass -m MODEL")
            model = models[0]
        if folder is not None:
            (folder / "configs").mkdir(parents=True, exist_ok=True)
            saved = cfg.model_dump(mode="json", exclude=AFTER_RUN)
            saved["env"] = resolved_like(cfg.env, env.config)  # command-line values as they ran
            saved["model"] = model
            if cfg.resume:
                _same_plan(folder, saved)
            # both where ours keeps it and where the original does (``configs/resolved/eval.json``:
            # the path its resume command and its tools read)
            for rel in SAVED_CONFIGS:
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(json.dumps(saved, indent=2), encoding="utf-8")
        err.print(f"[bold]{env.env_id}[/] over [bold]{env.config.taskset.id}[/] with [bold]{model}[/]: "
                  f"{len(tasks)} tasks x {cfg.num_rollouts} rollouts" + (f" -> {folder}" if folder else ""))  # fmt: skip
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                      console=err, transient=False, disable=not err.is_terminal) as progress:  # fmt: skip
            bar = progress.add_task("episodes", total=len(tasks) * cfg.num_rollouts, info="")

            def on_progress(ev: dict[str, Any]) -> None:
                progress.update(bar, completed=ev["done"], total=ev["total"], info=f"reward {ev['avg_reward']:.3f}  errors {ev['errors']}")

            out = await run_v1(
                env, tasks, client, model=model, sampling_args=cfg.sampling, num_rollouts=cfg.num_rollouts,
                max_concurrent=cfg.max_concurrent, max_concurrent_requests=cfg.max_concurrent_requests,
                timeout=cfg.rollout_timeout, folder=folder, resume=cfg.resume, on_progress=on_progress,
                metadata={"versions": versions(version)}, run=_run_info(folder, cfg.run.name),
            )  # fmt: skip
    finally:
        await client.aclose()
        from verifiers.engine.threads import reset_sync_pool

        reset_sync_pool()  # the lane's idle threads end: the interpreter does not wait on them
    from rich.console import Console

    plain = cfg.rich is False  # --no-rich, as the original: each trace as JSON on stdout, the rest on stderr
    console = err if plain else Console()
    console.print(summary_table(out.metadata, title="v1 eval"))
    if plain:
        _print_traces(out["outputs"])
    if folder is not None:
        err.print(f"traces: {folder / 'traces.jsonl'}")
    n, n_err = int(out.metadata.get("num_rollouts") or 0), int(out.metadata.get("num_errors") or 0)
    if cfg.push and folder is not None:
        if n and n_err / n > cfg.max_error_rate:
            err.print(f"error: {n_err} of {n} episodes failed ({n_err / n:.0%}, above max_error_rate "
                      f"{cfg.max_error_rate:g}); the run was not pushed", markup=False, highlight=False)  # fmt: skip
            return 1
        from verifiers.cli.eval_cmd import push_run

        push_run(str(env.config.taskset.id), folder, console, hub=cfg.hub, samples=cfg.push_samples, anyway=cfg.push_anyway)
    # as the original: failed episodes are rows of the run (``ok`` false), not a failed command
    return 0


def _print_traces(records: list[Any]) -> None:
    """Every trace of every episode as indented JSON on stdout, None fields left out (the
    original's ``--no-rich`` output)."""
    import sys

    from verifiers.v1.trace import WireTrace

    for record in records:
        for trace in dict(record).get("traces") or ():
            sys.stdout.write(WireTrace.model_validate(trace).model_dump_json(indent=2, exclude_none=True) + "\n")


#: The keys of a saved config that make a run's plan: a resume must not change them.
PLAN_KEYS = ("model", "env", "sampling", "select", "num_rollouts")


def _same_plan(folder: Path, saved: dict[str, Any]) -> None:
    """Refuse to resume ``folder`` with another plan than it was started with (its rows would be of
    two runs). Only a config this command wrote is compared (an original's run folder holds its own
    shape)."""
    ours = folder / SAVED_CONFIGS[0]
    if not ours.is_file():
        return
    try:
        before = json.loads(ours.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    def plan(config: dict[str, Any], key: str) -> Any:
        value = config.get(key)
        if key == "sampling" and isinstance(value, dict):
            value = V1EvalConfig._typed_sampling(value)  # an older run saved max_completion_tokens
        return value

    changed = [k for k in PLAN_KEYS if k in before and plan(before, k) != plan(saved, k)]
    if changed:
        raise UserError(
            f"--resume continues the run as it was started; this config differs in {', '.join(changed)}",
            hint="drop the changed flags, or start a new run (another run.dir)",
        )


def _run_info(folder: Path | None, name: str | None = None) -> Any:
    """The eval run every episode record names (the original's ``run`` key: type, id, name)."""
    import uuid

    from verifiers.v1.episode import EvalRunInfo

    return EvalRunInfo(id=uuid.uuid4().hex, name=name or (folder.name if folder is not None else None))


def taskset_version(taskset_id: str) -> str | None:
    """The installed version of the taskset package (the environment version ``--push`` attaches
    the run to; None without distribution metadata). A hub id ``owner/name[@version]`` goes through
    the classic loader's rules: missing or installed at another version than the one pinned is one
    error line (installed from the hub first when ``VF_AUTO_INSTALL=1``)."""
    from verifiers.errors import EnvironmentNotFoundError
    from verifiers.ids import parse_env_id
    from verifiers.utils.env_loading import locate, resolve

    try:
        owner = parse_env_id(taskset_id).owner
    except ValueError:
        return None  # not an id: the plugin loader says what is wrong with it
    try:
        return (resolve(taskset_id) if owner else locate(taskset_id)).version
    except EnvironmentNotFoundError as exc:
        if owner:
            raise UserError(str(exc)) from None
        return None  # a built-in taskset (verifiers.v1.tasksets) or a module the plugin loader finds


def versions(environment: str | None) -> dict[str, str | None]:
    """``metadata["versions"]``, as a classic run records them."""
    import verifiers

    return {"verifiers": verifiers.__version__, "environment": environment}


def _taskset_by_folder(tree: dict[str, Any]) -> None:
    """A taskset named by the path of its package folder (``vf eval ./my-taskset``) is run by its
    module's name, the folder made importable."""
    env = tree.get("env")
    taskset = env.get("taskset") if isinstance(env, dict) else None
    given = taskset.get("id") if isinstance(taskset, dict) else None
    if isinstance(given, str) and Path(given).exists() and (module := v1_package_at(given)) is not None:
        taskset["id"] = module


def v1_package_at(path: str) -> str | None:
    """The module name of the v1 package at ``path`` (a package folder or a module file),
    importable from now on; None when ``path`` holds no v1 package."""
    from verifiers.utils.env_loading import import_source, is_v1_package, resolve

    try:
        source = resolve(Path(path))
        if source.kind not in ("file", "folder"):
            return None
        module = import_source(source)
        return source.module if is_v1_package(source, module) else None
    except Exception:
        return None


def wants_v1(argv: list[str]) -> bool:
    """Whether an ``eval`` command line is a v1 one: a config file (``@``), a dotted flag
    (``--env.x``), ``--resume`` of a v1 run folder, or a first argument naming an importable
    v1 package."""
    if any(a == "@" or a.startswith("@") for a in argv):
        return True
    if any(a.startswith(("--env.", "--sampling.", "--select.", "--client.", "--run.")) for a in argv):
        return True
    for flag, folder in itertools.pairwise(argv):
        if flag == "--resume" and saved_config(Path(folder)) is not None:
            return True  # a v1 run folder (a classic one holds results.jsonl and no eval.json)
    first, i = None, 0
    while i < len(argv):  # the first argument that is not a flag's value
        tok = argv[i]
        if not tok.startswith("-"):
            first = tok
            break
        takes_value = "=" not in tok and SHORT.get(tok, tok[2:].replace("-", "_")) not in FLAGS and not tok.startswith("--no-")
        i += 2 if takes_value else 1
    if first is None:
        return False
    if Path(first).exists():
        if v1_package_at(first) is not None:
            return True  # a v1 package folder (or file)
        if first.endswith(".py") or "/" in first or Path(first).is_file():
            return False  # a classic environment's file or folder
        # a folder here that only shares the id's name: the id decides, as below
    try:
        from verifiers.ids import parse_env_id
        from verifiers.utils.env_loading import resolve

        if parse_env_id(first).owner:
            resolve(first)  # a hub id: installed first when VF_AUTO_INSTALL=1, as either eval would
    except Exception:
        return False  # not installed (and not allowed to be): the classic eval says so, with the fix
    try:
        from verifiers.v1.loading import v1_taskset_class
        from verifiers.v1.plugins import import_plugin

        return v1_taskset_class(import_plugin(first, "taskset")) is not None
    except Exception:
        return False


def main(argv: list[str]) -> None:
    from verifiers.cli.errors import guarded

    raise SystemExit(guarded(run)(argv))
