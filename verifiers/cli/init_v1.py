"""``vf init NAME`` (and ``vf-init NAME``): scaffold a v1 environment package (``import verifiers.v1``).

The layout is the original 0.4.0 tool's: ``<path>/<module>/`` holding ``pyproject.toml``,
``README.md`` and the package ``<module>/`` whose ``__init__.py`` exports the one ``Taskset``
subclass in ``__all__`` (written in ``<module>/taskset.py``). Unlike the original's stubs, the
scaffold is a complete small taskset (adding two integers, rewarded when the reply ends with the
sum), so ``vf eval NAME`` runs on it at once, on this library and on the original (its hooks are
``async``, as the original requires). ``--add-tool`` adds a tool server, ``<module>/servers/tool.py``:
a ``vf.Toolset`` whose ``@vf.tool`` methods the model may call, configured by the task's config
(``tools``), as the original lays one out. ``vf init --classic`` writes the classic-API package
instead (``verifiers.cli.init_cmd``).
"""

from __future__ import annotations

from pathlib import Path

from verifiers.cli.init_cmd import check_id, normalise_id, split_owner, write_scaffold


def class_prefix(module: str) -> str:
    """``sum_pairs`` -> ``SumPairs`` (the scaffold's class names)."""
    return "".join(part[:1].upper() + part[1:] for part in module.split("_") if part)


def init_v1_environment(name: str, path: Path | None = None, *, force: bool = False, add_tool: bool = False,
                        add_harness: bool = False) -> Path:  # fmt: skip
    """Write the package under ``path/<module>`` and print what was written and what to run next.
    Existing files are kept unless ``force``."""
    parent = path if path is not None else (Path("environments") if Path("environments").is_dir() else Path("."))
    _, bare = split_owner(name)  # a v1 id's owner names nothing in the package (the loader drops it)
    env_id, module = check_id(bare, parent / normalise_id(bare).replace("-", "_"))
    target = parent / module
    prefix = class_prefix(module)
    files = {
        "pyproject.toml": PYPROJECT.format(env_id=env_id, module=module),
        "README.md": (README_TOOL if add_tool else README).format(env_id=env_id, module=module, prefix=prefix),
        f"{module}/__init__.py": (INIT_HARNESS if add_harness else INIT).format(module=module, prefix=prefix),
        f"{module}/taskset.py": TASKSET.format(
            env_id=env_id,
            prefix=prefix,
            tool_import=TOOL_IMPORT.format(module=module, prefix=prefix) if add_tool else "",
            task_config=TASK_CONFIG.format(prefix=prefix) if add_tool else "",
            task_generic=f"{prefix}Data, vf.State, {prefix}TaskConfig" if add_tool else f"{prefix}Data",
            tool_method=TOOL_METHOD.format(prefix=prefix) if add_tool else "",
            task_field=f"\n    task: {prefix}TaskConfig = {prefix}TaskConfig()" if add_tool else "",
            prompt_hint=" You may use the calc_add tool." if add_tool else "",
        ),
    }
    if add_harness:
        files[f"{module}/harness.py"] = HARNESS.format(env_id=env_id, prefix=prefix)
        files["README.md"] += README_HARNESS.format(env_id=env_id, module=module, prefix=prefix)
    if add_tool:
        files[f"{module}/servers/__init__.py"] = '"""The package\'s tool servers."""\n'
        files[f"{module}/servers/tool.py"] = TOOL_SERVER.format(prefix=prefix)
    write_scaffold(target, files, f"v1 environment {env_id!r}", force=force)
    print("next:")
    print(f"  pip install -e {target}          # make `vf eval {env_id}` find it")
    print(f"  vf eval {env_id} -n 5 -r 3        # against a running `vf serve` model (-b BASE_URL for another)")
    print(f"  vf eval {env_id} --env.taskset.num-tasks 20 --sampling.temperature 0.7")
    return target


PYPROJECT = """\
[project]
name = "{env_id}"
version = "0.1.0"
description = "Add two integers: a minimal v1 taskset to grow from."
readme = "README.md"
requires-python = ">=3.11"
# verifiers>=0.4.0: the v1 API (`import verifiers.v1 as vf`) as this package uses it.
dependencies = ["verifiers>=0.4.0"]
keywords = ["example", "v1", "arithmetic"]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["{module}"]
"""

INIT = '''\
"""The package's one export: the v1 loader takes the Taskset subclass listed in __all__."""

from {module}.taskset import {prefix}Taskset

__all__ = ["{prefix}Taskset"]
'''

INIT_HARNESS = '''\
"""The package's exports: the v1 loader takes the Taskset subclass listed in __all__, and the
Harness subclass beside it is what a role that names no harness runs."""

from {module}.harness import {prefix}Harness
from {module}.taskset import {prefix}Taskset

__all__ = ["{prefix}Taskset", "{prefix}Harness"]
'''

HARNESS = '''\
"""{env_id}'s own harness: how an agent plays its tasks. This one runs the chat program every v1
library ships (a model loop with the task's tools) with a preamble of its own ahead of the task's
system prompt. A role that names no harness runs it; knobs: `--env.agent.harness.KEY`."""

import verifiers.v1 as vf
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program


class {prefix}HarnessConfig(vf.HarnessConfig):
    """The harness's knobs."""

    preamble: str = "Work it out, then give the answer."


class {prefix}Harness(vf.Harness[{prefix}HarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True  # the task's system prompt is sent as a system message
    # the chat program runs no code of the model's (only the task's tools): no container needed.
    # A harness whose program runs commands keeps both True (and runs in a sandbox runtime)
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    SUPPORTS_MCP = True  # the chat program offers the task's MCP toolsets

    async def setup(self, runtime: vf.Runtime) -> None:
        """Once per rollout, before its first turn: ready the program in the rollout's runtime."""
        await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, self.config.resolved_env)

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        """One turn: run the program; its model calls go to `endpoint` (bearer `secret`)."""
        system_prompt, prompt = self.resolve_prompt(data)
        system = "\\n\\n".join(part for part in (self.config.preamble, system_prompt) if part)
        return await launch_chat_program(
            CHAT_PROGRAM_SOURCE, self.config, ctx, trace, runtime, endpoint, secret, mcp_urls, system, prompt
        )
'''

