"""Context compaction for the in-process chat loop (the ``bash`` harness's ``compaction`` knob).

When a conversation nears the model's context window, the loop asks the model for a hand-off
summary of the work so far and goes on from a fresh conversation: the system messages plus one
user message carrying that summary. The rules follow the original's chat program:

* the threshold is ``summarize_at_tokens``, else the window the provider's ``GET /models`` card
  advertises (vLLM's ``max_model_len`` and its peers) less :data:`RESERVE_TOKENS` (at least half
  the window); with neither, compaction has nothing to go by and stays off;
* it runs after a round of tool calls whose reply, plus the results' estimated tokens, reached the
  threshold; and before going on when a reply was cut by its length at the threshold;
* a request the provider refuses as too long for the context is compacted and sent once more;
  when it still does not fit, the rollout fails (``compaction failed: ...``);
* the summary request offers the tools with ``tool_choice = "none"``; a refused one falls back to
  the last conversation that fitted with room to spare, and an empty or tool-calling reply is
  asked again, :data:`ATTEMPTS` times in all.

Without compaction (off, or no threshold), a refusal for length ends the rollout cleanly with the
conversation so far: a full context is a budget, like ``max_turns``, not a crash.

Every summary request is a model call like any other: on the trace, under the task's hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import PositiveInt

from verifiers.v1.configs import BaseConfig
from verifiers.v1.errors import HarnessError, ProviderError
from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

if TYPE_CHECKING:
    from verifiers.v1.interception import CallContext
    from verifiers.v1.types import Message, Response, Tool

RESERVE_TOKENS = 16_384
"""Room kept below the context window: the threshold is the window less this."""
ATTEMPTS = 3
"""Summary requests before compaction fails."""

SUMMARY_REQUEST = (
    "Stop here and write a hand-off note: the conversation is about to be reset, and another model "
    "will continue this task from your note alone (the files and tool state stay as they are). "
    "Cover what has been done and decided, the constraints and facts that matter, any data or "
    "references still needed, and the next steps. Be brief and structured. Answer in plain text "
    "and do not call any tool."
)
SUMMARY_FRAME = (
    "You are continuing a task that another model began. The tools and files are in the state it "
    "left them. Its hand-off note follows; build on that work instead of repeating it."
)

OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "exceeds the context window",
    "reduce the length of the messages",
    "maximum context length",
    "prompt is too long",
    "request_too_large",
    "request entity too large",
    "exceeds the maximum number of tokens",
    "maximum prompt length is",
)
"""How providers word a request too long for the model's context (OpenAI, vLLM, Anthropic, Google,
xAI, Mistral, Groq, HTTP proxies), lower-cased."""

WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")
"""Where a ``GET /models`` card gives the context window (vLLM, OpenRouter and others)."""


class CompactionConfig(BaseConfig):
    """``[env.<role>.harness.compaction]``; ``compaction = "None"`` turns it off."""

    summarize_at_tokens: PositiveInt | None = None
    """Compact at this many tokens of context; unset: the provider's window less 16,384."""


def is_context_overflow(exc: BaseException) -> bool:
    """Whether a failed call was refused because the request does not fit the context."""
    if not isinstance(exc, ProviderError) or exc.status_code not in (400, 413):
        return False
    code = getattr(exc.__cause__, "code", None)  # the server's error code, when the client kept it
    text = f"{exc} {code or ''}".casefold()
    return any(marker in text for marker in OVERFLOW_MARKERS)


def threshold_for(window: int) -> int:
    return max(window - RESERVE_TOKENS, window // 2)


async def discover_threshold(ctx: CallContext) -> int | None:
    """The threshold from the window the provider advertises for ``ctx``'s model, else None."""
    window = getattr(ctx.client, "context_window", None)
    if window is None:
        return None
    size = await window(ctx.model)
    return threshold_for(size) if size else None


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def compactable(messages: list[Message]) -> bool:
    """Whether there is history beyond the system messages and the task's first user message."""
    first_user = next((i for i, m in enumerate(messages) if _role(m) == "user"), None)
    return any(_role(m) != "system" and i != first_user for i, m in enumerate(messages))


def estimated_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def context_tokens(response: Response) -> int:
    usage = response.usage
    if usage is None:
        return 0
    return usage.prompt_tokens + (usage.cached_input_tokens or 0) + usage.completion_tokens


class Compactor:
    """One rollout's compaction state."""

    def __init__(self, threshold: int | None, messages: list[Message]) -> None:
        self.threshold = threshold
        self.compacted = False
        self.last_good = len(messages)
        """Length of the newest conversation known to fit with the reserve to spare."""

    @property
    def active(self) -> bool:
        return self.threshold is not None

    def reached(self, response: Response, extra_tokens: int = 0) -> bool:
        return self.threshold is not None and context_tokens(response) + extra_tokens >= self.threshold

    def failed(self, why: str) -> HarnessError:
        return HarnessError(f"compaction failed: {why}")

    async def compact(self, ctx: CallContext, messages: list[Message], tools: list[Tool] | None) -> list[Message]:
        """A fresh conversation from the model's hand-off note on ``messages``."""
        from verifiers.v1.interception import model_call

        system = [m if isinstance(m, SystemMessage) else SystemMessage.model_validate(m) for m in messages if _role(m) == "system"]
        base = messages
        for _ in range(ATTEMPTS):
            request = [*base, UserMessage(content=SUMMARY_REQUEST)]
            try:
                response = await model_call(ctx, request, tools, {"tool_choice": "none"} if tools else None)
            except ProviderError as exc:
                if not is_context_overflow(exc):
                    raise
                base = messages[: self.last_good]
                continue
            reply: Any = response.message
            text = (reply.content or "").strip() if isinstance(reply, AssistantMessage) and isinstance(reply.content, str) else ""
            if text and not reply.tool_calls:
                rebuilt: list[Message] = [*system, UserMessage(content=f"{SUMMARY_FRAME}\n\n{text}")]
                self.last_good = len(rebuilt)
                self.compacted = True
                return rebuilt
        raise self.failed(f"no usable hand-off note after {ATTEMPTS} requests")


__all__ = ["CompactionConfig", "Compactor", "compactable", "discover_threshold", "is_context_overflow"]
