"""Agent-program harness benchmark: mini-swe-agent in the bubblewrap sandbox, beside the ``bash``
harness on the same task, in one run.

    .venv/bin/python benchmarks/harness.py [--starts 10] [--rollouts 3]

1. Tool folder: mini-swe-agent's (``verifiers.sandbox.toolenv``), built from PyPI if this machine
   has none yet (its build time is printed, from the folder's record).
2. Sandbox start for a mini-swe-agent rollout, the tool folder built: the runtime started, the
   tool folder found by its hash and mounted, the proxy's route granted, and a program run from
   the tool folder's interpreter (``python -I -c pass``) through the relay, then stopped: what a
   rollout pays before mini's own code runs. Goal: under 1 s. Beside it, mini's import time
   (``import minisweagent.run.mini, litellm``), which is the program's, not the sandbox's.
3. Per-rollout overhead: ``--rollouts`` rollouts of one repair task (tests/v1/packages/vf_bugfix)
   with the same scripted model (fix with one bash command, then finish), on the ``bash`` harness
   (the in-process loop, its commands in the sandbox) and on ``mini_swe_agent`` (the program in
   the sandbox, its calls through the interception proxy). Both on ``type = "sandbox"``; every
   rollout must earn reward 1. The difference is the harness's overhead (proxy + sandboxed
   program + mini's start).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "v1" / "packages"))

from benchmarks._common import add_priority_argument, machine, set_priority, table  # noqa: E402

START_GOAL_S = 1.0
FIX = "sed -i 's/a - b/a + b/' calc.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * (len(ordered) - 1)))]


async def tool_folder() -> object:
    import json

    from verifiers.sandbox.toolenv import RECORD, ensure_toolenv
    from verifiers.v1.harnesses.mini_swe_agent import MiniSWEAgentHarnessConfig

    t = time.perf_counter()
    env = await ensure_toolenv(MiniSWEAgentHarnessConfig().requirements)
    took = time.perf_counter() - t
    record = json.loads((env.host / RECORD).read_text())
    print(f"tool folder {env.key}: {'built now' if took > 5 else 'cached'} ({took:.2f} s here; its build took {record['built_s']} s)")
    return env


async def starts(n: int) -> tuple[list[float], list[float], list[float]]:
    from verifiers.v1.harnesses.mini_swe_agent import MiniSWEAgentHarnessConfig
    from verifiers.v1.interception import InterceptionServer
    from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

    reqs = MiniSWEAgentHarnessConfig().requirements
    routed, plain, imports = [], [], []
    async with InterceptionServer() as proxy:
        url = f"http://127.0.0.1:{proxy.port}/r/x/v1"
        for i in range(n):
            for grant, into in ((True, routed), (False, plain)):
                t = time.perf_counter()
                rt = SandboxRuntime(SandboxConfig(timeout=60))
                await rt.start()
                tools = await rt.prepare_tools(reqs)
                if grant:
                    await rt.prepare_execution([url])
                r = await rt.run_program([tools.python, "-I", "-c", "pass"])
                await rt.stop()
                into.append(time.perf_counter() - t)
                assert r.ok, r.stderr
            if i < 3:
                rt = SandboxRuntime(SandboxConfig(timeout=120))
                await rt.start()
                tools = await rt.prepare_tools(reqs)
                t = time.perf_counter()
                r = await rt.run_program([tools.python, "-I", "-c", "import minisweagent.run.mini, litellm"], env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_SILENT_STARTUP": "1"})
                imports.append(time.perf_counter() - t)
                await rt.stop()
                assert r.ok, r.stderr
    return routed, plain, imports


async def rollouts(harness: str, n: int) -> list[float]:
    from verifiers.clients import ModelClient
    from verifiers.testing.scripted import ScriptedServer, reply, tool_call, tool_calls
    from verifiers.v1.env import load_environment
    from verifiers.v1.rollout import run_v1

    def script(req):
        done = [m for m in req.messages if m["role"] == "tool"]
        if not done:
            return tool_calls(tool_call("bash", {"command": FIX}, id="c1"))
        return tool_calls(tool_call("bash", {"command": SUBMIT}, id="c2")) if harness == "mini_swe_agent" else reply("fixed")

    env = load_environment({"taskset": {"id": "vf-bugfix"},
                            "agent": {"harness": {"id": harness}, "runtime": {"type": "sandbox", "timeout": 120}}})  # fmt: skip
    env.check()
    times = []
    async with ScriptedServer(script, token_ids=True, logprobs=True) as srv:
        client = ModelClient.from_any(srv.base_url)
        try:
            await run_v1(env, list(env.taskset), client, model="scripted-model")  # warm: the task's environment built
            for _ in range(n):
                t = time.perf_counter()
                out = await run_v1(env, list(env.taskset), client, model="scripted-model")
                times.append(time.perf_counter() - t)
                assert out.state[0]["reward"] == 1.0, out.state[0]["_episode"].traces[0].errors
        finally:
            await client.aclose()
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--rollouts", type=int, default=3)
    add_priority_argument(parser)
    args = parser.parse_args()
    set_priority(args.nice)
    print(machine())
    await tool_folder()
    routed, plain, imports = await starts(args.starts)
    print()
    print(table(["sandbox start (tool folder built)", "median s", "p95 s", "runs"], [
        ["runtime + tool folder + proxy route + program", round(statistics.median(routed), 3), round(p95(routed), 3), len(routed)],
        ["runtime + tool folder + program (no route)", round(statistics.median(plain), 3), round(p95(plain), 3), len(plain)],
        ["mini's own imports (mini + litellm), for scale", round(statistics.median(imports), 3), round(max(imports), 3), len(imports)],
    ]))  # fmt: skip
    verdict = "meets" if statistics.median(routed) < START_GOAL_S else "MISSES"
    print(f"sandbox start for a mini-swe-agent rollout: {statistics.median(routed):.3f} s median ({verdict} the {START_GOAL_S:g} s goal)")
    bash = await rollouts("bash", args.rollouts)
    mini = await rollouts("mini_swe_agent", args.rollouts)
    mb, mm = statistics.median(bash), statistics.median(mini)
    print()
    print(table(["harness (same task, same script)", "median s / rollout", "min s", "rollouts"], [
        ["bash (in-process loop, commands sandboxed)", round(mb, 3), round(min(bash), 3), len(bash)],
        ["mini_swe_agent (program sandboxed, proxy)", round(mm, 3), round(min(mini), 3), len(mini)],
    ]))  # fmt: skip
    print(f"per-rollout overhead of mini_swe_agent over bash: {mm - mb:+.2f} s ({mm / mb:.1f}x)")


if __name__ == "__main__":
    asyncio.run(main())
