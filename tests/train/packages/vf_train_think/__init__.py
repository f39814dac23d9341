"""A multi-turn v1 taskset for the token-sample tests, played by ``vf_train_turns``'s env: the
agent has an ``add`` tool, answers the task, the env asks once more (a user message), the agent
answers again. Its harness is an agent program (a separate process that talks to the model through
the interception proxy and runs ``add`` itself); on a task with ``strip_history`` the program drops
the ``<think>`` blocks of its earlier replies before each model call, as many agent programs do: a
harness that changes earlier messages on purpose (a task's ``@vf.intercept`` may not).
Reward: a shorter last reply scores higher (a group of a random model's replies has signal)."""

from __future__ import annotations

import json
import sys

from vf_train_turns import TurnsEnv  # the two-turn env (the tests put packages/ on the path)

import verifiers.v1 as vf

PROGRAM = r"""
import json, os, re, sys, urllib.request
THINK = re.compile(r"<think>.*?</think>", re.S)
endpoint, convo, strip = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
messages = json.load(open(convo))
schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": schema}}]
while True:
    if strip:
        messages = [dict(m, content=THINK.sub("", m["content"])) if m["role"] == "assistant" and isinstance(m.get("content"), str) else m
                    for m in messages]
    body = json.dumps({"model": "any", "messages": messages, "tools": tools}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer " + os.environ["AGENT_API_KEY"]}
    with urllib.request.urlopen(urllib.request.Request(endpoint + "/chat/completions", data=body, headers=headers)) as r:
        reply = json.load(r)["choices"][0]["message"]
    messages.append({k: reply[k] for k in ("role", "content", "tool_calls") if reply.get(k) is not None})
    if not reply.get("tool_calls"):
        break
    for call in reply["tool_calls"]:
        args = json.loads(call["function"]["arguments"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])})
"""


def _openai(message: vf.Message) -> dict:
    d = message.model_dump(exclude_none=True)
    if d.get("tool_calls"):
        d["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in d["tool_calls"]]  # fmt: skip
    return d


class ThinkHarnessConfig(vf.HarnessConfig):
    id: str = "vf-train-think"


class ThinkHarness(vf.Harness[ThinkHarnessConfig]):
    NEEDS_CONTAINER = False  # the test's own program: the subprocess runtime is enough

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        # as the original hands a launch its task: the prompt as written on the first turn (text),
        # the conversation so far on a later one; the system prompt placed by resolve_prompt
        system, prompt = self.resolve_prompt(data)
        convo = [{"role": "system", "content": system}] if system else []
        convo += [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [_openai(m) for m in prompt or []]
        await runtime.write("agent.py", PROGRAM)
        await runtime.write("convo.json", json.dumps(convo))
        strip = "1" if data.strip_history else "0"
        return await runtime.run_program([sys.executable, "agent.py", endpoint, "convo.json", strip], env={"AGENT_API_KEY": secret}, timeout=60)


class ThinkData(vf.TaskData):
    strip_history: bool = False


class ThinkTask(vf.Task[ThinkData]):
    @vf.reward
    def short(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply))


class ThinkConfig(vf.TasksetConfig):
    n: int = 2
    strip_history: bool = False


class ThinkTaskset(vf.Taskset[ThinkTask, ThinkConfig]):
    def load(self):
        for i in range(self.config.n):
            yield ThinkTask(ThinkData(prompt=f"Add {i} and 2.", name=f"add-{i}", strip_history=self.config.strip_history))


__all__ = ["ThinkHarness", "ThinkTaskset", "TurnsEnv"]
