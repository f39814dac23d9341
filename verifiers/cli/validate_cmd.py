"""``vf validate`` / ``vf-validate``: the checker (``vf check``) with the original ``vf-validate``'s
command line.

``vf validate <v1 taskset id | package folder | classic id> [options] [@ file.toml]``. A v1
package is checked by :mod:`verifiers.v1.check`, a classic one by :mod:`verifiers.check`, both
into the same verdict (``--json``: one JSON document on stdout, the schema ``vf check --json``
prints and the hub reads). Exit status 0 when it passed, 1 otherwise.

The original's options, all accepted: ``--taskset.<knob> VALUE`` (``--taskset.id`` names the
taskset too), ``--select.*`` (``-n`` = ``--select.limit``, ``-s`` = ``--select.shuffle``),
``--runtime.*`` (``--runtime.type subprocess``), ``--timeout.setup`` / ``--timeout.total``,
``--only-setup`` / ``--only-gold`` / ``--only-noop`` (the model-free checks alone), ``-c`` /
``--max-concurrent``, ``-o`` / ``--output-dir`` with ``--run.name`` / ``--run.dir`` (the run
folder, ``outputs/<target>--validate--<id>`` by default: ``configs/validate.json``,
``results.jsonl`` and ``summary.json`` in the original's shapes, :mod:`verifiers.v1.check_log`),
``--resume`` (check again into that folder: tasks with a verdict are kept), ``--clean`` (empty it first),
``-v`` / ``--verbose``, ``--rich`` / ``--no-rich`` (this command prints its report instead of a
live dashboard), ``@ file.toml`` (the same keys as a file; flags win). ``vf check``'s own flags
work too: ``-a`` / ``--env-args``, ``-r`` / ``--rollouts-per-example``, ``--timeout-per-rollout``,
``--json``, ``-p`` / ``--env-dir-path``.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, model_validator

from verifiers.cli import v1_args
from verifiers.cli.errors import UserError, guarded
from verifiers.cli.v1_eval import RunSection
from verifiers.v1.check_log import RESULTS_FILE, SUMMARY_FILE, CheckLog

USAGE = """usage: vf validate <taskset-id | folder | env-id> [--only-setup | --only-gold | --only-noop] [--json]
                   [-n N] [-r R] [-a JSON] [--taskset.KNOB V] [--select.KEY V] [--runtime.type subprocess]
                   [--timeout.setup S] [--timeout.total S] [-c N] [-o DIR] [--run.name NAME] [--resume] [--clean]
                   [@ file.toml]
Loads the environment, checks every task without a model (gold: Task.validate; noop: the untouched
task does not already pass), runs episodes of the first -n (2) against a scripted model and checks
traces, rewards and teardown. --only-* run that model-free check alone. Writes results.jsonl and
summary.json to outputs/<run>."""

SHORT = {"-n": "select.limit", "-s": "select.shuffle", "-c": "max_concurrent", "-o": "output_dir", "-v": "verbose",
         "-a": "env_args", "-r": "rollouts_per_example", "-p": "env_dir_path"}  # fmt: skip
ALIASES = {"num_examples": "select.limit", "num_rollouts": "rollouts_per_example", "taskset": "taskset.id"}
FLAGS = {"only_setup", "only_gold", "only_noop", "json", "resume", "clean", "verbose", "rich", "select.shuffle"}
SPEC = v1_args.FlagSpec("vf validate", USAGE, SHORT, ALIASES, frozenset(FLAGS), text=frozenset({"env_args"}))


class ValidateOptions(v1_args.TasksetOptions):
    """The command line (and ``@ file``) of ``vf validate``; unknown keys are refused."""

    only_setup: bool = False
    only_gold: bool = False
    only_noop: bool = False
    max_concurrent: int | None = Field(None, ge=1, validation_alias=AliasChoices("max_concurrent", "c"))
    output_dir: Path | None = Field(None, validation_alias=AliasChoices("output_dir", "o"))
    run: RunSection = RunSection()
    resume: bool = False
    clean: bool = False
    rich: bool = True
    json_: bool = Field(False, validation_alias=AliasChoices("json", "json_"))
    env_args: dict[str, Any] | None = None
    rollouts_per_example: int = Field(2, ge=1)
    timeout_per_rollout: float = Field(120.0, gt=0)

    @model_validator(mode="after")
    def _one_mode(self) -> ValidateOptions:
        if self.only_setup + self.only_gold + self.only_noop > 1:
            raise ValueError("pass at most one of --only-setup, --only-gold or --only-noop")
        return self

    @property
    def mode(self) -> str:
        return "setup" if self.only_setup else "gold" if self.only_gold else "noop" if self.only_noop else "all"


def parse_argv(argv: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The target and the option tree ``argv`` describes (``@`` files first, flags over them)."""
    return v1_args.parse_argv(argv, SPEC)


