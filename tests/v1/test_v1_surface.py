"""Every public name of the original ``verifiers.v1`` (0.3.0 and 0.4.0) exists here or has a reason.

The releases are installed from the package index without dependencies (the classic surface
test's machinery, ``tests/compat``): only their source is read. For the data-model classes the
shapes must match too: the same pydantic fields, and the public methods and properties with the
same parameter names.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import verifiers.v1 as ours
from tests.compat.surface import module_files, public_names
from tests.compat.test_classic_surface import _install

RELEASES = ("0.3.0", "0.4.0")

_ENV = "the rest of the env/agent layer (shared env configs, config-merging helpers): after issue 19 step 4"
_HARNESS = "ACP harnesses and harness sessions: after issue 19 step 5 (null/bash and the interception proxy are here)"
_RUNTIME = ("the union of the runtimes' info records: a trace's agent.runtime here is the runtime's info as a plain "
            "mapping (type, id, workdir, borrowed), which no record type validates")
_SERVE = "env servers and their pools: the env-server issue (the wire shapes are here: verifiers.v1.wire)"

REASONS: dict[str, str] = {
    **dict.fromkeys(
        ("narrowed_env_annotation", "resolve_env_field"),
        _ENV,
    ),
    **dict.fromkeys(
        ("ACPConfig", "ACPHarness", "ACPTurn"),
        _HARNESS,
    ),
    **dict.fromkeys(
        ("RuntimeInfo",),
        _RUNTIME,
    ),
    **dict.fromkeys(("ServeConfig", "StaticPoolConfig", "ElasticPoolConfig", "pool_serve_kwargs"), _SERVE),
    "ACP": "0.3.0's ACP harness namespace, removed in 0.4.0 (ACPHarness): with the harness layer",
    "KeptTokens": "0.3.0's token-retention record of its old graph builder, removed in 0.4.0; tokens live on MessageNode",
    "LegacyEnvConfig": "0.3.0's bridge to classic environments, removed in 0.4.0; ours runs classic packages natively",
}

# (module, class) of the data model whose shape must match 0.4.0's, and what of it is not here yet
SHAPES = [
    ("verifiers.v1.task", "TaskData"), ("verifiers.v1.task", "Task"), ("verifiers.v1.task", "TaskResources"),
    ("verifiers.v1.task", "TaskTimeout"), ("verifiers.v1.taskset", "Taskset"), ("verifiers.v1.state", "State"),
    ("verifiers.v1.trace", "Trace"), ("verifiers.v1.trace", "Branch"), ("verifiers.v1.trace", "ModelCall"),
    ("verifiers.v1.trace", "Reward"), ("verifiers.v1.trace", "TraceTask"), ("verifiers.v1.trace", "AgentInfo"),
    ("verifiers.v1.trace", "Timing"), ("verifiers.v1.trace", "Error"), ("verifiers.v1.trace", "TimeSpan"),
    ("verifiers.v1.graph", "MessageNode"), ("verifiers.v1.episode", "Episode"), ("verifiers.v1.episode", "EnvInfo"),
    ("verifiers.v1.episode", "PolicySpan"), ("verifiers.v1.configs.task", "TaskConfig"),
    ("verifiers.v1.configs.task", "RewardFunctionConfig"), ("verifiers.v1.configs.taskset", "TasksetConfig"),
    ("verifiers.v1.configs.select", "SelectConfig"), ("verifiers.v1.configs.select", "TaskMatchConfig"),
    ("verifiers.v1.types", "Usage"), ("verifiers.v1.types", "Response"), ("verifiers.v1.types", "Request"),
    ("verifiers.v1.types", "AssistantMessage"), ("verifiers.v1.types", "ToolCall"), ("verifiers.v1.types", "ToolMessage"),
    ("verifiers.v1.types", "Tool"), ("verifiers.v1.types", "SamplingConfig"), ("verifiers.v1.serve.delta", "EpisodeAssembly"),
    ("verifiers.v1.serve.delta", "DeltaStreamer"), ("verifiers.v1.serve.delta", "TraceSummary"),
    ("verifiers.v1.serve.types", "RunRequest"), ("verifiers.v1.serve.types", "RunResponse"),
    ("verifiers.v1.serve.types", "CancelRequest"), ("verifiers.v1.serve.types", "CancelResponse"),
    ("verifiers.v1.serve.types", "BaseResponse"), ("verifiers.v1.judge", "Judge"), ("verifiers.v1.judge", "JudgeResponse"),
    ("verifiers.v1.configs.judge", "JudgeConfig"), ("verifiers.v1.judges.reference", "ReferenceJudge"),
    ("verifiers.v1.judges.reference", "ReferenceJudgeConfig"), ("verifiers.v1.judges.rubric", "RubricJudge"),
    ("verifiers.v1.judges.rubric", "RubricJudgeConfig"), ("verifiers.v1.judges.rubric", "Criterion"),
    ("verifiers.v1.judges.decision", "DecisionJudge"), ("verifiers.v1.judges.decision", "DecisionJudgeConfig"),
    ("verifiers.v1.serve.types", "BaseResponse"), ("verifiers.v1.mcp.toolset", "Toolset"),
    ("verifiers.v1.mcp.toolset", "ToolsetConfig"), ("verifiers.v1.mcp.toolset", "SharedToolsetConfig"),
]  # fmt: skip
SHAPE_REASONS: dict[tuple[str, str], str] = {
    ("TurnTokens", "*"): "the renderer's transient token carriers (spans, placeholders) come with the renderer client",
    ("DeltaStreamer", "_maybe_add_routing_repairs"): "private",
}
OUR_CLASS = dict.fromkeys(
    ("DeltaStreamer", "EpisodeAssembly", "TraceSummary", "RunRequest", "RunResponse", "CancelRequest", "CancelResponse", "BaseResponse"),
    "verifiers.v1.wire",
)


@pytest.fixture(scope="module")
def releases() -> dict[str, Path]:
    return {version: _install(version) for version in RELEASES}


def test_every_original_v1_name_exists_here_or_has_a_reason(releases) -> None:
    missing, used = [], set()
    for version, root in releases.items():
        names = public_names("verifiers.v1", module_files(root))
        assert {"Taskset", "TaskData", "Trace", "reward"} <= names  # the listing sees the API
        for name in sorted(names):
            if hasattr(ours, name):
                continue
            if name in REASONS:
                used.add(name)
            else:
                missing.append(f"{version} verifiers.v1:{name}")
    assert not missing, "v1 names missing here without a reason:\n" + "\n".join(missing)
    stale = sorted(set(REASONS) - used)
    assert not stale, f"reasons for names that are provided now (remove them): {stale}"
    for name in ours.__all__:
        getattr(ours, name)  # every name we list resolves


def _shape(path: Path, cls_name: str) -> tuple[set[str], dict[str, list[str]]]:
    """The fields (class-level annotations) and public methods/properties (parameter names) of a class."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fields, methods = set(), {}
    own_only = all(ast.unparse(b) not in ("BaseModel", "BaseConfig") and not ast.unparse(b).startswith(("BaseModel", "Generic")) for b in node.bases)
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if not item.target.id.startswith("_") and "ClassVar" not in ast.unparse(item.annotation):
                fields.add(item.target.id)
        elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (not item.name.startswith("_") or item.name == "__init__"):
            decorators = {ast.unparse(d) for d in item.decorator_list}
            if any(d.startswith(("field_serializer", "field_validator", "model_validator")) for d in decorators):
                continue
            a_ = item.args
            args = [a.arg for a in a_.posonlyargs + a_.args + a_.kwonlyargs] + [v.arg for v in (a_.vararg, a_.kwarg) if v]
            is_property = any(d.endswith("property") for d in decorators)  # property, cached_property
            methods[item.name] = ["<property>"] if is_property else [a for a in args if a not in ("self", "cls")]
    return fields, methods, own_only


