"""``import verifiers.v1`` stays light: building and scoring a taskset loads no heavy dependency.

(Its time and memory are measured by ``benchmarks/import_time.py --cases v1``, not asserted here.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "openai", "aiohttp", "httpx", "datasets", "pyarrow", "torch", "transformers", "numpy", "msgpack", "math_verify",
    "mcp", "anthropic", "zmq", "uvicorn", "rich", "yaml", "verifiers.engine.run", "verifiers.engine.rollout",
    "verifiers.engine.group", "verifiers.clients",
)  # fmt: skip

CODE = """
import asyncio, json, sys
import verifiers.v1 as vf
sys.path.insert(0, sys.argv[1])
before = sorted(m for m in HEAVY if m in sys.modules)
ts = vf.load_taskset({"id": "vf-arith", "n": 50})
tasks = list(ts.select(vf.SelectConfig(limit=10, shuffle=True)))
trace = vf.Trace.for_task(tasks[0])
trace.commit_turn([vf.UserMessage(content="q")], vf.Response(id="r", created=0, model="m",
                  message=vf.AssistantMessage(content="0"), finish_reason="stop"))
asyncio.run(tasks[0].score(trace))
record = trace.to_record()
env = vf.load_environment({"taskset": {"id": "vf-arith", "n": 5}})  # the default env, its agent and harness
assert env.taskset.config.n == 5
after = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps([before, after, len(tasks), trace.reward]))
""".replace("HEAVY", repr(HEAVY))


def test_import_and_a_taskset_load_nothing_heavy() -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", CODE, str(Path(__file__).parent / "packages")],
        capture_output=True, text=True, timeout=120, cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after, n, reward = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (before, after, n) == ([], [], 10)
    assert reward in (0.0, 2.0)


BARE = """
import json, sys
import verifiers.v1 as vf
loaded = sorted(m for m in sys.modules if m.startswith(("verifiers", "pydantic")) or m in HEAVY)
names = [vf.Taskset, vf.reward, vf.load_environment]  # resolved on first use
print(json.dumps([loaded, sorted(m for m in HEAVY if m in sys.modules)]))
""".replace("HEAVY", repr(HEAVY))


def test_a_bare_import_loads_only_the_package() -> None:
    """``import verifiers.v1`` defines nothing until a name is used: no pydantic, no submodule
    (every public name resolves from the table in ``verifiers/v1/__init__.py``)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded, heavy_after_use = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == ["verifiers", "verifiers.v1"]
    assert heavy_after_use == []


DEFINE = """
import json, sys
before = set(sys.modules)
import verifiers.v1 as vf

class Row(vf.TaskData):
    answer: str

class AddTask(vf.Task[Row, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    def correct(self, task, trace) -> float:
        return float(trace.last_reply == task.answer)

class Adds(vf.Taskset[AddTask, vf.TasksetConfig]):
    def load(self):
        for i in range(3):
            yield AddTask(Row(prompt=f"{i}+{i}?", answer=str(2 * i)), self.config.task)

tasks = list(Adds(vf.TasksetConfig()).select(vf.SelectConfig(limit=2)))
assert [t.data.idx for t in tasks] == [0, 1]
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith(("verifiers", "pydantic")))))
"""

DATA_MODEL = [
    "verifiers", "verifiers.v1", "verifiers.v1.configs", "verifiers.v1.decorators", "verifiers.v1.fields",
    "verifiers.v1.messages", "verifiers.v1.plugins", "verifiers.v1.state", "verifiers.v1.task", "verifiers.v1.taskset",
]  # fmt: skip


def test_defining_a_taskset_loads_only_the_data_model() -> None:
    """Defining and iterating a taskset (the probe of ``benchmarks/import_time.py --cases v1``)
    loads the data model's own modules and no other: not the id grammar (``verifiers.ids``, loaded
    on the first lookup by id), not the model-call records (``verifiers.v1.types``), the command
    line's ``SelectCLIConfig`` or a trace's ``WireAgentConfig``, not traces, scoring or the env layer,
    and no part of pydantic that pydantic's own first model does not load."""
    root = Path(__file__).resolve().parents[2]
    # pydantic itself and what its first model loads are not counted; what a taskset adds is
    floor = "import pydantic\nclass Floor(pydantic.BaseModel):\n    x: str\n"
    code = floor + DEFINE
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == DATA_MODEL  # no pydantic module either (pydantic.functional_serializers: AS_ANY)


@pytest.mark.parametrize("base", ["TaskData", "State", "BaseConfig", "SharedTasksetConfig"])
def test_a_base_model_is_built_on_first_use_and_its_subclasses_when_defined(base: str) -> None:
    """The bases a taskset subclasses (``TaskData``, ``State``, configs) build their own validator
    on first use; the deferral is not inherited: a subclass with a field pydantic cannot handle
    fails at its definition, as any model does, and the base validates and reports as before."""
    import pydantic

    import verifiers.v1 as vf

    cls = getattr(vf, base)

    class Opaque:
        pass

    with pytest.raises(pydantic.PydanticSchemaGenerationError):
        type("Bad", (cls,), {"__annotations__": {"thing": Opaque}, "__module__": __name__})
    sub = type("Sub", (cls,), {"__annotations__": {"extra_knob": int}, "extra_knob": 1, "__module__": __name__})
    assert sub.__pydantic_complete__ and not sub.model_config.get("defer_build")
    assert sub().extra_knob == 1 and sub(extra_knob=2).extra_knob == 2
    with pytest.raises(pydantic.ValidationError, match="extra_knob"):
        sub(extra_knob="x")
    assert isinstance(sub(), cls) and cls.model_fields.keys() <= sub.model_fields.keys()


def test_task_data_validates_and_reports_as_before() -> None:
    import pydantic

    import verifiers.v1 as vf

    class Row(vf.TaskData):
        answer: str

    assert vf.TaskData(prompt="q").prompt_text == "q"
    with pytest.raises(pydantic.ValidationError, match="prompt"):
        vf.TaskData(prompt=3)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        Row(prompt="q", answer="a").answer = "b"
    assert vf.WireTaskData.model_validate({"prompt": "q", "x": 1}).model_extra == {"x": 1}
    with pytest.raises(pydantic.ValidationError, match="extra_forbidden"):
        vf.BaseConfig(nope=1)
    assert vf.State().artifacts == {}


def test_a_config_field_serializes_the_subclass_it_holds() -> None:
    """``TasksetConfig.task`` and ``TaskConfig.judges`` dump the fields of the subclass they hold
    (duck-typed serialization, as pydantic's ``SerializeAsAny``), in Python and JSON mode."""
    import verifiers.v1 as vf

    class Knobs(vf.TaskConfig):
        depth: int = 3

    class Grader(vf.JudgeConfig):
        strict: bool = True

    config = vf.TasksetConfig(task=Knobs(depth=4, judges=[Grader(id="", name="g")]))
    for dumped in (config.model_dump(), json.loads(config.model_dump_json())):
        assert dumped["task"]["depth"] == 4
        assert dumped["task"]["judges"][0]["strict"] is True and dumped["task"]["judges"][0]["name"] == "g"
    assert vf.TasksetConfig.model_json_schema()["properties"]["task"]["$ref"].endswith("TaskConfig")
