"""Drive one rollout benchmark with whichever ``verifiers`` the running interpreter has installed.

Run by ``benchmarks/rollouts.py`` and ``benchmarks/memory.py`` as a subprocess, once under the
project's venv (our library) and once under ``.venv-bench-verifiers-0.3.0`` (the original from
PyPI). The environments are written once, in the classic API both libraries share, so both sides do
the same work: the same dataset, rubric, tool, server and concurrency. This file must not import
anything from this repository (it runs in the original's venv); it is executed from a temporary
working directory so that ``import verifiers`` finds the installed library only.

Prints one JSON line: rollouts, seconds, rollouts_per_s, avg_reward, errors, library + version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from importlib import metadata

QUESTION = "What is 2+2?"


def correct_answer(completion, answer, **kwargs) -> float:
    """1.0 when the final assistant message contains the answer."""
    if isinstance(completion, list):
        texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
        text = texts[-1] if texts else ""
    else:
        text = completion or ""
    return 1.0 if str(answer) in text else 0.0


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def build_env(vf, kind: str, n: int, dataset_kind: str):
    rows = [{"question": QUESTION, "answer": "4"} for _ in range(n)]
    if dataset_kind == "datasets":
        from datasets import Dataset

        data = Dataset.from_list(rows)
    else:
        data = rows
    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0])
    if kind == "single":
        return vf.SingleTurnEnv(
            dataset=data, eval_dataset=data, system_prompt="Answer briefly.", rubric=rubric
        )
    if kind == "tool":
        return vf.ToolEnv(dataset=data, eval_dataset=data, tools=[add], max_turns=4, rubric=rubric)
    raise SystemExit(f"unknown env kind {kind!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["single", "tool", "raw", "raw-mcp"], required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--results-path", default=None, help="save results there (memory benchmark)")
    parser.add_argument("--dataset", choices=["datasets", "list"], default="datasets")
    args = parser.parse_args()
    if args.kind == "raw":
        print(json.dumps(raw_loop(args.base_url, args.rollouts, args.concurrency)), flush=True)
        return
    if args.kind == "raw-mcp":
        print(json.dumps(raw_mcp_loop(args.base_url, args.rollouts, args.concurrency)), flush=True)
        return

    import verifiers as vf

    version = metadata.version("verifiers")
    ours = int(version.split(".")[0]) >= 1
    os.environ.setdefault("BENCH_API_KEY", "sk-bench")
    env = build_env(vf, args.kind, args.rollouts, args.dataset)
    quiet = lambda *a, **k: None  # noqa: E731  (no progress bar in either library)
    kwargs = dict(
        model="fast-model",
        sampling_args={"max_tokens": 32},
        num_examples=args.rollouts,
        rollouts_per_example=1,
        max_concurrent=args.concurrency,
        on_progress=quiet,
    )
    if args.results_path:
        from pathlib import Path

        kwargs.update(save_results=True, results_path=Path(args.results_path))
    if ours:
        client = vf.ClientConfig(base_url=args.base_url, api_key_var="BENCH_API_KEY")
    else:
        # the original's own recommended path (what its vf-eval builds): an httpx pool sized by it
        client = vf.ClientConfig(api_base_url=args.base_url, api_key_var="BENCH_API_KEY")
        kwargs["on_start"] = quiet

    async def run():
        start = time.perf_counter()
        out = await env.evaluate(client, **kwargs)
        return out, time.perf_counter() - start

    cpu_start = time.process_time()
    out, seconds = asyncio.run(run())
    cpu = time.process_time() - cpu_start
    rewards = _rewards(out)
    errors = _errors(out)
    print(
        json.dumps(
            {
                "library": "ours" if ours else "original",
                "version": version,
                "module": vf.__file__,
                "kind": args.kind,
                "rollouts": len(rewards),
                "seconds": seconds,
                "rollouts_per_s": len(rewards) / seconds if seconds else 0.0,
                "cpu_s": cpu,
                "rollouts_per_cpu_s": len(rewards) / cpu if cpu else 0.0,
                "avg_reward": sum(rewards) / len(rewards) if rewards else 0.0,
                "errors": errors,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        ),
        flush=True,
    )


def raw_loop(base_url: str, requests: int, concurrency: int) -> dict:
    """The ceiling: a bare aiohttp loop posting the single-turn request body, decoding each reply."""
    import aiohttp

    body = json.dumps(
        {
            "model": "fast-model",
            "messages": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": QUESTION},
            ],
            "max_tokens": 32,
        }
    ).encode()
    url = base_url + "/chat/completions"
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}

    async def run() -> tuple[int, float]:
        done = 0
        todo = iter(range(requests))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency * 2)) as session:

            async def worker() -> None:
                nonlocal done
                for _ in todo:
                    async with session.post(url, data=body, headers=headers) as resp:
                        reply = json.loads(await resp.read())
                    if reply["choices"][0]["message"]["content"]:
                        done += 1

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return done, time.perf_counter() - start

    cpu_start = time.process_time()
    done, seconds = asyncio.run(run())
    cpu = time.process_time() - cpu_start
    return {
        "library": "raw-aiohttp",
        "kind": "raw",
        "requests": done,
        "seconds": seconds,
        "requests_per_s": done / seconds,
        "cpu_s": cpu,
        "requests_per_cpu_s": done / cpu if cpu else 0.0,
    }


def raw_mcp_loop(base_url: str, rollouts: int, concurrency: int) -> dict:
    """The ceiling of the v1 MCP row: per rollout, the bare loop's two model requests (aiohttp) around
    one ``tools/call`` written as a bare JSON-RPC line to the same MCP tool server the v1 row uses
    (``benchmarks/_v1_tasks/vbench_mcp_tools.Calc``, served over stdio by ``python -m
    verifiers.v1.mcp`` as our library serves it; runs under our venv only). Like the v1 rows, the
    wall time covers starting and stopping that server and the CPU time counts it (a finished child)."""
    import aiohttp

    tasks_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_v1_tasks")
    tools = [{"type": "function", "function": {
        "name": "calc_add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}}]  # fmt: skip
    first = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]
    url = base_url + "/chat/completions"
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}

    async def run() -> int:
        env = {**os.environ, "VF_TOOLSET": "vbench_mcp_tools:Calc",
               "PYTHONPATH": os.pathsep.join(p for p in (tasks_dir, os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
        env.pop("VF_CONFIG", None)
        env.pop("VF_TASK", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "verifiers.v1.mcp", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=env, limit=1 << 24)  # fmt: skip
        pending: dict[int, asyncio.Future] = {}

        async def reader() -> None:
            while line := await proc.stdout.readline():
                msg = json.loads(line)
                fut = pending.pop(msg.get("id"), None) if "id" in msg else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
            for fut in pending.values():
                fut.set_exception(RuntimeError("the MCP server closed its stdout"))

        ids = iter(range(1, 1 << 62))

        async def rpc(method: str, params: dict) -> dict:
            rid = next(ids)
            fut = pending[rid] = asyncio.get_running_loop().create_future()
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
            reply = await fut
            if "error" in reply:
                raise RuntimeError(f"MCP {method}: {reply['error']}")
            return reply["result"]

        read_task = asyncio.create_task(reader())
        await rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "raw-mcp", "version": "0"}})  # fmt: skip
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        done = 0
        todo = iter(range(rollouts))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency * 2)) as session:

            async def chat(messages: list) -> dict:
                body = json.dumps({"model": "fast-model", "messages": messages, "tools": tools, "max_tokens": 32})
                async with session.post(url, data=body.encode(), headers=headers) as resp:
                    return json.loads(await resp.read())["choices"][0]["message"]

            async def worker() -> None:
                nonlocal done
                for _ in todo:
                    call = (await chat(first))["tool_calls"][0]
                    name = call["function"]["name"].removeprefix("calc_")
                    result = await rpc("tools/call", {"name": name, "arguments": json.loads(call["function"]["arguments"])})
                    text = "".join(c.get("text", "") for c in result["content"])
                    tool_msg = {"role": "tool", "tool_call_id": call["id"], "content": text}
                    reply = await chat([*first, {"role": "assistant", "content": None, "tool_calls": [call]}, tool_msg])
                    if text == "4" and "4" in (reply.get("content") or ""):
                        done += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        proc.stdin.close()
        await proc.wait()
        await read_task
        return done

    own0, kids0 = time.process_time(), _children_cpu()
    start = time.perf_counter()
    done = asyncio.run(run())
    seconds = time.perf_counter() - start
    own, kids = time.process_time() - own0, _children_cpu() - kids0
    cpu = own + kids
    return {
        "library": "raw-aiohttp+mcp",
        "kind": "raw-mcp",
        "rollouts": done,
        "seconds": seconds,
        "rollouts_per_s": done / seconds,
        "cpu_s": cpu,
        "own_cpu_s": own,
        "children_cpu_s": kids,
        "rollouts_per_cpu_s": done / cpu if cpu else 0.0,
    }


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _rewards(out) -> list[float]:
    if isinstance(out, dict) and isinstance(out.get("outputs"), list):
        return [float(o.get("reward") or 0.0) for o in out["outputs"]]
    reward = getattr(out, "reward", None)
    if reward is None and isinstance(out, dict):
        reward = out.get("reward")
    return [float(r) for r in reward or []]


def _errors(out) -> int:
    outputs = out.get("outputs") if isinstance(out, dict) else getattr(out, "outputs", None)
    if isinstance(outputs, list):
        return sum(1 for o in outputs if isinstance(o, dict) and o.get("error"))
    return -1


if __name__ == "__main__":
    sys.exit(main())
