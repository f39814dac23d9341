"""The message graph of a trace: every distinct message once, linked to its predecessor.

A conversation is a root-to-leaf path; a rewritten history (compaction, a sub-agent) starts
another path, so branches fall out of walking the leaves. Each node holds the tokens it *adds*
to its path's token sequence, so a branch's training sample is the concatenation of its nodes'
``token_ids`` / ``mask`` / ``logprobs``.

Raw tensors (MoE routing, sampling masks) are kept in their wire form, a ``{"__nd__": True,
dtype, shape, data}`` dict, so reading a trace never needs numpy; :func:`decode_ndarray` turns
one into an array when a trainer wants it.
"""

from __future__ import annotations

import contextlib
import operator
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from verifiers.v1.types import Message, Tool

_EDGE_TYPE = r"^[A-Za-z][A-Za-z0-9._:-]{0,127}$"
RECORD_FLOAT_DECIMALS = 4
"""Digits kept for per-token float streams in JSON records (the msgpack wire keeps all)."""
FLOAT_DECIMALS: ContextVar[int | None] = ContextVar("float_decimals", default=RECORD_FLOAT_DECIMALS)
"""The digits a JSON dump of nodes keeps (None: all): set around one dump by ``to_record`` /
``to_json(float_decimals=...)`` (:func:`float_decimals`) and reset right after it."""


@contextlib.contextmanager
def float_decimals(decimals: int | None) -> Iterator[None]:
    """JSON dumps inside keep ``decimals`` digits of the per-token float streams (None: all)."""
    token = FLOAT_DECIMALS.set(decimals)
    try:
        yield
    finally:
        FLOAT_DECIMALS.reset(token)


class ParentLink(BaseModel):
    """A typed causal link from another node (``subagent_return`` ...): not ancestry, no tokens."""

    model_config = ConfigDict(extra="forbid", strict=True)

    node: int = Field(ge=0)
    type: str = Field(pattern=_EDGE_TYPE)


ACP_SEMANTIC_EDGES_METADATA_KEY = "ai.prime.acp/semantic-edges-v1"
"""Where an ACP harness publishes its semantic edges in its metadata."""
_REQUEST_ID = r"^[A-Za-z0-9._:-]{1,128}$"


class SemanticEdge(BaseModel):
    """A harness-declared link between two model requests, by their wire request ids."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source_request_id: str = Field(pattern=_REQUEST_ID)
    target_request_id: str = Field(pattern=_REQUEST_ID)
    type: str = Field(pattern=_EDGE_TYPE)

    @model_validator(mode="after")
    def _not_a_loop(self) -> SemanticEdge:
        if self.source_request_id == self.target_request_id:
            raise ValueError("semantic edge cannot link a request to itself")
        return self


class SemanticEdgeSet(BaseModel):
    """Typed edges between requests (they may form loops; unknown types are kept)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    edges: list[SemanticEdge]

    @model_validator(mode="after")
    def _unique(self) -> SemanticEdgeSet:
        seen: set[tuple[str, str, str]] = set()
        for e in self.edges:
            key = (e.source_request_id, e.target_request_id, e.type)
            if key in seen:
                raise ValueError(f"duplicate semantic edge: {key!r}")
            seen.add(key)
        return self


class MessageNode(BaseModel):
    parent: int | None = None
    tools: list[Tool] = Field(default_factory=list, exclude_if=operator.not_)  # a builtin: no Python frame per node
    """The tools rendered into the prompt; on root nodes only."""
    semantic_parents: list[ParentLink] = Field(default_factory=list)
    message: Message
    sampled: bool = False
    """True when a model call produced this message (False for prompt-supplied ones)."""
    timestamp: float = Field(default_factory=time.time)
    token_ids: list[int] = Field(default_factory=list)
    renderer_token_ids: list[int] | None = Field(default=None, exclude=True)
    """The renderer's own tokens while a live rollout extends this node (None: same as ``token_ids``)."""
    mask: list[bool] = Field(default_factory=list)
    """Per token: True for the model-sampled ones (trained), False for scaffold and input."""
    is_content: list[bool] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    """One per sampled (True) entry of ``mask``."""
    advantages: list[float] | None = None
    reference_logprobs: list[float] | None = None
    trainer_logprobs: list[float] | None = None
    entropies: list[float] | None = None
    loss_weights: dict[str, list[float]] | None = None
    routed_experts: dict[str, Any] | None = None
    sampling_mask: dict[str, Any] | None = None

    @property
    def logical_ids(self) -> list[int]:
        return self.token_ids if self.renderer_token_ids is None else self.renderer_token_ids

    # json-unless-none: the optional lists are mostly None, and a None needs no call into Python;
    # the digits come from FLOAT_DECIMALS, not the serializer's info (building that object for each
    # node cost more than the rest of the node's serialization), and an empty list returns at once
    @field_serializer("logprobs", "advantages", "reference_logprobs", "trainer_logprobs", "entropies", when_used="json-unless-none")
    def _round(self, values: list[float] | None) -> list[float] | None:
        if not values:
            return values
        decimals = FLOAT_DECIMALS.get()
        return values if decimals is None else [round(v, decimals) for v in values]


def encode_ndarray(array: Any) -> dict[str, Any]:
    """A numpy array in the wire form (raw bytes, msgpack ``bin``)."""
    import numpy as np

    array = np.ascontiguousarray(array)
    return {"__nd__": True, "dtype": str(array.dtype), "shape": list(array.shape), "data": array.tobytes()}


def decode_ndarray(value: dict[str, Any]) -> Any:
    import numpy as np

    return np.frombuffer(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])


def leaves(nodes: list[MessageNode]) -> list[int]:
    """Nodes no node points to as its parent: the last node of each branch."""
    parents = {n.parent for n in nodes if n.parent is not None}
    return [i for i in range(len(nodes)) if i not in parents]


def path_to(nodes: list[MessageNode], node: int) -> list[int]:
    """Root-to-``node`` node ids."""
    out: list[int] = []
    current: int | None = node
    seen = 0
    while current is not None:
        out.append(current)
        current = nodes[current].parent
        seen += 1
        if seen > len(nodes):
            raise ValueError("the message graph has a cycle")
    out.reverse()
    return out
