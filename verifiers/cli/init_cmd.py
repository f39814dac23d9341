"""``vf init NAME``: scaffold an environment package that installs, evaluates and passes its own test.

The scaffold is a complete small environment (adding two integers) rather than a stub, so that a
new author starts from something that runs: ``vf eval`` works on it at once and its test shows how
to check a reward function and a whole rollout against a scripted model without a GPU or an API key.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from verifiers.cli.errors import UserError
from verifiers.ids import entry_point_names, module_name_for, parse_env_id

#: Module names that are not stdlib but would still be shadowed (or shadow us) in most environments.
COMMON_MODULES = frozenset(
    {
        "test", "tests", "conftest", "setup", "main", "app", "src", "lib", "utils", "environments", "hub",
        "verifiers", "datasets", "numpy", "pandas", "torch", "transformers", "tokenizers", "openai",
        "requests", "httpx", "aiohttp", "pydantic", "rich", "typer", "click", "pytest", "setuptools", "pip",
        "wheel", "yaml", "jinja2", "math_verify", "vllm",
    }
)  # fmt: skip
ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*\Z")


def split_owner(name: str) -> tuple[str | None, str]:
    """``alice/My_Env`` -> ``("alice", "My_Env")``; an id without owner gives ``(None, name)``."""
    try:
        parsed = parse_env_id(name)
    except ValueError:
        return None, name
    if parsed.version:
        raise UserError(f"{name!r}: vf init takes owner/name or name, without @version (it starts at 0.1.0)")
    return parsed.owner, parsed.name


def normalise_id(name: str) -> str:
    """``My_Env`` -> ``my-env``: ids are lower case with dashes; the module uses underscores."""
    return name.strip().lower().replace("_", "-")


def check_id(name: str, target: Path | None = None) -> tuple[str, str]:
    """Validate an environment name (without owner); return ``(env_id, module_name)`` or raise UserError."""
    env_id = normalise_id(name)
    if not ID_PATTERN.match(env_id):
        raise UserError(
            f"invalid environment id {name!r}: use lower-case letters, digits and dashes, starting with a letter"
            " (e.g. my-env)"
        )
    module = module_name_for(env_id)
    if module in sys.stdlib_module_names or module in COMMON_MODULES:
        raise UserError(
            f"{name!r} would make a module named {module!r}, which shadows the {'standard library' if module in sys.stdlib_module_names else 'widely used'} "
            f"module of that name; choose a more specific id (e.g. {env_id}-env or my-{env_id})"
        )
    found = importlib.util.find_spec(module)
    if found is not None and found.origin:
        origin = Path(found.origin).resolve()
        if target is None or not origin.is_relative_to(target.resolve()):
            raise UserError(
                f"a module named {module!r} is already installed ({origin}); choose another id so they do not collide"
            )
    return env_id, module


def write_scaffold(target: Path, files: dict[str, str], what: str, *, force: bool, rewrite: tuple[str, ...] = ()) -> None:
    """Write a scaffold's ``files`` (relative path -> text) under ``target``, keeping files that
    exist unless ``force`` (or listed in ``rewrite``), and say what was written and kept."""
    if target.exists() and not target.is_dir():
        raise UserError(f"{target} exists and is not a folder")
    written, kept = [], []
    for rel, text in files.items():
        dest = target / rel
        if dest.exists() and not force and rel not in rewrite:
            kept.append(rel)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        written.append(rel)
    print(f"{what} in {target}")
    for rel in written:
        print(f"  wrote {rel}")
    for rel in kept:
        print(f"  kept existing {rel} (--force to overwrite)")


def init_environment(
    name: str,
    path: Path | None = None,
    *,
    force: bool = False,
    folder_name: str | None = None,
    rewrite: tuple[str, ...] = (),
) -> Path:
    """Write the package under ``path/<id>`` and print what was written and what to run next.

    ``name`` is ``name`` or ``owner/name``; the package's ``verifiers.environments`` entry points
    map ``name`` (and ``owner/name`` when given) to its ``load_environment``, so the loader finds it
    once installed. Existing files are kept unless ``force`` (all files) or their name is in
    ``rewrite``.
    """
    parent = (
        path if path is not None else (Path("environments") if Path("environments").is_dir() else Path("."))
    )
    owner, bare = split_owner(name)
    env_id = normalise_id(bare)
    target = parent / (folder_name or env_id)
    env_id, module = check_id(bare, target)
    entry_points = "\n".join(
        f'"{key}" = "{module}:load_environment"' for key in entry_point_names(owner and owner.lower(), env_id)
    )
    files = {
        "pyproject.toml": PYPROJECT.format(env_id=env_id, module=module, entry_points=entry_points),
        "README.md": README.format(env_id=env_id, module=module),
        f"{module}.py": MODULE.format(env_id=env_id, module=module),
        f"tests/test_{module}.py": TEST.format(env_id=env_id, module=module),
    }
    write_scaffold(target, files, f"environment {env_id!r}", force=force, rewrite=rewrite)
    print("next:")
    print(f"  pip install -e {target}          # make `vf eval {env_id}` find it")
    print(f"  python -m pytest {target}        # its own test")
    print(f"  vf check {target}                # the conformance check vf push runs")
    print(f"  vf eval {target} -n 5 -r 3        # against a running `vf serve` model")
    return target


PYPROJECT = """\
[project]
name = "{env_id}"
version = "0.1.0"
description = "Add two integers: a minimal single-turn environment to grow from."
readme = "README.md"
requires-python = ">=3.11"
# verifiers>=0.1.9: the classic API this package is written against.
dependencies = ["verifiers>=0.1.9"]
keywords = ["example", "single-turn", "arithmetic"]

