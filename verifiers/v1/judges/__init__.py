"""The built-in judges, by id: ``reference`` (the reply against a reference answer), ``rubric``
(weighted criteria) and ``decision`` (a graded decision model behind an evaluations endpoint)."""

from verifiers.v1.judges.decision import DecisionJudge, DecisionJudgeConfig
from verifiers.v1.judges.reference import ReferenceJudge, ReferenceJudgeConfig
from verifiers.v1.judges.rubric import (
    Criterion,
    CriterionVerdict,
    RubricJudge,
    RubricJudgeConfig,
    RubricVerdicts,
)

__all__ = [
    "Criterion",
    "CriterionVerdict",
    "DecisionJudge",
    "DecisionJudgeConfig",
    "ReferenceJudge",
    "ReferenceJudgeConfig",
    "RubricJudge",
    "RubricJudgeConfig",
    "RubricVerdicts",
]
