"""The episode: the traces of one env run on one task, with the run's standing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, Self

from pydantic import BaseModel, Field, computed_field, model_validator

from verifiers.v1.configs import WireAgentConfig
from verifiers.v1.fields import new_id
from verifiers.v1.graph import FLOAT_DECIMALS, RECORD_FLOAT_DECIMALS
from verifiers.v1.state import State, StateT
from verifiers.v1.task import DataT, WireTaskData
from verifiers.v1.trace import EXCLUDE_FIELDS, AgentConfigT, Error, Trace, TraceTask
from verifiers.v1.types import Usage


class EnvInfo(BaseModel):
    id: str = ""
    name: str | None = None


class GroupInfo(BaseModel):
    id: str


class PolicySpan(BaseModel):
    """The policy versions live while the episode was generated."""

    start: int
    end: int

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end < self.start:
            raise ValueError("policy span end must be at least its start")
        return self

    @property
    def drift(self) -> int:
        return self.end - self.start


class TrainWorkInfo(BaseModel):
    type: Literal["train"] = "train"
    step: int
    policy: PolicySpan | None = None


class EvalWorkInfo(BaseModel):
    type: Literal["eval"] = "eval"
    step: int
    policy: PolicySpan | None = None


WorkInfo = Annotated[TrainWorkInfo | EvalWorkInfo, Field(discriminator="type")]


class TrainRunInfo(BaseModel):
    type: Literal["train"] = "train"
    id: str
    name: str | None = None
    work: WorkInfo


class EvalRunInfo(BaseModel):
    type: Literal["eval"] = "eval"
    id: str
    name: str | None = None


RunInfo = Annotated[TrainRunInfo | EvalRunInfo, Field(discriminator="type")]


class Episode(BaseModel, Generic[DataT, StateT, AgentConfigT]):
    id: str = Field(default_factory=new_id)
    env: EnvInfo = Field(default_factory=EnvInfo)
    task: TraceTask[DataT]
    """The task dispatched (present even when no trace was produced)."""
    group: GroupInfo | None = None
    run: RunInfo | None = None
    ok: bool = False
    is_timeout: bool = False
    errors: list[Error] = Field(default_factory=list)
    traces: list[Trace[DataT, StateT, AgentConfigT]] = Field(default_factory=list)
    """Every agent's trace, in completion order."""

    def record_run(self, run: Any) -> None:
        self.run = run

    @property
    def last_error(self) -> Error | None:
        return self.errors[-1] if self.errors else None

    @property
    def usage(self) -> Usage | None:
        return Usage.aggregate(u for t in self.traces if (u := t.usage) is not None)

    @computed_field
    @property
    def num_input_tokens(self) -> int:
        return sum(t._token_counts()[0] for t in self.traces)

    @computed_field
    @property
    def num_output_tokens(self) -> int:
        return sum(t._token_counts()[1] for t in self.traces)

    @computed_field
    @property
    def num_total_tokens(self) -> int:
        return sum(t._token_counts()[2] for t in self.traces)

    @property
    def num_turns(self) -> int:
        return sum(t.num_turns for t in self.traces)

    @property
    def by_agent(self) -> dict[str, list[Trace[DataT, StateT, AgentConfigT]]]:
        out: dict[str, list[Trace[DataT, StateT, AgentConfigT]]] = {}
        for t in self.traces:
            out.setdefault(t.agent.name, []).append(t)
        return out

    def to_record(self, float_decimals: int | None = RECORD_FLOAT_DECIMALS) -> dict[str, Any]:
        return self._write(type(self).model_dump, float_decimals, self, mode="json")

    def to_json(self, float_decimals: int | None = RECORD_FLOAT_DECIMALS) -> bytes:
        """:meth:`to_record` as JSON bytes, written by the model's own serializer (no dict built)."""
        return self._write(type(self).__pydantic_serializer__.to_json, float_decimals, self)

    def _write(self, dump: Callable[..., Any], float_decimals: int | None, *args: Any, **kw: Any) -> Any:
        """``dump(*args, **options)`` of the record, the nodes' float streams kept to
        ``float_decimals`` digits."""
        # a raw tensor is None on most nodes, which exclude_none drops anyway: the nested exclude
        # (a slower dump) only when some node carries one
        tensors = any(n.routed_experts is not None or n.sampling_mask is not None for t in self.traces for n in t.nodes)
        digits = FLOAT_DECIMALS.set(float_decimals)  # what the nodes' float streams keep (graph.float_decimals)
        try:
            return dump(*args, exclude={"traces": {"__all__": EXCLUDE_FIELDS}} if tensors else None, exclude_none=True,
                        serialize_as_any=True, **kw)  # fmt: skip
        finally:
            FLOAT_DECIMALS.reset(digits)

WireEpisode = Episode[WireTaskData, State, WireAgentConfig]
