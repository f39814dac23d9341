"""The v1 data model: task data, tasks, tasksets and their views, configs narrowed by id, loading."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

import verifiers.v1 as vf
from verifiers.v1.plugins import PluginError, plugin_module_name


def test_task_data_is_a_frozen_row_with_the_original_fields() -> None:
    data = vf.TaskData(prompt="hi", idx=3, timeout={"scoring": 2.0})
    with pytest.raises(pydantic.ValidationError):
        data.prompt = "changed"  # type: ignore[misc]
    assert data.timeout.scoring == 2.0 and data.network_allow == ["*"] and data.artifact_max_bytes == 32 * 1024 * 1024
    messages = vf.TaskData(prompt=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
    assert isinstance(messages.prompt[1], vf.UserMessage) and messages.prompt_text == "s\n\nq"
    wire = vf.WireTaskData.model_validate({"prompt": "x", "answer": 4})
    assert wire.model_extra == {"answer": 4}
    with pytest.raises(pydantic.ValidationError):
        vf.TaskData(prompt=5)


def test_task_collects_its_decorated_hooks_per_class() -> None:
    from vf_arith import ArithData, ArithTask

    task = ArithTask(ArithData(prompt="1 + 1?", answer=2))
    assert [f.__name__ for f in task.hooks("reward")] == ["bonus", "correct"]  # priority 5 first
    assert [f.__name__ for f in task.hooks("metric")] == ["reply_length"]
    assert task.hooks("reward")[1].reward_weight == 2.0
    assert isinstance(task.config, vf.TaskConfig) and type(task.config).__name__ == "ArithTaskConfig"

    class Quiet(ArithTask):
        def correct(self, task, trace):  # an undecorated override switches the reward off
            return 0.0

    assert [f.__name__ for f in Quiet(task.data).hooks("reward")] == ["bonus"]
    # the hash is content identity; the key defaults to it
    same = ArithTask(ArithData(prompt="1 + 1?", answer=2))
    other = ArithTask(ArithData(prompt="1 + 1?", answer=3))
    assert task.hash == same.hash != other.hash and task.key == task.hash
    # hashed once per data object: new data (replaced, or a copy's) is hashed again
    assert task.with_data(answer=3).hash == other.hash and task.hash == same.hash
    task.data = other.data
    assert task.hash == other.hash

    class Aliased(ArithTask):
        again = ArithTask.correct  # one reward under two attribute names: still one hook

    assert [f.__name__ for f in Aliased(task.data).hooks("reward")] == ["bonus", "correct"]
    assert ArithTask.data_type() is ArithData and ArithTask.state_type() is vf.State
    with pytest.raises(TypeError, match="takes a TaskData"):
        ArithTask({"prompt": "x"})


def test_decorators_work_bare_and_with_arguments() -> None:
    @vf.reward
    def a() -> float:
        return 1.0

    @vf.reward(weight=0.25, priority=2)
    def b() -> float:
        return 1.0

    @vf.metric(priority=1)
    def m() -> float:
        return 1.0

    @vf.tool(name="search")
    def t() -> str:
        return ""

    @vf.intercept
    def i(request: vf.Request) -> None:
        return None

    assert (a.reward, a.reward_weight, b.reward_weight, b.reward_priority) == (True, 1.0, 0.25, 2)
    assert (m.metric, m.metric_priority, t.tool_name, i.intercept, vf.stop(a).stop) == (True, 1, "search", True, True)
    with pytest.raises(TypeError, match="finite number"):
        vf.reward(weight=float("nan"))


def _names(taskset) -> list[str]:
    return [t.data.name for t in taskset]


def test_taskset_sets_idx_and_the_views_chain() -> None:
    ts = vf.load_taskset({"id": "vf-arith", "n": 6})
    assert [t.data.idx for t in ts] == list(range(6))
    assert _names(ts.take(2)) == ["add-0", "add-1"] and _names(ts.head(1)) == ["add-0"]
    assert _names(ts.skip(4)) == ["add-4", "add-5"]
    assert _names(ts.include(idx="1:3,5")) == ["add-1", "add-2", "add-5"]
    assert _names(ts.include(ids=["a4"], names=["add-0"])) == ["add-0", "add-4"]
    assert _names(ts.exclude(idx=["0:4"])) == ["add-4", "add-5"]
    key = next(iter(ts.take(1))).key
    assert _names(ts.include(keys=[key])) == ["add-0"]
    shuffled = _names(ts.shuffle(seed=1))
    assert sorted(shuffled) == sorted(_names(ts)) and shuffled == _names(ts.shuffle(seed=1))
    picked = ts.select(vf.SelectConfig(exclude={"names": ["add-0"]}, skip=1, limit=2))
    assert _names(picked) == ["add-2", "add-3"]
    assert _names(ts) == [f"add-{i}" for i in range(6)]  # views never change the taskset they came from


def test_an_endless_taskset_is_read_lazily_and_refuses_what_would_never_end() -> None:
    import vf_counter

    ts = vf.load_taskset(vf.TasksetConfig(id="vf-counter"))
    assert not ts.bounded
    assert _names(ts.skip(2).take(3)) == ["n2", "n3", "n4"]
    assert vf_counter.READ[-1] == 4  # nothing read past what the view needed
    assert _names(ts.include(idx="10:12")) == ["n10", "n11"] and vf_counter.READ[-1] == 11
    assert ts.include(idx="0:3").bounded and ts.take(3).shuffle(0).bounded
    with pytest.raises(ValueError, match="infinite - cannot shuffle"):
        ts.shuffle()
    with pytest.raises(ValueError, match="include by ids, keys or names may never end"):
        ts.include(names=["n1"])
    with pytest.raises(ValueError, match="excluding an open idx range"):
        ts.exclude(idx="5:")


@pytest.mark.parametrize(
    ("idx", "message"),
    [("3:1", "idx range '3:1' is empty"), ("::0", "has step 0"), ("a", "not an int or a 'start:stop:step' slice"), (-1, "idx -1 is negative")],
)
def test_bad_idx_selections_say_what_is_wrong(idx, message) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        vf.SelectConfig(include={"idx": idx})


def test_configs_narrow_to_the_plugin_class_by_id() -> None:
    from vf_arith import ArithConfig, ArithTaskConfig

    ts = vf.load_taskset(vf.TasksetConfig(id="alice/vf-arith@1.0"))
    assert type(ts.config) is ArithConfig and ts.config.n == 4
    # no `task` table: still the task's own config class, with its defaults (a hook reads them)
    assert type(ts.config.task) is ArithTaskConfig and next(iter(ts)).config.bonus == 0.0
    env_cfg = vf.resolve_env_config({"taskset": {"id": "vf-arith"}})
    assert type(env_cfg.taskset.task) is ArithTaskConfig
    ts = vf.load_taskset({"id": "vf-arith", "n": 2, "task": {"bonus": 0.5}})
    assert type(ts.config.task) is ArithTaskConfig and next(iter(ts)).config.bonus == 0.5
    env = vf.resolve_env_config({"id": "single-agent", "taskset": {"id": "vf-arith", "start": 10}, "agent": {"max_turns": 3}})
    assert type(env.taskset) is ArithConfig and env.taskset.start == 10
    # narrowed to the env's own config class, as the original: roles typed, knobs and roles checked
    from verifiers.v1.agents import AgentConfig
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig

    assert type(env) is SingleAgentEnvConfig and type(env.agent) is AgentConfig and env.agent.max_turns == 3
    assert vf.resolve_env_config(env) is env
    with pytest.raises(PluginError, match="solver"):  # single-agent has no `solver` role
        vf.resolve_env_config({"taskset": {"id": "vf-arith"}, "solver": {"max_turns": 3}})
    with pytest.raises(PluginError, match="max_turns"):
        vf.resolve_env_config({"taskset": {"id": "vf-arith"}, "agent": {"max_turns": "many"}})
    best = vf.resolve_env_config(vf.EnvConfig(id="best-of-n", taskset={"id": "vf-arith"}))
    assert type(best).__name__ == "BestOfNEnvConfig" and type(best.taskset) is ArithConfig
    assert vf.taskset_config_type("vf-arith") is ArithConfig and vf.task_type("vf-arith").__name__ == "ArithTask"
    # the narrowed config dumps its own fields (SerializeAsAny): they survive a round trip
    again = vf.resolve_env_config(env.model_dump())
    assert again.taskset.start == 10


def test_bad_configs_get_one_clear_error() -> None:
    with pytest.raises(PluginError) as exc:
        vf.load_taskset({"id": "vf-arith", "nn": 3})
    assert str(exc.value) == "taskset ArithTaskset config: nn: Extra inputs are not permitted"
    with pytest.raises(PluginError) as exc:
        vf.load_taskset({"id": "vf-arith", "task": {"bonus": "lots"}})
    assert str(exc.value) == "taskset ArithTaskset config: task.bonus: Input should be a valid number, unable to parse string as a number"
    with pytest.raises(PluginError) as exc:
        vf.resolve_env_config({"taskset": {"id": "vf-arith", "n": "x"}})
    assert str(exc.value) == "env config: taskset (taskset 'vf-arith'): n: Input should be a valid integer, unable to parse string as an integer"
    with pytest.raises(ModuleNotFoundError) as missing:
        vf.load_taskset({"id": "owner/no-such-taskset@2"})
    assert str(missing.value) == (
        "taskset 'owner/no-such-taskset@2' not found: no module 'no_such_taskset'. A taskset is an installed package "
        "whose __all__ exports its taskset class; install it first."
    )
    with pytest.raises(PluginError, match=r"exports 2 Taskset subclasses in __all__ \(One, Two\); export exactly one"):
        vf.load_taskset("vf-two")
    with pytest.raises(PluginError, match="has no __all__"):
        vf.load_taskset("vf-noall")
    with pytest.raises(PluginError, match=r"taskset\.id is empty"):
        vf.load_taskset(vf.TasksetConfig())
    with pytest.raises(PluginError, match="invalid plugin id"):
        vf.load_taskset("no such/../")
    with pytest.raises(ModuleNotFoundError, match="no module 'c'"):  # a path names its last part
        vf.load_taskset("a/b/c")


def test_ids_map_to_modules() -> None:
    assert plugin_module_name("owner/My-Env@1.2") == "my_env"
    assert plugin_module_name("reverse-text") == "reverse_text"
    # a package folder given as a path names its last part, as the original reads one
    assert plugin_module_name("./envs/My-Env") == plugin_module_name("a/b/my-env/") == "my_env"


def test_the_classic_loader_can_tell_a_v1_package() -> None:
    import vf_arith
    import vf_two

    from verifiers.v1.loading import v1_taskset_class

    assert v1_taskset_class(vf_arith) is vf_arith.ArithTaskset
    import verifiers.ids

    assert v1_taskset_class(verifiers.ids) is None
    with pytest.raises(PluginError):
        v1_taskset_class(vf_two)


def test_a_plugin_config_can_be_registered_by_id() -> None:
    from verifiers.v1.configs import BaseConfig
    from verifiers.v1.plugins import narrow_field, register_config

    class FastRuntime(BaseConfig):
        type: str = "fast"
        cores: int = 1

    register_config("runtime", "fast", FastRuntime)
    data = {"runtime": {"type": "fast", "cores": 4}}
    narrow_field(data, "runtime", "runtime", key="type")
    assert isinstance(data["runtime"], FastRuntime) and data["runtime"].cores == 4
    with pytest.raises(PluginError, match=r"unknown runtime 'slow' \(known: fast\)"):
        narrow_field({"runtime": {"type": "slow"}}, "runtime", "runtime", key="type")
    with pytest.raises(PluginError, match=r"runtime \(runtime 'fast'\): cores: Input should be a valid integer"):
        narrow_field({"runtime": {"type": "fast", "cores": "many"}}, "runtime", "runtime", key="type")


def test_a_taskset_yields_its_own_task_type_and_applies_the_system_prompt_file(tmp_path) -> None:
    from vf_arith import ArithData, ArithTask

    class Wrong(vf.Taskset[ArithTask]):
        def load(self):
            yield ArithTask(ArithData(prompt="1", answer=1))
            yield vf.Task(vf.TaskData(prompt="2"))

    with pytest.raises(TypeError, match="yielded a Task at position 1; it declares ArithTask"):
        list(Wrong())

    class NotATask(vf.Taskset):
        def load(self):
            return [{"prompt": "x"}]

    with pytest.raises(TypeError, match=r"load\(\) yielded dict at position 0, not a Task"):
        list(NotATask())
    prompt = tmp_path / "system.txt"
    prompt.write_text("You add.")
    ts = vf.load_taskset({"id": "vf-arith", "system_prompt": str(prompt), "n": 2})
    assert [t.data.system_prompt for t in ts] == ["You add.", "You add."]
    with pytest.raises(ValueError, match=r"system_prompt file .* cannot be read"):
        vf.load_taskset({"id": "vf-arith", "system_prompt": str(tmp_path / "missing.txt")})


def test_a_key_override_is_what_selection_matches() -> None:
    from vf_arith import ArithTask, ArithTaskset

    class Keyed(ArithTask):
        @property
        def key(self) -> str:
            return f"arith/{self.data.id}"

    class KeyedSet(ArithTaskset):
        def load(self):
            for task in super().load():
                yield Keyed(task.data, task.config)

    ts = KeyedSet(vf.load_taskset("vf-arith").config)
    assert [t.data.name for t in ts.include(keys=["arith/a2"])] == ["add-2"]


def test_a_taskset_refuses_a_config_of_another_class_and_a_load_that_returns_nothing() -> None:
    from vf_arith import ArithTaskset

    with pytest.raises(TypeError, match=r"ArithTaskset takes a ArithConfig, not a TasksetConfig \(vf.load_taskset narrows"):
        ArithTaskset(vf.TasksetConfig())

    class Forgot(vf.Taskset):
        def load(self):
            [vf.Task(vf.TaskData())]  # no return

    with pytest.raises(TypeError, match=r"Forgot.load\(\) returned None; return or yield its tasks"):
        list(Forgot())


def test_a_toml_env_table_narrows_like_a_dict() -> None:
    import tomllib

    from vf_arith import ArithConfig, ArithTaskConfig

    text = """
