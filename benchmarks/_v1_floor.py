"""The v1 data-model floor: what a v1 single-turn rollout costs on our engine when nothing but its
records is built, with no v1 API layer at all.

Run by ``benchmarks/rollouts.py --kinds v1-floor`` under the project's venv, against the same fast
server and taskset as the ``v1`` row (``benchmarks/_v1_tasks/vbench_tasks.py``). Each rollout is
one :func:`~verifiers.engine.run_groups` rollout whose play does, straight-line, only what every v1
rollout of that task must leave behind in the original 0.4.0's record types:

* the task's content hash (``Task.hash``'s scheme) and its ``TraceTask`` record (the episode's and
  a copy on the trace);
* a ``Trace`` with its agent record (one ``WireAgentConfig`` shared by the run, as ours shares it,
  and the runtime's description; no runtime is made);
* one model call through our client and transport (the same system + user messages and sampling
  the ``v1`` row sends), its reply as an ``AssistantMessage`` with its ``Usage``;
* three ``MessageNode`` records (system, user, reply), one ``ModelCall`` with its ``Sampling``,
  the trace's timing and outcome fields;
* the reward (the taskset's check, "4" in the reply) as a ``Reward``, scored in the engine's
  scoring stage, and the ``Episode``;
* the episode written to ``traces.jsonl`` by pydantic's serializer with the engine's keys after it,
  as ``verifiers.v1.rollout.episode_line`` writes it.

No env, agent, interaction, harness, runtime, hook lookup, intercept or stop check runs. So its
rate is the most any v1 layer that hands user code the original's pydantic records, and writes
them, can reach on this engine and transport: ``ours/raw`` of this row bounds the ``v1`` row's.

Prints one JSON line in ``_v1_driver.py``'s shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "_v1_tasks"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    sys.path.insert(0, str(TASKS_DIR))
    os.environ.setdefault("BENCH_API_KEY", "sk-bench")

    import verifiers
    import verifiers.v1 as vf
    from verifiers.clients import ModelClient
    from verifiers.engine import GroupPlan, RolloutPlan, RunConfig, run_groups
    from verifiers.utils.results import HeadedRecord
    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.task import task_key
    from verifiers.v1.trace import AgentInfo, ModelCall, Reward, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage, Sampling, SystemMessage, Usage, UserMessage

    # the same env and tasks as the v1 row (not timed): its agent config's record, its tasks
    env = vf.load_environment({
        "taskset": {"id": "vbench_tasks", "n": args.rollouts},
        "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 4},
    })  # fmt: skip
    tasks = list(env.taskset.select(vf.SelectConfig(limit=args.rollouts)))
    wires = []  # the role's record, made once the run's client exists (as ours makes it once per run)
    env_id, env_name = env.episode_env_id, type(env).__name__
    tmp_root = tempfile.gettempdir()

    def init_state(row, client, model, sampling):
        return {"example_id": row["example_id"], "rollout_index": 0, "_task": row["task"], "prompt": None,
                "completion": None, "is_completed": False, "timing": {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}}  # fmt: skip

    async def play(state, client, model, sampling) -> None:
        task = state["_task"]
        data = task.data
        digest = task_key(data.model_dump(mode="json", exclude_none=True))
        record = TraceTask(type=type(task).__name__, data=data, key=digest, hash=digest)
        runtime = {"type": "subprocess", "workdir": f"{tmp_root}/vf-rollout-{uuid.uuid4().hex}", "borrowed": False}  # no box
        trace = Trace(task=record.model_copy(), agent=AgentInfo(config=wires[0], runtime=runtime, name="agent"), state=task.state_type()())
        timing = trace.timing
        timing.boot.start = timing.boot.end = timing.setup.start = timing.setup.end = timing.agent.start = time.time()
        system, user = SystemMessage(content=data.system_prompt), UserMessage(content=data.prompt)
        started = time.time()
        raw = await client.chat(model=model, messages=[{"role": "system", "content": system.content}, {"role": "user", "content": user.content}],
                                tools=None, sampling_args=sampling)  # fmt: skip
        reply = AssistantMessage(content=raw.message.get("content"))
        usage = Usage.from_openai(raw.raw.get("usage"))
        trace.nodes.extend([
            MessageNode(message=system), MessageNode(parent=0, message=user), MessageNode(parent=1, message=reply, sampled=True),
        ])  # fmt: skip
        call = ModelCall(node=2, model=model, sampling=Sampling.model_validate(sampling), endpoint="/chat/completions",
                         finish_reason=raw.finish_reason, usage=usage)  # fmt: skip
        call.time.start, call.time.end = started, time.time()
        trace.calls.append(call)
        timing.agent.end = timing.finalize.start = timing.finalize.end = time.time()
        trace.root_reply = reply.content
        trace.is_completed, trace.stop_condition, trace.ok = True, "agent_completed", True
        state["_episode"] = Episode(env=EnvInfo(id=env_id, name=env_name), task=record, traces=[trace], ok=True)
        state["is_completed"] = True

    class Scorer:
        def get_reward_func_names(self) -> list[str]:
            return ["correct"]

        async def score_group(self, states) -> None:
            for state in states:
                trace = state["_episode"].traces[0]
                trace.timing.scoring.start = time.time()
                trace.rewards["correct"] = Reward(score=1.0 if "4" in (trace.root_reply or "") else 0.0, weight=1.0)
                trace.timing.scoring.end = time.time()
                state["reward"], state["metrics"], state["stop_condition"] = trace.rewards["correct"].score, {}, "agent_completed"
                state["usage"] = {"prompt_tokens": trace.calls[0].usage.prompt_tokens, "completion_tokens": trace.calls[0].usage.completion_tokens}
                state["complete"] = True

    def line(state) -> HeadedRecord:
        keys = {
            "example_id": state.get("example_id"), "rollout_index": state.get("rollout_index", 0),
            "reward": state.get("reward") or 0.0, "metrics": state.get("metrics") or {}, "error": state.get("error"),
            "stop_condition": state.get("stop_condition"), "is_truncated": False, "usage": state.get("usage") or {},
            "timing": state.get("timing") or {}, "complete": bool(state.get("complete")),
        }  # fmt: skip
        return HeadedRecord(state["_episode"].to_json()[:-1], keys)

    plan = RolloutPlan(init_state=init_state, play=play)
    groups = [[{"example_id": i, "rollout_index": 0, "task": task}] for i, task in enumerate(tasks)]

    with tempfile.TemporaryDirectory(prefix="vf-v1-floor-") as tmp:
        folder = Path(tmp) / "run"

        async def run() -> None:
            client = ModelClient.from_any({"base_url": args.base_url, "api_key_var": "BENCH_API_KEY"})
            wires.append(env.config.agent.wire(model="fast-model", sampling={"max_tokens": 32}, client=client))
            try:
                config = RunConfig(model="fast-model", sampling_args={"max_tokens": 32}, max_concurrent=args.concurrency,
                                   folder=folder, on_progress=lambda *a, **k: None, record=line, results_file="traces.jsonl")  # fmt: skip
                await run_groups(GroupPlan(plan_for=lambda row: plan, scorer=Scorer()), groups, client, config)
            finally:
                await client.aclose()

        cpu0 = _cpu()
        start = time.perf_counter()
        asyncio.run(run())
        seconds = time.perf_counter() - start
        cpu = _cpu() - cpu0
        rows = []
        with open(folder / "traces.jsonl", encoding="utf-8") as f:
            for text in f:
                rec = json.loads(text)
                err = rec.get("error")
                rows.append((float(rec.get("reward") or 0.0), f"{err.get('type')}: {err.get('message')}"[:500] if err else None))
    print(json.dumps({
        "library": "ours", "version": verifiers.__version__, "module": verifiers.__file__, "kind": "floor",
        "rollouts": len(rows), "seconds": seconds, "rollouts_per_s": len(rows) / seconds if seconds else 0.0,
        "cpu_s": cpu, "own_cpu_s": cpu, "children_cpu_s": 0.0, "rollouts_per_cpu_s": len(rows) / cpu if cpu else 0.0,
        "avg_reward": sum(r for r, _ in rows) / len(rows) if rows else 0.0, "errors": sum(1 for _, e in rows if e),
        "first_error": next((e for _, e in rows if e), None),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
