"""Games of the ``textarena`` package, one task per seed, the engine playing the user.

A task is a game id and a seed. The taskset is endless (``INFINITE``): task ``i`` is the game
reset with seed ``i``, and its prompt is the board that reset shows (one shared prompt when the
first board does not depend on the seed). ``TextArenaEnv`` replays that reset host-side, in the
eval process: each assistant reply is the player's move, the engine's next observation (its latest
feedback only, not the whole history again) is the next user turn, and a finished game ends the
exchange. The game's own reward for player 0 is recorded on the trace as ``game_reward`` (weight
1; 0 when the game did not finish), and its end reason as ``info["game_outcome"]``.

The engine draws from Python's process-wide ``random`` while it resets, so seeding, making and
resetting a game happen with no ``await`` between them: rollouts that run side by side cannot
change each other's boards, and seed ``i`` gives the same board in every run.

The word games (Wordle, Hangman, WordLadder, WordSearch) read NLTK data ("words"; Wordle also the
"averaged_perceptron_tagger_eng" tagger). Loading the taskset fetches what is missing with
``nltk.download``; where that cannot reach its server (an offline machine) the load fails with one
line that names the data and how to install it (``python -m nltk.downloader ...`` or ``NLTK_DATA``).
Config keys, data fields and env roles are the original's (``game``; ``info``; ``player``).
"""

from __future__ import annotations

import copy
import io
import itertools
import random
from collections.abc import Iterator
from typing import Any, Literal

import verifiers.v1 as vf

try:
    import nltk
    import textarena as ta
except ImportError as exc:  # the original's message: the extra that brings both
    raise ImportError(
        f"the textarena taskset needs the textarena and nltk packages ({exc.name or exc} is missing): "
        "pip install 'verifiers[ta]'"
    ) from exc

SYSTEM_PROMPT = (
    "You play a text game. Follow the game's instructions and use the exact move format it asks "
    "for. Reason first if you like, then put your move in square brackets as the only bracketed "
    "token of your reply: the game reads the first one it finds."
)

# the NLTK data each of the original's games reads (by the game id's name, before "-v0")
NLTK_DATA: dict[str, tuple[str, ...]] = {
    "Wordle": ("corpora/words", "taggers/averaged_perceptron_tagger_eng"),
    "Hangman": ("corpora/words",),
    "WordLadder": ("corpora/words",),
    "WordSearch": ("corpora/words",),
}


def ensure_nltk_data(game: str) -> None:
    """Fetch the NLTK data ``game`` reads when it is not installed; one ``RuntimeError`` naming
    what is still missing when it cannot be fetched."""
    missing = []
    for path in NLTK_DATA.get(game.split("-", 1)[0], ()):
        try:
            nltk.data.find(path)
            continue
        except LookupError:
            pass
        name = path.rsplit("/", 1)[-1]
        # its own error lines are not shown: what is still missing is said once, below
        nltk.download(name, quiet=True, raise_on_error=False, print_error_to=io.StringIO())
        try:
            nltk.data.find(path)
        except LookupError:
            missing.append(name)
    if missing:
        names = " ".join(missing)
        raise RuntimeError(
            f"textarena game {game!r} needs the NLTK data {names}, which is not installed and could not be "
            f"downloaded: run `python -m nltk.downloader {names}` where the network is open, or point NLTK_DATA "
            "at a folder that holds it"
        )


def latest_feedback(observation: str) -> str:
    """The part of an observation that is new since the last move: the text after its last
    ``[GAME]`` marker, and of that, what follows ``Feedback:`` when the game gives feedback."""
    latest = observation.rsplit("[GAME]", 1)[-1].strip()
    if "Feedback:" in latest:
        return latest.rsplit("Feedback:", 1)[-1].strip()
    return latest


def seeded_game(game: str, seed: int, template: Any = None) -> Any:
    """``game`` reset for one player with ``seed`` (a copy of ``template`` when one is given).
    Synchronous on purpose: nothing else may draw from ``random`` between the seed and the reset."""
    random.seed(seed)
    engine = copy.deepcopy(template) if template is not None else ta.make(env_id=game)
    engine.reset(num_players=1)
    return engine


class TextArenaConfig(vf.TasksetConfig):
    game: Literal["Wordle-v0", "Wordle-v0-long", "Hangman-v0", "WordLadder-v0", "WordSearch-v0"]
    """The textarena game every task plays."""


class TextArenaData(vf.TaskData):
    info: dict
    """``{"game": <id>, "seed": <int>}``: what the env resets the engine with."""


class TextArenaTask(vf.Task[TextArenaData, vf.State, vf.TaskConfig]):
    pass


class TextArenaEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class TextArenaEnv(vf.Env[TextArenaEnvConfig]):
    async def run(self, task: Any, agents: Any) -> None:
        info = task.data.info
        engine = seeded_game(str(info["game"]), int(info["seed"]))
        reward, outcome = 0.0, None
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()  # the board is the prompt: the model moves first
            while not segment.terminated:
                engine.step(segment.last_reply)
                state = engine.state
                if state.done:
                    reward = float((state.rewards or {}).get(0, 0.0))
                    outcome = str(state.game_info[0]["reason"])
                    break
                _player, observation = engine.get_observation()
                segment = await interaction.turn(latest_feedback(str(observation)))
        trace = interaction.trace
        trace.record_reward("game_reward", reward, 1.0)
        if outcome is not None:
            trace.info["game_outcome"] = outcome


class TextArenaTaskset(vf.Taskset[TextArenaTask, TextArenaConfig]):
    INFINITE = True

    def load(self) -> Iterator[TextArenaTask]:
        game = self.config.game
        ensure_nltk_data(game)
        template = ta.make(env_id=game)

        def board(seed: int) -> str:
            return str(seeded_game(game, seed, template).get_observation()[1])

        first = board(0)
        varies = board(1) != first  # a first board that ignores the seed is shared by every task
        for seed in itertools.count():
            yield TextArenaTask(
                TextArenaData(name=f"{game}#{seed}", prompt=board(seed) if varies else first,
                              system_prompt=SYSTEM_PROMPT, info={"game": game, "seed": seed}),
                self.config.task,
            )  # fmt: skip
