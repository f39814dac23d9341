"""``harbor``: Harbor task folders as a v1 taskset, run in the ``sandbox`` runtime (no Docker).

A Harbor task is a folder: ``task.toml`` (metadata, ``[agent]`` / ``[verifier]`` timeouts,
``[environment]``), ``instruction.md`` (the prompt), ``environment/`` (what the agent's box holds),
``tests/test.sh`` (the verifier: it writes ``/logs/verifier/reward.txt`` or ``reward.json``) and
``solution/`` (a reference fix, never shown to the agent).

Here the environment is declared **without Docker**: the files of ``environment/`` are copied into
the rollout's work folder (also mounted at ``[environment].workdir``, e.g. ``/app``), and
``environment/requirements.txt`` (Python requirements) is built once into a cached environment by
the tool-folder builder (``verifiers.sandbox.toolenv``), first on ``PATH`` for the agent and the
verifier. The verifier runs after the agent, in the same sandbox work folder, with ``/tests`` (a
fresh copy of ``tests/``) and ``/logs`` mounted for that one run, no network, and its reward read
back without following links.

Refused, each with one line: a task whose environment is a ``Dockerfile`` or a compose file (at
load, unless ``ignore_dockerfile``), one that names a ``docker_image`` (at the rollout, by the
sandbox runtime), a separate-verifier task (unless ``ignore_separate_verifier``), multi-step tasks,
``${VAR}`` templates in ``[verifier.env]`` (host variables are not passed into sandboxes), and a
Harbor Hub dataset id (downloading needs the ``harbor`` CLI and the network: ``dataset`` names a
local folder here, or a folder the harbor CLI already exported to ``~/.cache/harbor``).

Config keys are the original's (``dataset``, ``tasks``, ``ignore_timeouts``,
``timeout_multiplier``, ``resource_multiplier``, ``require_image``, ``ignore_dockerfile``,
``ignore_separate_verifier``, ``artifact_max_bytes``, ``task.reward_key``; ``repo``,
``registry_path``, ``registry_url`` load and select the harbor CLI's cache folder).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from verifiers.v1.configs import TaskConfig, TasksetConfig
from verifiers.v1.decorators import reward
from verifiers.v1.errors import TaskError
from verifiers.v1.state import State
from verifiers.v1.task import MAX_ARTIFACT_BYTES, Task, TaskData, TaskResources, TaskTimeout
from verifiers.v1.taskset import Taskset

CACHE = Path.home() / ".cache" / "harbor"
MAX_ENVIRONMENT_BYTES = 64 * 1024 * 1024
MAX_ENVIRONMENT_FILES = 10_000
MAX_REWARD_BYTES = 1024 * 1024
REQUIREMENTS = "requirements.txt"


class HarborTaskConfig(TaskConfig):
    reward_key: str = Field("reward", min_length=1)
    """The verifier's named value used as the reward; its other values become metrics."""
    mcp_servers: list[dict] = Field(default_factory=list)


class HarborConfig(TasksetConfig):
    id: str = "harbor"
    artifact_max_bytes: int = Field(MAX_ARTIFACT_BYTES, gt=0)
    task: HarborTaskConfig = HarborTaskConfig()
    dataset: str = "harbor/hello-world"
    """A local folder of Harbor tasks (searched for ``task.toml``), or a Harbor Hub id whose
    export the harbor CLI has already cached (``~/.cache/harbor/<name>``)."""
    repo: str | None = None
    registry_path: Path | None = None
    registry_url: str | None = None
    tasks: list[str] | None = None
    """Task folder names to load (None: all)."""
    ignore_timeouts: bool = True
    """Drop the tasks' own agent and verifier timeouts (the run's limits apply)."""
    timeout_multiplier: float = Field(1.0, gt=0)
    resource_multiplier: float = Field(1.0, gt=0)
    require_image: bool = False
    """Refuse a task that declares no environment at all."""
    ignore_dockerfile: bool = False
    """Load a task whose environment is a Dockerfile anyway (NOT built: only its ``environment/``
    files and ``requirements.txt`` are used)."""
    ignore_separate_verifier: bool = False
    """Grade a separate-verifier task in the agent's own work folder."""