# How `vf.load_environment` / `vf eval` find this environment once it is installed.
[project.entry-points."verifiers.environments"]
{entry_points}

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
include = ["{module}.py"]

[tool.hatch.build.targets.sdist]
include = ["{module}.py", "README.md", "tests/"]

# Defaults for `vf eval {env_id}`; command-line flags override them.
[tool.verifiers.eval]
num_examples = 5
rollouts_per_example = 3

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
"""

README = """\
# {env_id}

A minimal single-turn environment: the model is asked for the sum of two integers and is rewarded
when its reply ends with the right number. It is a starting point: replace the dataset, the prompt
and the reward function with your task.

## Task
- Type: single-turn chat.
- Data: generated on the fly from a seed (`num_examples` questions such as "What is 12 + 30?"); no
  download.
- Parser: `vf.Parser()` (the reply text as is).

## Reward
| Function | Weight | Meaning |
| --- | --- | --- |
| `correct_answer` | 1.0 | 1.0 when the last integer in the reply equals the sum, else 0.0 |

## Arguments (`-a '{{...}}'`)
| Argument | Type | Default | Meaning |
| --- | --- | --- | --- |
| `num_examples` | int | `50` | questions generated |
| `seed` | int | `0` | seed of the generator |
| `max_operand` | int | `99` | largest number in a question |
| `system_prompt` | str | "Reply with the final number only." | system message |

## Example
```bash
pip install -e .
vf eval {env_id} -n 5 -r 3 -a '{{"max_operand": 9}}'
python -m pytest            # the package's own test (uses a scripted model, no server needed)
vf check .                  # the conformance check `vf push` runs before publishing
```
"""

MODULE = '''\
"""{env_id}: add two integers (a minimal single-turn environment to grow from)."""

from __future__ import annotations

import random
import re

import verifiers as vf

SYSTEM_PROMPT = "Reply with the final number only."


def make_dataset(num_examples: int = 50, seed: int = 0, max_operand: int = 99) -> list[dict[str, str]]:
    """Rows with a `question` and its `answer`; the same seed always gives the same rows."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        rows.append({{"question": f"What is {{a}} + {{b}}?", "answer": str(a + b)}})
    return rows


def last_integer(text: str | None) -> str | None:
    """The last integer in a text (models often explain before answering)."""
    found = re.findall(r"-?\\d+", text or "")
    return found[-1] if found else None


def correct_answer(parser: vf.Parser, completion: list[dict], answer: str, **kwargs) -> float:
    """1.0 when the reply's last integer equals the reference answer, else 0.0."""
    return 1.0 if last_integer(parser.parse_answer(completion)) == answer else 0.0


def load_environment(
    num_examples: int = 50,
    seed: int = 0,
    max_operand: int = 99,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs,
) -> vf.Environment:
    """Build the environment; extra keyword arguments go to `vf.SingleTurnEnv`."""
    parser = vf.Parser()
    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(
        dataset=make_dataset(num_examples, seed, max_operand),
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
'''

TEST = '''\
"""Tests of {env_id}: the reward function, and whole rollouts against a scripted model."""

from __future__ import annotations

import re

import verifiers as vf
from verifiers.testing import ScriptedServer, reply

from {module} import correct_answer, load_environment, make_dataset


def test_dataset_is_deterministic_and_correct():
    rows = make_dataset(10, seed=3)
    assert rows == make_dataset(10, seed=3)
    for row in rows:
        a, b = map(int, re.findall(r"\\d+", row["question"]))
        assert row["answer"] == str(a + b)


def test_reward_accepts_only_the_right_sum():
    parser = vf.Parser()

    def said(text):
        return [{{"role": "assistant", "content": text}}]

    assert correct_answer(parser, said("12"), "12") == 1.0
    assert correct_answer(parser, said("7 + 5 makes 12"), "12") == 1.0
    assert correct_answer(parser, said("13"), "12") == 0.0
    assert correct_answer(parser, said(""), "12") == 0.0


def _solver(request):
    question = request.messages[-1]["content"]
    a, b = map(int, re.findall(r"\\d+", question))
    return reply(f"The sum is {{a + b}}")


def test_rollouts_against_a_scripted_model():
    env = load_environment(num_examples=4)
    with ScriptedServer(_solver) as server:
        good = env.evaluate_sync(client=server.base_url, model=server.model, num_examples=4, rollouts_per_example=2)
    assert good["metadata"]["num_rollouts"] == 8
    assert good["metadata"]["avg_reward"] == 1.0

    with ScriptedServer(lambda request: reply("no idea")) as server:
        bad = env.evaluate_sync(client=server.base_url, model=server.model, num_examples=4, rollouts_per_example=1)
    assert bad["metadata"]["avg_reward"] == 0.0


def test_conforms_to_the_environment_contract():
    # What `vf check` and `vf push` check: rows, scripted rollouts, finite rewards, no errors, teardown.
    report = vf.check_environment(load_environment(num_examples=4))
    assert report.ok, str(report)
'''