README_HARNESS = """
## Harness
`{module}/harness.py`: `{prefix}Harness`, the package's own way of playing a task (it runs the shared
chat program with a preamble of its own). A role that names no harness runs it; its knobs are
`--env.agent.harness.KEY` (`preamble`).
"""

TASKSET = '''\
"""{env_id}: add two integers (a minimal v1 taskset to grow from)."""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf
{tool_import}
SYSTEM_PROMPT = "Reply with the final number only.{prompt_hint}"


class {prefix}Data(vf.TaskData):
    """One task's data: what scoring needs beyond the prompt."""

    answer: int


def last_integer(text: str) -> int | None:
    """The last integer in a text (models often explain before answering)."""
    found = re.findall(r"-?\\d+", text)
    return int(found[-1]) if found else None
{task_config}

class {prefix}Task(vf.Task[{task_generic}]):
    """How one task is scored: each @vf.reward is weighted into the reward, each @vf.metric is
    recorded. Hooks are coroutines (``async def``), which every v1 library runs."""

    @vf.reward(weight=1.0)
    async def correct(self, task: {prefix}Data, trace: vf.Trace) -> float:
        """1.0 when the last integer of the model's reply is the sum, else 0.0."""
        return float(last_integer(trace.last_reply or "") == task.answer)

    @vf.metric
    async def reply_length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))
{tool_method}

class {prefix}Config(vf.TasksetConfig):
    """The taskset's knobs: `--env.taskset.num-tasks 20` on the command line, or [env.taskset] in a config file."""

    num_tasks: int = 50
    seed: int = 0
    max_operand: int = 99{task_field}


class {prefix}Taskset(vf.Taskset[{prefix}Task, {prefix}Config]):
    def load(self):
        """The tasks, one at a time (a generator: an endless taskset is allowed too)."""
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            a, b = rng.randint(0, self.config.max_operand), rng.randint(0, self.config.max_operand)
            data = {prefix}Data(id=f"sum-{{i}}", prompt=f"What is {{a}} + {{b}}?", system_prompt=SYSTEM_PROMPT, answer=a + b)
            yield {prefix}Task(data, self.config.task)
'''

TOOL_IMPORT = '''
from {module}.servers.tool import {prefix}Tools
'''

TASK_CONFIG = '''

class {prefix}TaskConfig(vf.TaskConfig):
    """The task's knobs (`--env.taskset.task.KEY`): here, how its tool server is run."""

    tools: vf.ToolsetConfig = vf.ToolsetConfig()
'''

TOOL_METHOD = '''
    @classmethod
    def toolsets(cls, config: {prefix}TaskConfig) -> list[vf.Toolset]:
        """The tool servers each rollout of this task gets (one MCP server each)."""
        return [{prefix}Tools(config.tools)]
'''

TOOL_SERVER = '''\
"""The task's tool server: an MCP server whose @vf.tool methods the model may call, named
`<TOOL_PREFIX>_<method>` (here `calc_add`). Each rollout starts it as `python -m` this module."""

import verifiers.v1 as vf


class {prefix}Tools(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return str(a + b)


if __name__ == "__main__":
    {prefix}Tools.run()
'''

README = """\
# {env_id}

A minimal v1 taskset (`import verifiers.v1 as vf`): the model is asked for the sum of two integers
and is rewarded when its reply ends with the right number. Replace the data, the prompt and the
reward with your task.

## Layout
- `{module}/taskset.py`: `{prefix}Data` (a task's fields), `{prefix}Task` (its `@vf.reward` and
  `@vf.metric` hooks), `{prefix}Config` (the knobs) and `{prefix}Taskset` (`load()` yields the tasks).
- `{module}/__init__.py`: exports `{prefix}Taskset` in `__all__`, which is how the loader finds it.

## Reward
| Hook | Kind | Meaning |
| --- | --- | --- |
| `correct` | reward (weight 1.0) | 1.0 when the last integer in the reply equals the sum |
| `reply_length` | metric | characters in the reply |

## Config (`--env.taskset.KEY VALUE` or `[env.taskset]`)
| Key | Default | Meaning |
| --- | --- | --- |
| `num_tasks` | `50` | tasks generated |
| `seed` | `0` | seed of the generator |
| `max_operand` | `99` | largest number in a task |

## Run
```bash
pip install -e .
vf eval {env_id} -n 5 -r 3                 # against a running `vf serve` model, or -b BASE_URL -m MODEL
vf eval {env_id} --env.taskset.max-operand 9
vf replay outputs/<run>                    # re-score a saved run after changing the reward
```
"""

README_TOOL = README.replace(
    "- `{module}/__init__.py`",
    "- `{module}/servers/tool.py`: `{prefix}Tools`, the task's tool server (`vf.Toolset`); its `@vf.tool`\n"
    "  `add` is offered to the model as `calc_add`. `{prefix}Task.toolsets` starts one per rollout.\n"
    "- `{module}/__init__.py`",
)
