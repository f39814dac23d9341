"""Test helpers: a real loopback OpenAI-compatible server with scripted replies, and a fast one for
benchmarks (``python -m verifiers.testing.fast_server``)."""

from verifiers.testing.scripted import (
    FakeTokenizer,
    Reply,
    ScriptedServer,
    ScriptRequest,
    by_turn,
    disconnect,
    echo,
    error,
    reply,
    to_reply,
    tool_call,
    tool_calls,
)

__all__ = [
    "FakeTokenizer",
    "Reply",
    "ScriptRequest",
    "ScriptedServer",
    "by_turn",
    "disconnect",
    "echo",
    "error",
    "reply",
    "to_reply",
    "tool_call",
    "tool_calls",
]
