"""A v1 taskset for user-sim: the scenario (prompt) is the user's; the assistant must say the
user's favourite colour, which only the user knows."""

from __future__ import annotations

import verifiers.v1 as vf


class ChatData(vf.TaskData):
    colour: str


class ChatTask(vf.Task[ChatData]):
    @vf.reward
    def named_colour(self, task: ChatData, trace: vf.Trace) -> float:
        return float(task.colour in trace.last_reply)


class ChatTaskset(vf.Taskset[ChatTask]):
    def load(self):
        for i, colour in enumerate(["red", "blue"]):
            yield ChatTask(ChatData(prompt=f"Your favourite colour is {colour}. Ask the assistant to guess it.", colour=colour, id=f"c{i}"))


__all__ = ["ChatTaskset"]