[env]
id = "single-agent"

[env.taskset]
id = "me/vf-arith@0.1.0"
n = 3

[env.taskset.task]
bonus = 0.5

[env.taskset.task.rewards.correct]
weight = 4.0

[env.agent.runtime]
type = "subprocess"
"""
    env = vf.resolve_env_config(tomllib.loads(text)["env"])
    assert type(env.taskset) is ArithConfig and type(env.taskset.task) is ArithTaskConfig
    ts = vf.load_taskset(env.taskset)
    assert len(list(ts)) == 3 and next(iter(ts)).hooks("reward")[-1].reward_weight == 4.0
    assert env.model_extra == {} and env.agent.runtime.type == "subprocess"  # the role, typed


def test_sampling_folds_its_provider_layers_and_keeps_a_plain_table() -> None:
    from verifiers.v1.configs import SamplingConfig

    folded = SamplingConfig.model_validate({"max_completion_tokens": 7, "extra_body": {"top_k": 3, "max_tokens": 9}, "temperature": 0.5})
    # the outer layer wins over extra_body; max_completion_tokens is read as max_tokens
    assert folded.model_dump(exclude_none=True) == {"max_tokens": 7, "temperature": 0.5, "top_k": 3}
    assert SamplingConfig.model_validate({"extra_body": None, "top_p": 0.9}).model_dump(exclude_none=True) == {"top_p": 0.9}
    table = {"max_tokens": 32, "seed": 1}
    assert SamplingConfig.model_validate(table).model_dump(exclude_none=True) == {"max_tokens": 32, "seed": 1}
    assert table == {"max_tokens": 32, "seed": 1}  # the caller's table is left as it was


def test_trace_and_episode_ids_are_uuid4_hex() -> None:
    import uuid

    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.fields import new_id
    from verifiers.v1.trace import Trace, TraceTask

    task = TraceTask(type="T", data=vf.TaskData(prompt="q"))
    ids = [new_id() for _ in range(200)] + [Trace(task=task).id, Episode(env=EnvInfo(id="e"), task=task).id]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_shared_env_knobs_fill_an_envs_own_block_as_the_originals_merge_defaults_does() -> None:
    import verifiers.v1 as vf

    assert issubclass(vf.EnvConfig, vf.SharedEnvConfig) and "id" not in vf.SharedEnvConfig.model_fields
    shared = vf.SharedEnvConfig.model_validate({"max_concurrent_agents": 4, "taskset": {"system_prompt": "sys.txt"},
                                                "retries": {"max_retries": 3}})  # fmt: skip
    merged = vf.merge_defaults(shared, {"taskset": {"id": "vf-sums", "n": 2}, "retries": {"max_retries": 5}})
    # what the shared block sets fills in, nested; the env's own values win; plain defaults stay out
    assert merged == {"max_concurrent_agents": 4, "taskset": {"system_prompt": Path("sys.txt"), "id": "vf-sums", "n": 2},
                      "retries": {"max_retries": 5}}  # fmt: skip
    assert vf.EnvConfig.model_validate(merged).max_concurrent_agents == 4
    # a block that names another plugin than the default's is taken alone
    harness = vf.HarnessConfig(id="bash", env={"A": "1"})
    assert vf.merge_defaults(harness, {"id": "null"}) == {"id": "null"}
    assert vf.merge_defaults(harness, {}) == {"id": "bash", "env": {"A": "1"}}
    assert vf.merge_defaults(vf.SamplingConfig(temperature=0.5), {"max_tokens": 8}) == {"temperature": 0.5, "max_tokens": 8}
    # a nested block is merged by its own config's rules: a member's alias of a sampling knob wins
    agent = vf.AgentConfig.model_validate({"sampling": {"temperature": 0.5, "max_tokens": 10}})
    merged = vf.merge_defaults(agent, {"sampling": {"max_completion_tokens": 20}})
    assert merged["sampling"] == {"temperature": 0.5, "max_tokens": 20}
    # the harness a role that names none runs: the package's own, else null
    assert vf.default_agent_harness("vf-own-harness").id == "vf-own-harness"
    assert vf.default_agent_harness("vf-sums").id == "null"
