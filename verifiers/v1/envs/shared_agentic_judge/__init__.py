"""``shared-agentic-judge``: the judge agent checks the solver's work in the solver's own box
(see ``verifiers.v1.envs.agentic_judge.env``)."""

from verifiers.v1.envs.agentic_judge.env import AgenticJudgeEnvConfig, SharedAgenticJudgeEnv

__all__ = ["AgenticJudgeEnvConfig", "SharedAgenticJudgeEnv"]
