"""Configs as a trace records them (``verifiers.v1.configs.WireAgentConfig``), read without
resolving any plugin; not part of defining a taskset, so defined on first use."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WireAgentConfig(BaseModel):
    """An agent's config as a trace records it, read without resolving any plugin: the agent
    that produced the trace (harness, runtime, model, limits). Unknown keys are kept. The full
    ``AgentConfig`` (a role of an env) comes with the env layer and dumps to this shape."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # a trace's: built on first use

    harness: dict[str, Any] | None = None
    runtime: dict[str, Any] = Field(default_factory=lambda: {"type": "subprocess"})
    """The embedded default is the local subprocess runtime (0.4.0's is a hosted sandbox)."""
    model: str | None = None
    client: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    timeout: dict[str, Any] = Field(default_factory=dict)
    retries: dict[str, Any] = Field(default_factory=dict)
    network_notice: bool = True
