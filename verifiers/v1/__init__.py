"""``import verifiers.v1 as vf``: the task-centric API of the original library's 0.3/0.4 releases.

This part is the data model (task data, tasks, tasksets, configs), the decorators and their
scoring runner, traces and episodes with their wire forms, and loading by id; the env, harness
and runtime layer comes on top of the rollout engine (see docs/architecture.md).

Names resolve on first use from the table below, so ``import verifiers.v1`` loads pydantic and
nothing heavier (no openai, aiohttp, datasets, numpy or torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers.v1.types import ID, AssistantMessage, ContentPart, ImageUrlContentPart, ImageUrlSource, Message, MessageContent, Messages, Request, Response, Sampling, SamplingConfig, SamplingMask, SystemMessage, TextContentPart, Tool, ToolCall, ToolMessage, TurnTokens, Usage, UserMessage
    from verifiers.v1.state import State, StateT
    from verifiers.v1.task import Artifact, Task, TaskData, TaskResources, TaskTimeout, WireTaskData
    from verifiers.v1.taskset import Taskset
    from verifiers.v1.graph import ACP_SEMANTIC_EDGES_METADATA_KEY, MessageNode, ParentLink, SemanticEdge, SemanticEdgeSet
    from verifiers.v1.trace import TRACE_VERSION, ACPInfo, AgentInfo, AgentSpan, Branch, Error, InterceptRecord, ModelCall, PolicyEvent, Reward, TimeSpan, TimeSplit, Timing, Trace, TraceTask, VersionInfo, WireTrace
    from verifiers.v1.episode import EnvInfo, Episode, EvalRunInfo, EvalWorkInfo, GroupInfo, PolicySpan, RunInfo, TrainRunInfo, TrainWorkInfo, WireEpisode, WorkInfo
    from verifiers.v1.decorators import intercept, metric, reward, stop, tool
    from verifiers.v1.errors import EnvError, HarnessError, InterceptionError, ProviderError, RolloutError, SandboxError, TaskError, ToolsetError, TunnelError
    from verifiers.v1.configs import BaseConfig, DecoratedFunctionConfig, RewardFunctionConfig, SelectCLIConfig, SelectConfig, SharedTasksetConfig, TaskConfig, TaskMatchConfig, TasksetConfig
    from verifiers.v1.loading import EnvConfig, import_taskset, load_taskset, resolve_env_config, task_type, taskset_config_type

# public name -> "module:attribute"
_LAZY: dict[str, str] = {
    "ID": "verifiers.v1.types:ID",
    "AssistantMessage": "verifiers.v1.types:AssistantMessage",
    "ContentPart": "verifiers.v1.types:ContentPart",
    "ImageUrlContentPart": "verifiers.v1.types:ImageUrlContentPart",
    "ImageUrlSource": "verifiers.v1.types:ImageUrlSource",
    "Message": "verifiers.v1.types:Message",
    "MessageContent": "verifiers.v1.types:MessageContent",
    "Messages": "verifiers.v1.types:Messages",
    "Request": "verifiers.v1.types:Request",
    "Response": "verifiers.v1.types:Response",
    "Sampling": "verifiers.v1.types:Sampling",
    "SamplingConfig": "verifiers.v1.types:SamplingConfig",
    "SamplingMask": "verifiers.v1.types:SamplingMask",
    "SystemMessage": "verifiers.v1.types:SystemMessage",
    "TextContentPart": "verifiers.v1.types:TextContentPart",
    "Tool": "verifiers.v1.types:Tool",
    "ToolCall": "verifiers.v1.types:ToolCall",
    "ToolMessage": "verifiers.v1.types:ToolMessage",
    "TurnTokens": "verifiers.v1.types:TurnTokens",
    "Usage": "verifiers.v1.types:Usage",
    "UserMessage": "verifiers.v1.types:UserMessage",
    "State": "verifiers.v1.state:State",
    "StateT": "verifiers.v1.state:StateT",
    "Task": "verifiers.v1.task:Task",
    "TaskData": "verifiers.v1.task:TaskData",
    "WireTaskData": "verifiers.v1.task:WireTaskData",
    "TaskResources": "verifiers.v1.task:TaskResources",
    "TaskTimeout": "verifiers.v1.task:TaskTimeout",
    "Artifact": "verifiers.v1.task:Artifact",
    "Taskset": "verifiers.v1.taskset:Taskset",
    "MessageNode": "verifiers.v1.graph:MessageNode",
    "ParentLink": "verifiers.v1.graph:ParentLink",
    "SemanticEdge": "verifiers.v1.graph:SemanticEdge",
    "SemanticEdgeSet": "verifiers.v1.graph:SemanticEdgeSet",
    "ACP_SEMANTIC_EDGES_METADATA_KEY": "verifiers.v1.graph:ACP_SEMANTIC_EDGES_METADATA_KEY",
    "TRACE_VERSION": "verifiers.v1.trace:TRACE_VERSION",
    "ACPInfo": "verifiers.v1.trace:ACPInfo",
    "AgentInfo": "verifiers.v1.trace:AgentInfo",
    "AgentSpan": "verifiers.v1.trace:AgentSpan",
    "Branch": "verifiers.v1.trace:Branch",
    "Error": "verifiers.v1.trace:Error",
    "InterceptRecord": "verifiers.v1.trace:InterceptRecord",
    "ModelCall": "verifiers.v1.trace:ModelCall",
    "PolicyEvent": "verifiers.v1.trace:PolicyEvent",
    "Reward": "verifiers.v1.trace:Reward",
    "TimeSpan": "verifiers.v1.trace:TimeSpan",
    "TimeSplit": "verifiers.v1.trace:TimeSplit",
    "Timing": "verifiers.v1.trace:Timing",
    "Trace": "verifiers.v1.trace:Trace",
    "TraceTask": "verifiers.v1.trace:TraceTask",
    "VersionInfo": "verifiers.v1.trace:VersionInfo",
    "WireTrace": "verifiers.v1.trace:WireTrace",
    "EnvInfo": "verifiers.v1.episode:EnvInfo",
    "Episode": "verifiers.v1.episode:Episode",
    "EvalRunInfo": "verifiers.v1.episode:EvalRunInfo",
    "EvalWorkInfo": "verifiers.v1.episode:EvalWorkInfo",
    "GroupInfo": "verifiers.v1.episode:GroupInfo",
    "PolicySpan": "verifiers.v1.episode:PolicySpan",
    "RunInfo": "verifiers.v1.episode:RunInfo",
    "TrainRunInfo": "verifiers.v1.episode:TrainRunInfo",
    "TrainWorkInfo": "verifiers.v1.episode:TrainWorkInfo",
    "WireEpisode": "verifiers.v1.episode:WireEpisode",
    "WorkInfo": "verifiers.v1.episode:WorkInfo",
    "intercept": "verifiers.v1.decorators:intercept",
    "metric": "verifiers.v1.decorators:metric",
    "reward": "verifiers.v1.decorators:reward",
    "stop": "verifiers.v1.decorators:stop",
    "tool": "verifiers.v1.decorators:tool",
    "EnvError": "verifiers.v1.errors:EnvError",
    "HarnessError": "verifiers.v1.errors:HarnessError",
    "InterceptionError": "verifiers.v1.errors:InterceptionError",
    "ProviderError": "verifiers.v1.errors:ProviderError",
    "RolloutError": "verifiers.v1.errors:RolloutError",
    "SandboxError": "verifiers.v1.errors:SandboxError",
    "TaskError": "verifiers.v1.errors:TaskError",
    "ToolsetError": "verifiers.v1.errors:ToolsetError",
    "TunnelError": "verifiers.v1.errors:TunnelError",
    "BaseConfig": "verifiers.v1.configs:BaseConfig",
    "DecoratedFunctionConfig": "verifiers.v1.configs:DecoratedFunctionConfig",
    "RewardFunctionConfig": "verifiers.v1.configs:RewardFunctionConfig",
    "SelectCLIConfig": "verifiers.v1.configs:SelectCLIConfig",
    "SelectConfig": "verifiers.v1.configs:SelectConfig",
    "SharedTasksetConfig": "verifiers.v1.configs:SharedTasksetConfig",
    "TaskConfig": "verifiers.v1.configs:TaskConfig",
    "TaskMatchConfig": "verifiers.v1.configs:TaskMatchConfig",
    "TasksetConfig": "verifiers.v1.configs:TasksetConfig",
    "EnvConfig": "verifiers.v1.loading:EnvConfig",
    "import_taskset": "verifiers.v1.loading:import_taskset",
    "load_taskset": "verifiers.v1.loading:load_taskset",
    "resolve_env_config": "verifiers.v1.loading:resolve_env_config",
    "task_type": "verifiers.v1.loading:task_type",
    "taskset_config_type": "verifiers.v1.loading:taskset_config_type",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'verifiers.v1' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
