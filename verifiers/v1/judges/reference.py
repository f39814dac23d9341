"""``reference``: does the reply match the task's reference answer? 1.0 for the positive label,
0.0 for the negative; an empty reply scores 0 without a call; a reply naming neither label is a
judge error (recorded, never scored)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import model_validator

from verifiers.v1.configs import JudgeConfig
from verifiers.v1.judge import (
    Judge,
    JudgeResponse,
    JudgeView,
    judge_field,
    judge_question,
    judge_response,
    judge_verdict,
)
from verifiers.v1.types import ID

if TYPE_CHECKING:
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import Trace

PROMPT = """You are checking an answer against a known reference.

The task:
<task>
{question}
</task>

The reference answer (when several lines are given, any one of them is acceptable):
<reference>
{answer}
</reference>

The answer to check:
<answer>
{response}
</answer>

Does the answer agree with the reference in substance? Wording, formatting and equivalent forms do not matter. Reply with a single word: {positive} if it agrees, {negative} if it does not."""


class ReferenceJudgeConfig(JudgeConfig):
    id: ID = "reference"
    answer_field: str = "answer"
    """The task field holding the reference (a list: each item an acceptable answer)."""
    question_field: str = ""
    """The task field holding the question; empty: the task's prompt as text."""
    view: JudgeView = "last_reply"
    choices: tuple[str, str] = ("yes", "no")
    """(positive, negative) verdict labels; the prompt asks for exactly these."""

    @model_validator(mode="after")
    def _distinct(self) -> ReferenceJudgeConfig:
        a, b = self.choices
        if not a.strip() or not b.strip() or a.upper() == b.upper():
            raise ValueError(f"choices must be two different non-empty labels, got {self.choices!r}")
        return self


class ReferenceJudge(Judge[float, ReferenceJudgeConfig]):
    prompt = PROMPT

    def parse(self, response: JudgeResponse[float]) -> float:
        positive = self.config.choices[0]
        return float(judge_verdict(response.text, self.config.choices) == positive)

    async def score(self, task: TaskData, trace: Trace) -> float:
        answer = judge_field(task, self.config.answer_field, "answer_field: the reference answer")
        reply = judge_response(trace, self.config.view)
        if not reply.strip():
            return 0.0  # nothing to grade
        positive, negative = self.config.choices
        result = await self.evaluate(
            trace=trace, question=judge_question(task, self.config.question_field), answer=answer,
            response=reply, positive=positive, negative=negative,
        )  # fmt: skip
        return float(result.parsed)  # type: ignore[arg-type]


__all__ = ["ReferenceJudge", "ReferenceJudgeConfig"]
