"""The ``textarena`` taskset on the real ``textarena`` engine from the package index.

The original's own word games read NLTK data that this offline machine cannot download, so the
episodes here play ``GuessTheNumber-v0`` (no NLTK data) through a package written in the shape the
original's ``wordle-v1`` example has (a config that pins ``game``, the taskset subclassed, the env
exported beside it); the word games are checked for their one-line refusal when their data is
missing and cannot be fetched.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest

from tests.cli.helpers import REPO, run_vf
from verifiers.clients import ModelClient
from verifiers.testing.scripted import ScriptedServer
from verifiers.v1.env import load_environment
from verifiers.v1.rollout import run_v1

PACKAGE = '''
"""A textarena game pinned by its config, in the shape of the original's wordle-v1 example."""

from typing import Literal

import verifiers.v1 as vf
from verifiers.v1.tasksets.textarena import TextArenaConfig, TextArenaEnv, TextArenaTask, TextArenaTaskset


class GuessConfig(TextArenaConfig):
    game: Literal["GuessTheNumber-v0"] = "GuessTheNumber-v0"


class GuessTaskset(TextArenaTaskset, vf.Taskset[TextArenaTask, GuessConfig]):
    pass


__all__ = ["GuessTaskset", "TextArenaEnv"]
'''


@pytest.fixture(scope="module")
def guess_pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ta")
    (root / "ta_guess").mkdir()
    (root / "ta_guess" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m.startswith("ta_guess")]:
        del sys.modules[name]


def bisect(req) -> str:
    """A player that halves the range on each hint (1..20: at most five guesses)."""
    lo, hi, guess = 1, 20, None
    for m in req.messages:
        text = m["content"] if isinstance(m["content"], str) else ""
        if m["role"] == "assistant":
            guess = int(re.search(r"\[(\d+)\]", text).group(1))
        elif m["role"] == "user" and guess is not None:
            if "higher" in text:
                lo = guess + 1
            elif "lower" in text:
                hi = guess - 1
    return f"I guess [{(lo + hi) // 2}]"


async def _play(env, tasks, script):
    async with ScriptedServer(script) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            return await run_v1(env, tasks, client, model="scripted-model")
        finally:
            await client.aclose()


async def test_the_engine_plays_the_user_and_scores_the_game(guess_pkg) -> None:
    env = load_environment({"taskset": {"id": "ta-guess"}})
    assert type(env).__name__ == "TextArenaEnv" and list(env._agent_specs) == ["player"]
    assert not env.taskset.bounded  # endless: one task per seed
    tasks = list(env.taskset.take(3))
    assert [t.data.info for t in tasks] == [{"game": "GuessTheNumber-v0", "seed": i} for i in range(3)]
    assert [t.data.name for t in tasks] == ["GuessTheNumber-v0#0", "GuessTheNumber-v0#1", "GuessTheNumber-v0#2"]
    assert "Guess The Number" in tasks[0].data.prompt and tasks[0].data.system_prompt
    out = await _play(env, tasks, bisect)
    traces = [s["_episode"].traces[0] for s in out.state]
    assert [t.errors for t in traces] == [[], [], []]
    for t in traces:
        assert t.rewards["game_reward"].score == 1.0 and t.rewards["game_reward"].weight == 1.0
        assert t.info["game_outcome"].startswith("Congratulations")
        # each later user turn is the engine's latest hint alone, not the whole history again
        hints = [m.content for m in t.messages if m.role == "user"][1:]
        assert all(h in ("The target number is higher.", "The target number is lower.") for h in hints), hints
    # a seed is one board: the same guesses again for the same seeds
    again = await _play(env, tasks, bisect)
    assert [[m.content for m in s["_episode"].traces[0].messages] for s in again.state] == \
        [[m.content for m in t.messages] for t in traces]  # fmt: skip

    # a reply with no bracketed move is the game's invalid move: the engine ends the game and scores
    # it by its own rule (a share of the way to the answer), never an error of the run
    out = await _play(env, tasks[:1], lambda req: "no move here")
    (trace,) = [s["_episode"].traces[0] for s in out.state]
    assert trace.errors == [] and "Invalid move format" in trace.info["game_outcome"]
    assert 0.0 <= trace.rewards["game_reward"].score < 1.0


def test_vf_eval_runs_the_package_and_an_endless_run_needs_n(guess_pkg, tmp_path) -> None:
    env = {"PYTHONPATH": f"{REPO}:{guess_pkg}"}
    with ScriptedServer(bisect) as srv:
        res = run_vf("eval", "ta-guess", "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "-o", str(tmp_path / "out"),
                     "--run.dir", "r", cwd=tmp_path, env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr
        rows = [json.loads(x) for x in (tmp_path / "out" / "r" / "traces.jsonl").read_text().splitlines()]
        assert [r["reward"] for r in rows] == [1.0, 1.0]
        res = run_vf("eval", "ta-guess", "-m", "scripted-model", "-b", srv.base_url, cwd=tmp_path, env=env)
        assert res.returncode == 1 and res.stderr.strip().endswith("is infinite - bound the run with -n")


def test_a_word_game_without_its_nltk_data_is_refused_in_one_line(monkeypatch, tmp_path) -> None:
    import nltk

    from verifiers.v1 import load_taskset

    asked: list[str] = []

    def offline(name, **kwargs):  # the download server cannot be reached, as on this machine
        asked.append(name)
        kwargs["print_error_to"].write("[nltk_data] Error loading words: <urlopen error>\n")  # kept out of sight
        return False

    monkeypatch.setattr(nltk, "download", offline)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])  # no NLTK data anywhere
    ts = load_taskset({"id": "textarena", "game": "Wordle-v0"})
    with pytest.raises(RuntimeError) as err:
        next(iter(ts))
    msg = str(err.value)
    assert "\n" not in msg and "'Wordle-v0'" in msg and "words averaged_perceptron_tagger_eng" in msg
    assert "python -m nltk.downloader" in msg and asked == ["words", "averaged_perceptron_tagger_eng"]
    with pytest.raises(ValueError, match="game"):
        load_taskset({"id": "textarena", "game": "Chess-v0"})  # the original's five games only
