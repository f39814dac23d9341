"""The command line of the v1 tools written like the original's (``vf validate``, ``vf debug``):
a target, ``--dotted.key VALUE`` flags (``--key=VALUE``, ``--no-key``), short flags, and ``@ file``
configs under them (flags win)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, field_validator, model_validator

from verifiers.cli.errors import UserError
from verifiers.cli.v1_eval import _merge, _set, _value, read_config_file
from verifiers.v1.configs import BaseConfig


@dataclass(frozen=True)
class FlagSpec:
    """One tool's flags: its name (``vf validate``), usage text, short flags and aliases (to
    dotted keys), the keys that take no value, and those whose value is kept as text."""

    command: str
    usage: str
    short: Mapping[str, str]
    aliases: Mapping[str, str]
    flags: frozenset[str]
    text: frozenset[str] = frozenset()


def parse_argv(argv: list[str], spec: FlagSpec) -> tuple[str | None, dict[str, Any]]:
    """The target and the option tree ``argv`` describes (``@`` files first, flags over them)."""
    file_data: dict[str, Any] = {}
    flags: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok in ("-h", "--help"):
            print(spec.usage)
            raise SystemExit(0)
        if tok == "@" or (tok.startswith("@") and len(tok) > 1):
            path = tok[1:] if tok != "@" else (argv[i] if i < len(argv) else "")
            if tok == "@":
                if not path:
                    raise UserError(f"`@` needs a config file: {spec.command} @ config.toml")
                i += 1
            file_data = _merge(file_data, read_config_file(Path(path)))
            continue
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if name in spec.short:
            key = spec.short[name]
        elif name.startswith("--"):
            key = name[2:].replace("-", "_")
        else:
            raise UserError(f"unknown flag {name}", hint=f"{spec.command} --help")
        negate = key.startswith("no_") and not eq
        key = spec.aliases.get(key[3:] if negate else key, key[3:] if negate else key)
        if eq:
            val: Any = _value(value)
        elif negate or key in spec.flags:
            val = not negate
        else:
            if i >= len(argv):
                raise UserError(f"{name} needs a value")
            val = argv[i] if key in spec.text else _value(argv[i])
            i += 1
        if key == "env_args" and isinstance(val, str):
            from verifiers.cli.errors import parse_json_arg

            val = parse_json_arg(val, "-a/--env-args")
        _set(flags, key, val)
    if len(positional) > 1:
        raise UserError(f"one environment at a time, got {positional}")
    tree = _merge(file_data, flags)
    taskset = tree.get("taskset") if isinstance(tree.get("taskset"), dict) else {}
    target = positional[0] if positional else taskset.get("id")
    if positional and taskset.get("id") not in (None, positional[0]):
        raise UserError(f"two tasksets named: {positional[0]!r} and --taskset.id {taskset['id']!r}")
    return (str(target) if target is not None else None), tree


class TimeoutSection(BaseConfig):
    setup: float | None = Field(None, gt=0)
    total: float | None = Field(None, gt=0)


class TasksetOptions(BaseConfig):
    """What the tools share: the taskset's knobs, the selection (typed by its own fields; ``-n``
    a number of tasks >= 1), the runtime table, the stage time limits, ``-v``, ``-p``."""

    FLAGS_LATER = frozenset({"taskset", "select", "runtime"})  # typed by the taskset's, selection's, runtime's configs
    taskset: dict[str, Any] = Field(default_factory=dict)
    select: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, Any] | None = None
    timeout: TimeoutSection = TimeoutSection()
    verbose: bool = Field(False, validation_alias=AliasChoices("verbose", "v"))
    env_dir_path: Path | None = None

    @field_validator("select", mode="before")
    @classmethod
    def _typed_select(cls, value: Any) -> Any:
        # command-line values typed by the selection's own fields (its match tables by theirs, later)
        from verifiers.v1.configs.flags import has_flags, typed_fields
        from verifiers.v1.configs.select import SelectCLIConfig

        return typed_fields(SelectCLIConfig, value) if isinstance(value, dict) and has_flags(value) else value

    @model_validator(mode="after")
    def _task_limit(self) -> TasksetOptions:
        limit = self.select.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"-n / select.limit must be a number of tasks >= 1, not {limit!r}")
        return self


def resolve_target(target: str) -> str:
    """A target that names a folder or file here (``.``, ``./my-taskset``, ``env.py``) as its
    absolute path, so the run's name is the folder's own and its saved config loads the same
    package from any folder (``@ <run>/configs/*.json --resume``); a taskset id as given."""
    path = Path(target).expanduser()
    return str(path.resolve()) if path.exists() else target
