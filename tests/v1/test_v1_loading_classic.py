"""``vf.load_environment`` tells a v1 package from a classic one."""

from __future__ import annotations

import pytest

import verifiers as vf
from verifiers.v1.env import Env
from verifiers.v1.envs.best_of_n import BestOfNEnv
from verifiers.v1.envs.single_agent import SingleAgentEnv


def test_a_v1_package_loads_as_a_v1_env_with_its_taskset_knobs() -> None:
    env = vf.load_environment("vf-sums", n=2, word="Hey. ")
    assert isinstance(env, SingleAgentEnv)
    assert env.taskset.config.n == 2
    assert next(iter(env.taskset)).data.prompt.startswith("Hey. ")


def test_env_keys_make_an_env_table() -> None:
    env = vf.load_environment("vf-sums", id="best-of-n", n=3, taskset={"n": 1})
    assert isinstance(env, BestOfNEnv) and env.config.n == 3 and env.taskset.config.n == 1


def test_a_bad_knob_is_one_error() -> None:
    with pytest.raises(ValueError, match="nn"):
        vf.load_environment("vf-sums", nn=2)


def test_a_classic_package_stays_classic() -> None:
    import verifiers.v1  # noqa: F401  (v1 loaded in the same process must not change the classic path)

    env = vf.load_environment("vf-classic-probe")
    assert isinstance(env, vf.Environment) and not isinstance(env, Env)
    assert env.env_id == "vf-classic-probe"


def test_a_module_with_neither_is_still_a_clear_not_found() -> None:
    from verifiers.errors import EnvironmentNotFoundError

    with pytest.raises(EnvironmentNotFoundError, match="load_environment"):
        vf.load_environment("vf-noall")