class HarborData(TaskData):
    keywords: list[str] = Field(default_factory=list)
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    task_dir: str = ""
    upload_environment: bool = False
    requirements: list[str] = Field(default_factory=list)
    """The task environment's Python requirements (``environment/requirements.txt``)."""
    verifier_env: dict[str, str] = Field(default_factory=dict)


class HarborTask(Task[HarborData, State, HarborTaskConfig]):
    """Sets the task's environment up in the sandbox and grades with its ``tests/test.sh``."""

    async def setup(self, trace: Any, runtime: Any) -> None:
        if getattr(getattr(runtime, "config", None), "type", None) != "sandbox":
            raise TaskError(f'harbor task {self.data.name!r} runs in the sandbox runtime (type = "sandbox"): its verifier writes /logs and reads /tests')
        files = environment_files(Path(self.data.task_dir)) if self.data.upload_environment else {}
        await runtime.prepare_environment(self.data.requirements, files=files, workdir=self.data.workdir)

    @reward(weight=1.0)
    async def solved(self, runtime: Any, trace: Any) -> dict[str, float]:
        scores = await run_verifier(runtime, Path(self.data.task_dir), self.data.workdir, self.data.verifier_env,
                                    self.data.timeout.scoring)  # fmt: skip
        key = self.config.reward_key
        if key not in scores:
            raise TaskError(f"the Harbor verifier wrote no {key!r} (it wrote {sorted(scores)}); set task.reward_key")
        trace.record_metrics({k: v for k, v in scores.items() if k != key})
        return {key: scores[key]}


class HarborTaskset(Taskset[HarborTask, HarborConfig]):
    def load(self) -> Iterator[HarborTask]:
        root = dataset_dir(self.config)
        found = sorted(p.parent for p in root.rglob("task.toml"))
        dirs = [d for d in found if self.config.tasks is None or d.name in self.config.tasks]
        if not dirs:
            raise ValueError(f"no Harbor tasks (folders with a task.toml) in {root}" + (f" named {self.config.tasks}" if self.config.tasks else ""))
        for idx, task_dir in enumerate(dirs):
            yield HarborTask(parse_task(task_dir, idx, self.config), self.config.task)


# --- loading ------------------------------------------------------------------------------------


def cache_dir(config: HarborConfig) -> Path:
    """Where the harbor CLI's export of ``config``'s dataset lies (the original's layout)."""
    parts = [config.dataset]
    if config.repo is not None:
        parts += ["repo", config.repo]
    if config.registry_path is not None:
        parts += ["registry_path", str(config.registry_path if config.repo is not None else config.registry_path.expanduser().resolve())]
    if config.registry_url is not None:
        parts += ["registry_url", config.registry_url]
    name = config.dataset.replace("/", "_").replace("@", "_")
    if len(parts) > 1:
        name = f"{name}_{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:12]}"
    return CACHE / name


def dataset_dir(config: HarborConfig) -> Path:
    local = Path(config.dataset).expanduser()
    if local.is_dir():
        return local.resolve()
    cached = cache_dir(config)
    if cached.is_dir():
        return cached
    raise ValueError(
        f"harbor dataset {config.dataset!r} is neither a local folder of Harbor tasks nor in the harbor CLI's cache "
        f"({cached}); downloading from Harbor Hub needs the harbor CLI and the network: point dataset at a local folder"
    )


def _toml(task_dir: Path) -> dict[str, Any]:
    path = task_dir / "task.toml"
    if path.stat().st_size > 1024 * 1024:
        raise ValueError(f"{task_dir.name}: task.toml is over 1 MiB")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{task_dir.name}: task.toml does not parse: {exc}") from None


def _table(doc: dict[str, Any], name: str, task: str) -> dict[str, Any]:
    value = doc.get(name) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{task}: [{name}] must be a table")
    return value


