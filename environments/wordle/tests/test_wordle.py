"""wordle: feedback rules, rewards, and full games against scripted players."""

from __future__ import annotations

import re

import pytest
import wordle
from openai import AsyncOpenAI

import verifiers as vf
from verifiers.testing import ScriptedServer

_FEEDBACK = re.compile(r"^([a-z]{5}) -> ([GYX](?: [GYX]){4})", re.MULTILINE)


def solver(request) -> str:
    """A good player: guess the first hidden-word candidate consistent with all feedback so far."""
    history = []
    for m in request.messages:
        if m.get("role") == "user":
            for guess, fb in _FEEDBACK.findall(m.get("content") or ""):
                history.append((guess, fb.replace(" ", "")))
    candidates = [w for w in wordle.secret_words() if wordle.consistent(w, history)]
    return f"Thinking about the feedback.\n<guess>{candidates[0]}</guess>"


def test_feedback_follows_the_official_rules() -> None:
    assert wordle.score_guess("crane", "crane") == "GGGGG"
    assert wordle.score_guess("speed", "abide") == "XXYXY"
    assert wordle.score_guess("eerie", "theme") == "YXXXG"
    assert wordle.score_guess("lolly", "hello") == "XYGGX"
    assert wordle.consistent("cargo", [("crane", "GYYXX")])
    assert not wordle.consistent("crane", [("crane", "GYYXX")])


def test_word_lists_load_offline() -> None:
    secrets, allowed = wordle.secret_words(), wordle.allowed_guesses()
    assert len(secrets) > 1000 and len(allowed) > 5000
    assert set(secrets) <= allowed
    assert all(len(w) == 5 and w.isalpha() and w.islower() for w in secrets)


def test_rewards_from_state_and_bad_input() -> None:
    fast = {"solved": True, "attempts": 1, "guesses": [("crane", "GGGGG")]}
    slow = {"solved": True, "attempts": 6, "guesses": [("crane", "XXXXX"), ("crane", "XXXXX")]}
    assert wordle.solved_reward(fast) == 1.0 and wordle.speed_reward(fast) == 1.0
    assert wordle.speed_reward(slow) < 0.2
    assert wordle.feedback_use_reward(slow) == 0.0  # repeating a ruled-out word ignores the feedback
    for junk in ({}, {"solved": None, "guesses": None}, {"attempts": 0}):
        assert wordle.solved_reward(junk) == 0.0
        assert wordle.speed_reward(junk) == 0.0
        assert wordle.feedback_use_reward(junk) == 0.0
    assert wordle.extract_guess("<guess> CRANE </guess>") == "crane"
    assert wordle.extract_guess(None) is None


@pytest.fixture(scope="module")
def env() -> vf.Environment:
    return wordle.load_environment(num_train_examples=10, num_eval_examples=6)


def test_splits_are_disjoint(env: vf.Environment) -> None:
    assert isinstance(env, vf.Environment)
    train, evaluation = env.get_dataset(), env.get_eval_dataset()
    assert not set(train["answer"]) & set(evaluation["answer"])
    assert len(evaluation) == 6


def test_a_consistent_solver_wins_every_game(env: vf.Environment) -> None:
    with ScriptedServer(solver) as server:
        out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=6)
    for o in out["outputs"]:
        assert o["metrics"]["solved_reward"] == 1.0, o["completion"]
        assert o["metrics"]["feedback_use_reward"] == 1.0
        assert o["reward"] >= 1.2
        assert o["metrics"]["num_guesses"] <= 6


def test_junk_players_score_zero_and_games_end(env: vf.Environment) -> None:
    for script in ("I have no idea.", "<guess>qqqqq</guess>", "<guess>toolongword</guess>"):
        with ScriptedServer(script) as server:
            out = env.evaluate_sync(AsyncOpenAI(base_url=server.base_url, api_key="x"), "m", num_examples=2)
        for o in out["outputs"]:
            assert o["reward"] == 0.0
            assert o["metrics"]["num_guesses"] == 6.0
            assert o["error"] is None
