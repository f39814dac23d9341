"""Colored squares shown over several turns (the shape of a multi-turn image taskset written for
the original 0.4 release): an endless (``INFINITE``) generated taskset whose prompt carries image
parts, an env whose ``run`` sends each later turn's squares as a user message of image parts
built with the original's ``verifiers.v1.utils.image.image_data_url``."""

import itertools

from PIL import Image

import verifiers.v1 as vf
from verifiers.v1.utils.image import image_data_url

COLORS = {"red": ((255, 0, 0), "A"), "green": ((0, 255, 0), "B"), "blue": ((0, 0, 255), "C")}


def square(color: str) -> vf.ImageUrlContentPart:
    return vf.ImageUrlContentPart(image_url=vf.ImageUrlSource(url=image_data_url(Image.new("RGB", (4, 4), COLORS[color][0]))))


class SquaresData(vf.TaskData):
    turns: list[list[str]]
    answer: str


class SquaresTask(vf.Task[SquaresData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)


class SquaresEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            for colors in task.data.turns[1:]:
                if segment.terminated:
                    break
                parts = [square(c) for c in colors] + [vf.TextContentPart(text="More squares.")]
                segment = await interaction.turn([vf.UserMessage(content=parts)])


class SquaresTaskset(vf.Taskset[SquaresTask, vf.TasksetConfig]):
    INFINITE = True

    def load(self):
        names = list(COLORS)
        for idx in itertools.count():
            turns = [[names[(idx + t) % 3], names[(idx + t + 1) % 3]] for t in range(3)]
            answer = "".join(COLORS[c][1] for turn in turns for c in turn)
            prompt = [vf.UserMessage(content=[square(c) for c in turns[0]] + [vf.TextContentPart(text="Squares.")])]
            yield SquaresTask(SquaresData(idx=idx, prompt=prompt, turns=turns, answer=answer), self.config.task)


__all__ = ["SquaresEnv", "SquaresTaskset"]