def _number(table: dict[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}.{key} must be a positive number, not {value!r}")
    return float(value)


def parse_task(task_dir: Path, idx: int, config: HarborConfig) -> HarborData:
    """One Harbor folder as task data; what this runtime cannot honour is one ``ValueError``."""
    name = task_dir.name
    doc = _toml(task_dir)
    if doc.get("steps"):
        raise ValueError(f"{name}: multi-step Harbor tasks are not supported; select single-step tasks with tasks = [...]")
    environment = _table(doc, "environment", name)
    agent = _table(doc, "agent", name)
    verifier = _table(doc, "verifier", name)
    metadata = _table(doc, "metadata", name)
    instruction = task_dir / "instruction.md"
    if not instruction.is_file():
        raise ValueError(f"{name}: no instruction.md")
    if not (task_dir / "tests" / "test.sh").is_file():
        raise ValueError(f"{name}: no tests/test.sh")
    if verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        if not config.ignore_separate_verifier:
            raise ValueError(f"{name}: asks for a separate verifier box, which the sandbox runtime does not provide; "
                             "set ignore_separate_verifier = true to grade in the agent's work folder")  # fmt: skip
    env_dir = task_dir / "environment"
    image = environment.get("docker_image") or None
    dockerfile = next((f for f in ("Dockerfile", "docker-compose.yaml", "docker-compose.yml") if (env_dir / f).exists()), None)
    if image is None and dockerfile is not None and not config.ignore_dockerfile:
        raise ValueError(
            f"{name}: its environment is built from environment/{dockerfile}, which needs Docker; declare it without Docker "
            "(environment/ files plus environment/requirements.txt) to run it on the sandbox runtime, or set ignore_dockerfile = true"
        )
    if image is None and not env_dir.is_dir() and config.require_image:
        raise ValueError(f"{name}: no [environment].docker_image and no environment/, and require_image = true")
    requirements: list[str] = []
    if image is None and (env_dir / REQUIREMENTS).is_file():
        from verifiers.sandbox.toolenv import normalized_requirements

        lines = (env_dir / REQUIREMENTS).read_text().splitlines()
        if any(line.strip() and not line.strip().startswith("#") for line in lines):
            try:
                requirements = list(normalized_requirements(lines))
            except ValueError as exc:
                raise ValueError(f"{name}: environment/{REQUIREMENTS}: {exc}") from None
    verifier_env = verifier.get("env") or {}
    if not isinstance(verifier_env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in verifier_env.items()):
        raise ValueError(f"{name}: [verifier.env] must map names to strings")
    if any("${" in v for v in verifier_env.values()):
        raise ValueError(f"{name}: [verifier.env] templates (${{VAR}}) would pass host variables into the sandbox; give literal values")
    m = config.timeout_multiplier
    agent_timeout = None if config.ignore_timeouts else _number(agent, "timeout_sec", f"{name}: [agent]")
    scoring_timeout = None if config.ignore_timeouts else _number(verifier, "timeout_sec", f"{name}: [verifier]")
    r = config.resource_multiplier
    cpus, memory, storage = (_number(environment, k, f"{name}: [environment]") for k in ("cpus", "memory_mb", "storage_mb"))
    tags = metadata.get("tags") or []
    return HarborData(
        idx=idx, id=name, name=name, description=metadata.get("description"),
        prompt=instruction.read_text().strip(), image=image, workdir=environment.get("workdir") or None,
        timeout=TaskTimeout(agent=agent_timeout * m if agent_timeout else None, scoring=scoring_timeout * m if scoring_timeout else None),
        resources=TaskResources(cpu=cpus * r if cpus else None, memory=memory / 1024 * r if memory else None,
                                disk=storage / 1024 * r if storage else None),
        artifact_max_bytes=config.artifact_max_bytes,
        keywords=[str(k) for k in metadata.get("keywords") or []], difficulty=metadata.get("difficulty"),
        category=metadata.get("category"), tags=[str(t) for t in tags] if isinstance(tags, list) else [],
        task_dir=str(task_dir), upload_environment=image is None and env_dir.is_dir(), requirements=requirements,
        verifier_env=dict(verifier_env),
    )  # fmt: skip


def environment_files(task_dir: Path) -> dict[str, bytes]:
    """The files of ``environment/`` (no Dockerfile, no links), bounded in number and size."""
    root = task_dir / "environment"
    out: dict[str, bytes] = {}
    total = 0
    for folder, dirs, files in os.walk(root):
        for entry in [*dirs, *files]:
            if (Path(folder) / entry).is_symlink():
                raise TaskError(f"{task_dir.name}: environment/ holds a link ({entry}); only files and folders are copied")
        for file in sorted(files):
            path = Path(folder) / file
            rel = path.relative_to(root).as_posix()
            if rel in ("Dockerfile", "docker-compose.yaml", "docker-compose.yml"):
                continue
            total += path.stat().st_size
            if len(out) >= MAX_ENVIRONMENT_FILES or total > MAX_ENVIRONMENT_BYTES:
                raise TaskError(f"{task_dir.name}: environment/ is over {MAX_ENVIRONMENT_FILES} files or {MAX_ENVIRONMENT_BYTES >> 20} MiB")
            out[rel] = path.read_bytes()
    return out


# --- grading ------------------------------------------------------------------------------------


def _fresh_folder(tag: str) -> Path:
    """A host folder the sandbox's uid may write, swept with the work dirs if we are killed."""
    from verifiers.sandbox.backends import SANDBOX_UID, drop_to_sandbox_uid, sandbox_root

    path = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-{tag}-", dir=sandbox_root()))
    path.chmod(0o755)
    if drop_to_sandbox_uid():
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


def _read_beneath(root: Path, *parts: str) -> bytes | None:
    """``root/parts`` if it is a regular file reached without a link (the sandbox wrote there);
    None when it is absent."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return None
            os.close(fd)
            fd = nxt
        try:
            file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except FileNotFoundError:
            return None
        with os.fdopen(file_fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise TaskError(f"the Harbor verifier's {'/'.join(parts)} is not a regular file")
            data = f.read(MAX_REWARD_BYTES + 1)
        if len(data) > MAX_REWARD_BYTES:
            raise TaskError(f"the Harbor verifier's {'/'.join(parts)} is over {MAX_REWARD_BYTES} bytes")
        return data
    except OSError as exc:
        raise TaskError(f"the Harbor verifier's {'/'.join(parts)} cannot be read: {exc}") from None
    finally:
        os.close(fd)


async def run_verifier(runtime: Any, task_dir: Path, workdir: str | None, env: dict[str, str], timeout: float | None) -> dict[str, float]:
    """``bash /tests/test.sh`` in the rollout's sandbox (a fresh ``/tests`` and ``/logs`` for this
    run), then its ``reward.json`` (every value a finite number) or else its ``reward.txt``."""
    import asyncio

    tests = await asyncio.to_thread(_fresh_folder, "tests")
    logs = await asyncio.to_thread(_fresh_folder, "logs")
    try:
        await asyncio.to_thread(shutil.copytree, task_dir / "tests", tests, dirs_exist_ok=True, symlinks=False)
        await asyncio.to_thread(_readable, tests)
        cd = f"cd {json.dumps(workdir)} && " if workdir else ""
        script = f"mkdir -p /logs/verifier /logs/agent && {cd}bash /tests/test.sh"
        result = await runtime.run(script, env or None, timeout=timeout, binds={str(tests): "/tests", str(logs): "/logs"})
        raw = await asyncio.to_thread(_read_beneath, logs, "verifier", "reward.json")
        if raw is not None:
            try:
                scores = json.loads(raw)
            except ValueError:
                scores = None
            if not isinstance(scores, dict) or not all(
                isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for k, v in scores.items()
            ):
                raise TaskError("the Harbor verifier's reward.json is not an object of finite numbers")
            return {k: float(v) for k, v in scores.items()}
        raw = await asyncio.to_thread(_read_beneath, logs, "verifier", "reward.txt")
        try:
            value = float((raw or b"").decode().strip())
            if not math.isfinite(value):
                raise ValueError
        except ValueError:
            tail = " ".join((result.stderr or result.stdout).split())[-300:]
            raise TaskError(f"the Harbor verifier wrote no reward.json and no valid reward.txt (exit {result.returncode}): {tail}") from None
        return {"reward": value}
    finally:
        from verifiers.sandbox.sandbox import _remove_tree

        await asyncio.to_thread(_remove_tree, tests)
        await asyncio.to_thread(_remove_tree, logs)


def _readable(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


__all__ = ["HarborConfig", "HarborData", "HarborTask", "HarborTaskConfig", "HarborTaskset"]
