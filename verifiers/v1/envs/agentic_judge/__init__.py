"""``agentic-judge``: the judge agent checks the solver's work in a fresh box holding only the
task's declared artifacts (see ``env.py`` for the protocol)."""

from verifiers.v1.envs.agentic_judge.env import (
    AgenticJudgeEnvConfig,
    Criterion,
    IsolatedAgenticJudgeEnv,
    JudgeTaskConfig,
    ScoreConfig,
    TextFile,
)

__all__ = ["AgenticJudgeEnvConfig", "Criterion", "IsolatedAgenticJudgeEnv", "JudgeTaskConfig", "ScoreConfig", "TextFile"]
