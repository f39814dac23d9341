"""Token-exact multi-turn prompts: the next turn's prompt tokens extend the previous turn's.

A trainer learns from one sequence per conversation only when each turn's prompt ids start with
the previous turn's prompt + completion ids. A chat template that rewrites history (one that drops
past ``<think>`` blocks, say) or a completion whose text tokenises back differently breaks that:
the trace then starts a new path at that turn and the sample is split there
(``Trace.commit_turn``, counted as ``split`` under ``trace.info["token_prefix"]``).

When the model server is vLLM and the call asks for token ids (``return_token_ids``, as training
does), :func:`extended_prompt_ids` avoids the split: it asks the server's ``/tokenize`` what the
template renders for the whole conversation, and when that does not extend the previous tokens it
builds the prompt that does — the previous turn's ids exactly, the template's end-of-turn glue
the completion did not already end with, then the new messages' tokens as the template renders
them after a neutral two-message anchor — and the call sends it as
``kv_transfer_params.prompt_token_ids``, which vLLM's chat completions feed straight to the
engine (no re-rendering; tool and reasoning parsing still run on the reply). A server that does
not honour the ids (the reply's ``prompt_token_ids`` differ) or has no ``/tokenize`` is remembered
per client and never asked again; its turns split instead, never silently misalign. A call whose
messages change an earlier message of the conversation is not extended either (the environment
rewrote history on purpose): it splits.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verifiers.v1 import graph
from verifiers.v1.trace import TOKEN_PREFIX_KEY
from verifiers.v1.types import AssistantMessage, Message, UserMessage, messages_to_openai

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

logger = logging.getLogger(__name__)

TEMPLATE_KEYS = ("chat_template", "chat_template_kwargs", "add_special_tokens")
"""Sampling keys that change how the server renders a conversation (sent to ``/tokenize`` too)."""

_ANCHOR: list[Message] = [UserMessage(content="x"), AssistantMessage(content="y")]
_MAX_ANCHORS = 64


@dataclass
class _Server:
    """What one client's server showed: whether it honours forwarded ids, and the anchor renders
    per template setting (the tokens of the anchor conversation, and its end-of-turn glue)."""

    supported: bool = True
    anchors: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)


_SERVERS: weakref.WeakKeyDictionary[Any, _Server] = weakref.WeakKeyDictionary()


def _server(client: Any) -> _Server | None:
    try:
        state = _SERVERS.get(client)
        if state is None:
            state = _SERVERS[client] = _Server()
        return state
    except TypeError:  # not weak-referenceable: never extended
        return None


def wants_tokens(args: Mapping[str, Any]) -> bool:
    """Whether a call's sampling args ask the server for token ids (vLLM's ``return_token_ids``)."""
    extra = args.get("extra_body")
    return bool(args.get("return_token_ids") or (isinstance(extra, Mapping) and extra.get("return_token_ids")))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a.__dict__ == b.__dict__


def continued_path(trace: Trace, messages: Sequence[Message]) -> list[int] | None:
    """The node ids of the trace's last model call's path when ``messages`` continue it exactly
    (that path's messages, then at least one new one), else None."""
    # the last call that committed a reply (a failed call is on the record with no node)
    last = next((c.node for c in reversed(trace.calls) if c.node is not None), None)
    if last is None:
        return None
    ids = graph.path_to(trace.nodes, last)
    if len(messages) <= len(ids):
        return None
    for node_id, message in zip(ids, messages, strict=False):
        if not _same(trace.nodes[node_id].message, message):
            return None
    return ids


def glue(previous: Sequence[int], close: Sequence[int], *, stopped: bool) -> list[int]:
    """The template's end-of-turn tokens ``close`` less what the completion already ended with
    (only a reply that stopped on a stop token can have ended with part of it)."""
    if stopped:
        for j in range(min(len(close), len(previous)), 0, -1):
            if list(previous[-j:]) == list(close[:j]):
                return list(close[j:])
    return list(close)


class Renderer:
    """The server's own chat template, through vLLM's ``/tokenize`` (the ids it would prompt with)."""

    def __init__(self, client: Any, model: str, tools: list[dict[str, Any]] | None, args: Mapping[str, Any]) -> None:
        self.client = client
        self.model = model
        self.tools = tools
        self.template = {k: args[k] for k in TEMPLATE_KEYS if args.get(k) is not None}
        self.template.setdefault("add_special_tokens", False)  # what chat completions default to

    @property
    def key(self) -> str:
        import json

        return json.dumps([self.tools, self.template], sort_keys=True, default=str)

    async def __call__(self, messages: Sequence[Message], *, add_generation_prompt: bool = True,
                       continue_final_message: bool = False) -> list[int] | None:
        """The rendered ids, or None when the server would not say (``_Server.supported`` is
        cleared when it has no ``/tokenize``)."""
        base = str(getattr(self.client, "base_url", "") or "").rstrip("/")
        http = getattr(self.client, "http", None)
        if not base.endswith("/v1") or http is None:
            return None
        body: dict[str, Any] = {
            "model": self.model, "messages": messages_to_openai(list(messages)),
            "add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message,
            **self.template,
        }  # fmt: skip
        if self.tools:
            body["tools"] = self.tools
        try:
            resp = await http.post(base[: -len("/v1")] + "/tokenize", json=body)
        except Exception as exc:  # an optimisation: a failed render means no extension, never a failed call
            logger.debug("tokenize failed: %r", exc)
            return None
        if resp.status_code in (404, 405):
            state = _server(self.client)
            if state is not None:
                state.supported = False
            return None
        if resp.status_code != 200:
            return None
        try:
            tokens = resp.json().get("tokens")
        except Exception:
            return None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            return None
        return tokens

    async def anchor(self, state: _Server) -> tuple[list[int], list[int]] | None:
        """The anchor conversation's ids and its end-of-turn glue (once per template setting)."""
        key = self.key
        if key in state.anchors:
            return state.anchors[key]
        closed = await self(_ANCHOR, add_generation_prompt=False)
        opened = await self(_ANCHOR, add_generation_prompt=False, continue_final_message=True)
        if closed is None or opened is None or closed[: len(opened)] != opened:
            return None
        if len(state.anchors) >= _MAX_ANCHORS:  # tools and templates come from programs: bounded
            state.anchors.clear()
        state.anchors[key] = (closed, closed[len(opened) :])
        return state.anchors[key]


async def extended_prompt_ids(client: Any, model: str, trace: Trace, messages: Sequence[Message],
                              tools: list[dict[str, Any]] | None, args: Mapping[str, Any]) -> list[int] | None:
    """The prompt ids that make this call's prompt extend the tokens of the conversation it
    continues, when the template's own render would not; None: send the messages as they are
    (no token ids asked for, a first turn, an exact render, a rewritten earlier message, or a
    server that cannot take forwarded ids)."""
    if not wants_tokens(args):
        return None
    state = _server(client)
    if state is None or not state.supported:
        return None
    path = continued_path(trace, messages)
    if path is None:
        return None
    last = trace.nodes[path[-1]]
    if not last.sampled or not any(last.mask):
        return None  # the reply carries no token data: nothing to extend
    previous = [t for i in path for t in trace.nodes[i].token_ids]
    render = Renderer(client, model, tools, args)
    full = await render(messages)
    if full is None or full[: len(previous)] == previous:
        return None  # the template already extends the tokens (or the server cannot say)
    anchor = await render.anchor(state)
    if anchor is None:
        return None
    closed, close = anchor
    new = list(messages[len(path) :])
    tail = await render([*_ANCHOR, *new])
    if tail is None or tail[: len(closed)] != closed:
        return None
    # the finish of the call that made the path's last reply (a later failed call has none)
    made = next((c for c in reversed(trace.calls) if c.node == path[-1]), None)
    stopped = made is not None and made.finish_reason in ("stop", "tool_calls")
    return previous + glue(previous, close, stopped=stopped) + tail[len(closed) :]


def with_prompt_ids(args: Mapping[str, Any], ids: list[int]) -> dict[str, Any]:
    """``args`` that send ``ids`` as the prompt (vLLM: ``kv_transfer_params.prompt_token_ids``)."""
    forwarded = dict(args.get("kv_transfer_params") or {})
    forwarded["prompt_token_ids"] = ids
    return {**args, "kv_transfer_params": forwarded}


def check_honoured(client: Any, trace: Trace, sent: list[int], prompt_ids: Sequence[int] | None) -> None:
    """After a call sent with forwarded ids: count it ``extended`` when the server prompted with
    exactly them; otherwise the server ignored them (remembered: this client is not asked again),
    and ``commit_turn`` splits the sample at this turn."""
    if prompt_ids is not None and list(prompt_ids) == sent:
        trace.count_prefix("extended")
        return
    state = _server(client)
    if state is not None:
        state.supported = False
    logger.warning("the model server ignored the forwarded prompt token ids (kv_transfer_params.prompt_token_ids); "
                   "turns whose template rewrites history split their samples instead")


__all__ = ["TOKEN_PREFIX_KEY", "check_honoured", "extended_prompt_ids", "wants_tokens", "with_prompt_ids"]

