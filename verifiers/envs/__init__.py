"""Environments: datasets + interaction protocol + rubric, and the rollout engine."""

from verifiers.envs.env_group import EnvGroup
from verifiers.envs.environment import Environment
from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.envs.singleturn_env import SingleTurnEnv
from verifiers.envs.stateful_tool_env import StatefulToolEnv
from verifiers.envs.tool_env import ToolEnv

__all__ = ["EnvGroup", "Environment", "MultiTurnEnv", "SingleTurnEnv", "StatefulToolEnv", "ToolEnv"]
