"""``JudgeRubric``: reward functions that ask a judge model about the answer."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verifiers.errors import JudgeError
from verifiers.parsers.parser import Parser, message_text
from verifiers.rubrics.rubric import Rubric

__all__ = ["DEFAULT_JUDGE_PROMPT", "JudgeRubric"]

DEFAULT_JUDGE_PROMPT = """Given a ground truth answer and a response, determine if the response is correct.

Question:
```
{question}
```

Ground truth answer:
```
{answer}
```

Response:
```
{response}
```

Respond either "yes" or "no" only."""


class JudgeRubric(Rubric):
    """A rubric whose reward functions can call ``judge(prompt, completion, answer, state)``.

    ``judge_client`` is an ``openai.AsyncOpenAI`` / ``OpenAI`` (called as
    ``judge_client.chat.completions.create(...)``, the way environments use it) or one of our
    ``ModelClient`` objects; by default an ``openai.AsyncOpenAI()`` is created on first use.
    ``judge_prompt`` is formatted with ``question``, ``answer`` and ``response`` (the parsed answer).
    Judge replies are cached in ``state["judge_response"]`` keyed by the formatted prompt, so several
    reward functions asking the same question pay for one call. A failing judge call raises
    :class:`~verifiers.errors.JudgeError`, which the rollout records with source ``"judge"``.
    """

    def __init__(
        self,
        parser: Parser | None = None,
        judge_client: Any = None,
        judge_model: str = "gpt-4.1-nano",
        judge_sampling_args: Mapping[str, Any] | None = None,
        judge_prompt: str = DEFAULT_JUDGE_PROMPT,
        funcs: Sequence[Callable[..., Any]] | None = None,
        weights: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(funcs=funcs, weights=weights, parser=parser, **kwargs)
        self.judge_client = judge_client
        self.judge_model = judge_model
        self.judge_sampling_args = dict(judge_sampling_args or {})
        self.judge_prompt = judge_prompt
        self.add_class_object("judge", self.judge)
        self.add_class_object("judge_client", judge_client)
        self.add_class_object("judge_model", judge_model)
        self.add_class_object("judge_prompt", judge_prompt)

    def _client(self) -> Any:
        if self.judge_client is None:
            from openai import AsyncOpenAI

            self.judge_client = AsyncOpenAI()
            self.class_objects["judge_client"] = self.judge_client
        return self.judge_client

    @staticmethod
    def _question(prompt: Any) -> str:
        if isinstance(prompt, str):
            return prompt
        for msg in reversed(prompt or []):
            if isinstance(msg, Mapping) and msg.get("role") == "user":
                return message_text(msg.get("content"))
        return ""

    async def _ask(self, text: str) -> str:
        client = self._client()
        messages = [{"role": "user", "content": text}]
        chat = getattr(client, "chat", None)
        completions = getattr(chat, "completions", None)
        if completions is not None and hasattr(completions, "create"):
            create = completions.create
            if inspect.iscoroutinefunction(create):
                resp = await create(model=self.judge_model, messages=messages, **self.judge_sampling_args)
            else:  # a sync openai.OpenAI client: keep the event loop free while it blocks
                resp = await asyncio.to_thread(
                    functools.partial(create, model=self.judge_model, messages=messages, **self.judge_sampling_args)
                )
                if inspect.isawaitable(resp):
                    resp = await resp
            content = resp.choices[0].message.content
        elif callable(chat):  # our ModelClient
            resp = await chat(model=self.judge_model, messages=messages, sampling_args=self.judge_sampling_args)
            content = resp.message.get("content")
        else:
            raise TypeError(f"unsupported judge client {type(client).__name__}")
        return content or ""

    async def judge(self, prompt: Any, completion: Any, answer: Any, state: dict[str, Any] | None = None, **kwargs: Any) -> str:
        """The judge model's reply about ``completion`` (cached per formatted prompt in ``state``)."""
        response = self.parser.parse_answer(completion)
        text = self.judge_prompt.format(question=self._question(prompt), answer=answer, response=response)
        cache = None
        if state is not None:
            cache = state.get("judge_response")
            if not isinstance(cache, dict):
                cache = {}
                state["judge_response"] = cache
            if text in cache:
                return cache[text]
        try:
            reply = await self._ask(text)
        except Exception as exc:
            raise JudgeError(f"judge call failed: {type(exc).__name__}: {exc}", exc) from exc
        if cache is not None:
            cache[text] = reply
        return reply
