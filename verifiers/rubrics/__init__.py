"""Rubrics: weighted reward functions that score rollouts (and whole groups of rollouts)."""

from verifiers.rubrics.judge_rubric import JudgeRubric
from verifiers.rubrics.math_rubric import MathRubric
from verifiers.rubrics.rubric import RolloutScore, RolloutScores, Rubric
from verifiers.rubrics.rubric_group import RubricGroup

__all__ = ["JudgeRubric", "MathRubric", "RolloutScore", "RolloutScores", "Rubric", "RubricGroup"]