def _run_folder(opts: ValidateOptions, target: str) -> Path:
    """``output_dir / run.dir`` (default ``outputs/<target>--validate--<id>``), emptied by
    ``--clean``; a folder that already holds a validation is re-entered only by ``--resume``."""
    base = opts.output_dir or Path("outputs")
    name = opts.run.dir or opts.run.name or f"{Path(target).name.replace('/', '--')}--validate--{uuid.uuid4().hex[:8]}".lower()
    folder = base / name
    if opts.clean and not opts.resume and folder.exists():  # a resume keeps what the folder holds
        if folder.resolve() == base.resolve() or not folder.resolve().is_relative_to(base.resolve()):
            raise UserError("--clean needs run.dir to name a folder inside output_dir")
        shutil.rmtree(folder)
    held = (folder / SUMMARY_FILE).exists() or ((folder / RESULTS_FILE).exists() and (folder / RESULTS_FILE).stat().st_size > 0)
    if held and not opts.resume:
        raise UserError(f"{folder} already holds a validation",
                        hint="check again into it with --resume (tasks with a verdict are kept), or empty it with --clean")  # fmt: skip
    return folder


def run(argv: list[str]) -> int:
    from verifiers.cli.check_cmd import run_check
    from verifiers.v1.check import V1CheckOptions

    target, tree = parse_argv(argv)
    if target is None:
        raise UserError("name the environment to validate", hint="vf validate <taskset-id | folder>  (or --taskset.id, or @ file.toml)")
    target = v1_args.resolve_target(target)
    try:
        opts = ValidateOptions.model_validate(tree)
    except ValidationError as exc:
        from verifiers.v1.plugins import validation_message

        raise UserError(f"vf validate: {validation_message(exc)}") from None
    if opts.verbose:
        logging.getLogger("verifiers").setLevel(logging.DEBUG)
    select = dict(opts.select)
    limit = select.pop("limit", None)
    folder = _run_folder(opts, target)
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    # the command line as it ran, its folder named: `vf validate @ <run>/configs/validate.json
    # --resume` checks again into the same folder
    saved = opts.model_dump(mode="json", exclude={"resume", "clean", "json_"}, by_alias=False)
    saved["taskset"] = {**opts.taskset, "id": target}
    saved["output_dir"], saved["run"] = str(folder.parent), {"name": opts.run.name or folder.name, "dir": folder.name}
    (folder / "configs" / "validate.json").write_text(json.dumps(saved, indent=2), encoding="utf-8")
    log = CheckLog(folder, resume=opts.resume, mode=opts.mode)
    v1 = V1CheckOptions(
        taskset={k: v for k, v in opts.taskset.items() if k != "id"}, select=select, runtime=opts.runtime,
        mode=opts.mode, setup_timeout=opts.timeout.setup, check_timeout=opts.timeout.total,
        max_concurrent=opts.max_concurrent, all_tasks=limit is None, log=log,
    )  # fmt: skip
    print(f"validating {target} into {folder}", file=sys.stderr, flush=True)
    try:
        code = run_check(
            target, env_args_json=json.dumps(opts.env_args) if opts.env_args is not None else None,
            num_examples=int(limit) if limit is not None else 2, rollouts_per_example=opts.rollouts_per_example,
            timeout_per_rollout=opts.timeout_per_rollout, as_json=opts.json_, env_dir_path=opts.env_dir_path,
            v1_options=v1, save=log.write_summary,
        )  # fmt: skip
    except KeyboardInterrupt:
        print(f"interrupted; partial results: {folder} (vf validate @ {folder / 'configs' / 'validate.json'} --resume)",
              file=sys.stderr)  # fmt: skip
        return 130
    print(f"results: {folder}", file=sys.stderr if opts.json_ else sys.stdout)
    return code


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-validate`` (and the body of ``vf validate``)."""
    raise SystemExit(guarded(run)(list(sys.argv[1:] if argv is None else argv)))