def _our_params(obj: object) -> list[str]:
    return [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]


def test_the_data_model_has_the_original_shapes(releases) -> None:
    import importlib

    files = module_files(releases["0.4.0"])
    problems = []
    for module, cls_name in SHAPES:
        theirs_fields, theirs_methods, subclass = _shape(files[module], cls_name)
        mine = getattr(importlib.import_module(OUR_CLASS.get(cls_name, "verifiers.v1")), cls_name)
        if hasattr(mine, "model_fields"):
            our_fields = set(mine.model_fields)
            if theirs_fields - our_fields:
                problems.append(f"{cls_name}: fields missing {sorted(theirs_fields - our_fields)}")
            if (our_fields - theirs_fields) and not subclass:  # a subclass's AST shows only its own fields
                problems.append(f"{cls_name}: fields the original lacks {sorted(our_fields - theirs_fields)}")
        for name, params in theirs_methods.items():
            if (cls_name, name) in SHAPE_REASONS or (cls_name, "*") in SHAPE_REASONS:
                continue
            attr = inspect.getattr_static(mine, name, None)
            if attr is None:
                problems.append(f"{cls_name}.{name}: missing")
                continue
            if params == ["<property>"]:
                continue
            target = getattr(mine, name)
            if _our_params(target) != params:
                problems.append(f"{cls_name}.{name}: parameters {_our_params(target)}, the original has {params}")
    assert not problems, "\n".join(problems)


def test_0_3_0_spellings_work() -> None:
    files_names = ["head", "view", "shuffle"]
    for name in files_names:
        assert callable(getattr(ours.Taskset, name))
    assert _our_params(ours.Taskset.head) == ["num_tasks"] and _our_params(ours.Taskset.view) == ["transform"]


def test_decorators_take_the_original_parameters(releases) -> None:
    path = module_files(releases["0.4.0"])["verifiers.v1.utils.decorators"]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("reward", "metric", "stop", "tool", "intercept")):
        if any(ast.unparse(d) == "overload" for d in fn.decorator_list):
            continue
        assert _our_params(getattr(ours, fn.name)) == [a.arg for a in fn.args.args], fn.name
