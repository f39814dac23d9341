"""``decision``: a graded decision model behind an evaluations endpoint (the original's wire:
``POST {model, state, questions: {grade: {type: "score", instructions, criteria}}}``, answered
``{answers: {grade: {score}}}``, optionally wrapped in ``result``).

The endpoint is ``base_url`` (the full URL requests are posted to), else ``<the run's model
server>/evaluations``; the model is ``model``, else the run's. The level index the model returns
is normalised to [0, 1] (two levels: the probability of the better one)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import TYPE_CHECKING, Any

from pydantic import Field

from verifiers.v1.configs import JudgeConfig
from verifiers.v1.judge import (
    Judge,
    JudgeError,
    JudgeResponse,
    JudgeVerdictError,
    JudgeView,
    judge_field,
    judge_question,
    judge_response,
)
from verifiers.v1.types import ID, Usage

if TYPE_CHECKING:
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import Trace

INSTRUCTIONS = (
    "Decide how well the response accomplishes the task in the question. When a reference answer is "
    "given, a response equivalent to it is fully correct."
)


class DecisionJudgeConfig(JudgeConfig):
    id: ID = "decision"
    levels: list[str] = Field(default_factory=lambda: ["Incorrect", "Correct"], min_length=2, max_length=10)
    """Grades, worst first."""
    question_field: str = ""
    answer_field: str = ""
    view: JudgeView = "last_reply"


class DecisionJudge(Judge[float, DecisionJudgeConfig]):
    prompt = INSTRUCTIONS

    async def evaluate(self, *, trace: Trace | None = None, **fields: Any) -> JudgeResponse[float]:
        client, model, owned = self._endpoint()
        request = {
            "model": model,
            "state": fields,
            "questions": {"grade": {"type": "score", "instructions": self.build_messages(**fields), "criteria": self.config.levels}},
        }
        path = "" if owned else "/evaluations"
        response: JudgeResponse[float] | None = None
        try:
            try:
                async with asyncio.timeout(self.config.timeout):
                    raw = await client.request_json(path, request)
            except TimeoutError:
                raise JudgeError(f"judge {self.reward_name!r} did not answer within {self.config.timeout:g} s") from None
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                raise JudgeError(f"judge {self.reward_name!r}: the call failed: {type(exc).__name__}: {exc}") from exc
            response = JudgeResponse[float](text=json.dumps(raw)[:100_000])
            result = raw.get("result", raw) if isinstance(raw, dict) else None
            try:
                usage = result.get("usage") or {}  # type: ignore[union-attr]
                if usage:
                    response.usage = Usage(
                        prompt_tokens=int(usage.get("inputTokens", usage.get("input_tokens", 0)) or 0),
                        completion_tokens=int(usage.get("outputTokens", usage.get("output_tokens", 0)) or 0),
                        cost=usage.get("cost"),
                    )
                score = result["answers"]["grade"]["score"]  # type: ignore[index]
                if isinstance(score, bool) or not isinstance(score, int | float):
                    raise TypeError(f"a {type(score).__name__}, not a number")  # true or "1" is no grade
                value = float(score) / (len(self.config.levels) - 1)
            except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
                raise JudgeVerdictError(f"judge {self.reward_name!r} answered no grade score: {response.text[:300]!r}") from exc
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise JudgeVerdictError(f"judge {self.reward_name!r} graded {value!r}, outside [0, 1]")
            response.parsed = value
            return response
        finally:
            if owned:
                await client.aclose()
            if trace is not None and response is not None:
                trace.record_judge_call(name=self.reward_name, request=request, response=response)

    async def score(self, task: TaskData, trace: Trace) -> float:
        reply = judge_response(trace, self.config.view)
        if not reply.strip():
            return 0.0
        fields = {"question": judge_question(task, self.config.question_field), "response": reply}
        if self.config.answer_field:
            fields["answer"] = judge_field(task, self.config.answer_field, "answer_field: the reference answer")
        result = await self.evaluate(trace=trace, **fields)
        return float(result.parsed)  # type: ignore[arg-type]


__all__ = ["DecisionJudge", "DecisionJudgeConfig"]
