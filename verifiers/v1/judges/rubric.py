"""``rubric``: grade the rollout on weighted criteria read from a TOML or JSON file.

Each criterion has ordered choices, worst first (default ``no``, ``yes``); a verdict scores its
rank spread evenly over [0, 1]. The reward is the weighted mean; each criterion is also a metric
``<judge>/<criterion>``. The judge must answer every criterion of its batch exactly once with one
of its choices: anything else is a judge error (recorded), never a partial score.
"""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter, field_validator

from verifiers.v1.configs import JudgeConfig
from verifiers.v1.judge import (
    Judge,
    JudgeVerdictError,
    JudgeView,
    first_json_object,
    judge_field,
    judge_question,
    judge_response,
)
from verifiers.v1.types import ID

if TYPE_CHECKING:
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import Trace

Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]

PROMPT = """You are grading a response against a list of criteria.

The task:
<task>
{question}
</task>
{reference}
The response:
<response>
{response}
</response>

The criteria (each lists its allowed answers in parentheses, worst first):
{criteria}

Judge every criterion on its own, from evidence in the response."""

JSON_REPLY = """

Reply with one JSON object and nothing else:
{"verdicts": [{"name": "<criterion name>", "reason": "<one sentence of evidence>", "verdict": "<one allowed answer>"}]}
Give exactly one entry per criterion, under the criterion's exact name, writing the reason before choosing the verdict."""


class Criterion(BaseModel):
    name: str = Field(min_length=1)
    text: str
    weight: Weight = 1.0
    choices: list[str] = Field(default_factory=lambda: ["no", "yes"], min_length=2)
    """Allowed answers, worst first: the first scores 0, the last 1, the rest evenly between."""

    @field_validator("choices")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"choices repeat an answer: {value}")
        return value

    def score(self, verdict: str) -> float:
        return self.choices.index(verdict) / (len(self.choices) - 1)

    def line(self) -> str:
        return f"- {self.name}: {self.text} ({', '.join(self.choices)})"


_CRITERIA = TypeAdapter(list[Criterion])


def load_criteria(path: Path, weights: dict[str, float] | None = None) -> list[Criterion]:
    """The criteria of a rubric file (``criteria = [...]`` in TOML, or a JSON list or object with
    ``criteria``), with ``weights`` overriding by name."""
    text = Path(path).read_text(encoding="utf-8")
    data: Any = tomllib.loads(text) if Path(path).suffix.lower() == ".toml" else json.loads(text)
    items = data.get("criteria", []) if isinstance(data, dict) else data
    criteria = _CRITERIA.validate_python(items)
    if not criteria:
        raise ValueError(f"rubric {path} has no criteria")
    names = [c.name for c in criteria]
    if len(set(names)) != len(names):
        raise ValueError(f"rubric {path} names a criterion twice")
    overrides = weights or {}
    if unknown := sorted(set(overrides) - set(names)):
        raise ValueError(f"weights name no criterion of {path}: {unknown}")
    criteria = [c.model_copy(update={"weight": overrides.get(c.name, c.weight)}) for c in criteria]
    if sum(c.weight for c in criteria) <= 0:
        raise ValueError(f"rubric {path}: every criterion weighs 0")
    return criteria


class CriterionVerdict(BaseModel):
    name: str
    reason: str
    verdict: str


class RubricVerdicts(BaseModel):
    verdicts: list[CriterionVerdict]


def score_verdicts(verdicts: list[CriterionVerdict], criteria: list[Criterion], what: str = "the criteria") -> dict[str, float]:
    """Each criterion's score from a complete verdict set (one per criterion, an allowed answer)."""
    wanted = {c.name: c for c in criteria}
    given: dict[str, str] = {}
    for v in verdicts:
        if v.name in given:
            raise JudgeVerdictError(f"the judge answered {v.name!r} twice")
        given[v.name] = v.verdict
    if set(given) != set(wanted):
        raise JudgeVerdictError(f"the judge answered {sorted(given)}, not {what} {sorted(wanted)}")
    out = {}
    for name, verdict in given.items():
        if verdict not in wanted[name].choices:
            raise JudgeVerdictError(f"the judge answered {verdict!r} for {name!r}, not one of {wanted[name].choices}")
        out[name] = wanted[name].score(verdict)
    return out


def weighted(scores: dict[str, float], criteria: list[Criterion]) -> float:
    total = sum(c.weight for c in criteria)
    return sum(c.weight * scores[c.name] for c in criteria) / total


class RubricJudgeConfig(JudgeConfig):
    id: ID = "rubric"
    path: Path
    """The rubric: a ``.toml`` or ``.json`` file with a ``criteria`` list."""
    weights: dict[str, Weight] = Field(default_factory=dict)
    question_field: str = ""
    answer_field: str = ""
    """A task field holding a reference solution to show the judge (empty: none)."""
    view: JudgeView = "full_trace"
    max_criteria: int | None = Field(None, ge=1)
    """Criteria per call (None: all in one); batches are graded concurrently."""
    structured_output: bool = False
    """Ask for the verdicts with ``response_format`` (JSON schema) instead of as plain text."""


class RubricJudge(Judge[RubricVerdicts, RubricJudgeConfig]):
    prompt = PROMPT
    schema = RubricVerdicts

    @cached_property
    def criteria(self) -> list[Criterion]:
        return load_criteria(self.config.path, self.config.weights)

    def _reference(self, task: TaskData) -> str:
        if not self.config.answer_field:
            return ""
        answer = judge_field(task, self.config.answer_field, "answer_field: the reference solution")
        fence = "`" * (max((len(m) for m in re.findall(r"`+", answer)), default=2) + 1)  # longer than any run inside
        return f"\nA reference solution, for comparison:\n{fence}\n{answer}\n{fence}\n"

    async def grade_batch(self, task: TaskData, trace: Trace, batch: list[Criterion]) -> dict[str, float]:
        fields = {
            "question": judge_question(task, self.config.question_field),
            "reference": self._reference(task),
            "response": judge_response(trace, self.config.view),
            "criteria": "\n".join(c.line() for c in batch),
        }
        if self.config.structured_output:
            result = await self.evaluate(trace=trace, **fields)
            verdicts = result.parsed.verdicts  # type: ignore[union-attr]
        else:
            result = await self.complete(str(self.build_messages(**fields)) + JSON_REPLY, trace=trace)
            found = first_json_object(result.text, "verdicts")
            if found is None:
                raise JudgeVerdictError(f"the judge's reply has no verdicts object: {result.text[:300]!r}")
            try:
                verdicts = RubricVerdicts.model_validate(found).verdicts
            except ValueError as exc:
                raise JudgeVerdictError(f"the judge's verdicts are malformed: {exc}") from exc
        return score_verdicts(verdicts, batch, "the batch's criteria")

    async def score(self, task: TaskData, trace: Trace) -> float:
        criteria = self.criteria
        k = self.config.max_criteria or len(criteria)
        batches = [criteria[i : i + k] for i in range(0, len(criteria), k)]
        calls = [asyncio.ensure_future(self.grade_batch(task, trace, b)) for b in batches]
        try:
            results = await asyncio.gather(*calls)
        except BaseException:
            for c in calls:  # one failed batch fails the verdict: stop paying for the others
                c.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            raise
        scores = {name: s for r in results for name, s in r.items()}
        for c in criteria:
            trace.record_metric(f"{self.reward_name}/{c.name}", scores[c.name])
        return weighted(scores, criteria)


__all__ = ["Criterion", "CriterionVerdict", "RubricJudge", "RubricJudgeConfig", "RubricVerdicts", "load_criteria", "score_verdicts"]
