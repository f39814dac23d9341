"""The rollout hot path without the network: CPU and instructions per rollout of our engine, v1 and
classic, with the model transport replaced by a canned chat-completion body.

    .venv/bin/python benchmarks/hot_path.py [--kinds v1,classic] [--rollouts 3000] [--instructions]

Each measurement is a fresh interpreter (this checkout's ``verifiers`` first on ``sys.path``, so a
worktree measures its own code) that runs one whole eval in process: ``run_v1`` on the v1 taskset of
``benchmarks/rollouts.py`` (``benchmarks/_v1_tasks/vbench_tasks.py``: the ``null`` harness on the
subprocess runtime, ``traces.jsonl`` written) or a classic ``SingleTurnEnv.evaluate`` of the same
question with its results saved, 256 rollouts in flight. ``ModelClient.request_json`` answers at
once with the body a fast server would send, so what is left is everything a rollout costs above
the wire: the engine, the API layer, scoring and the record.

Prints CPU microseconds per rollout (median of ``--repeats``). With ``--instructions`` it also runs
each kind under valgrind (callgrind, no output file) at ``--small`` and ``--large`` rollouts and
prints the difference per rollout: instructions do not move with the machine's load the way CPU
time does, so they are the figure to compare one change by. valgrind is required for that flag (one
clear error when it is missing); the whole run takes a few minutes.

The peer here is our own classic engine on the same question: the v1 row through ``benchmarks/
rollouts.py`` is compared with the original and the bare loop; this one says how much the v1 layer
adds over the classic one, with nothing else in the way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "benchmarks" / "_v1_tasks"
BODY = {
    "id": "chatcmpl-hot-path", "object": "chat.completion", "created": 0, "model": "fast-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is 4."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
}  # fmt: skip
RAW_BODY = json.dumps(BODY)


def _child(kind: str, n: int) -> None:
    """One measurement in this process: prints ``{"cpu_us": ..., "rollouts": ...}``."""
    sys.path[:0] = [str(REPO), str(TASKS_DIR)]
    os.environ.setdefault("BENCH_API_KEY", "sk-hot-path")
    from verifiers.clients import client as client_module

    async def canned(self, path, body, **kwargs):
        await asyncio.sleep(0)  # a reply comes back in a later turn of the loop, as from a socket
        return json.loads(RAW_BODY)  # a fresh body per call, as a parse would give

    client_module.ModelClient.request_json = canned
    folder = Path(tempfile.mkdtemp(prefix="vf-hot-path-"))
    try:
        if kind == "v1":
            import verifiers.v1 as vf
            from verifiers.clients import ModelClient
            from verifiers.v1.rollout import run_v1

            env = vf.load_environment({
                "taskset": {"id": "vbench_tasks", "n": n},
                "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 4},
            })  # fmt: skip
            tasks = list(env.taskset.select(vf.SelectConfig(limit=n)))

            async def run() -> int:
                client = ModelClient.from_any({"base_url": "http://127.0.0.1:9/v1", "api_key_var": "BENCH_API_KEY"})
                try:
                    out = await run_v1(env, tasks, client, model="fast-model", sampling_args={"max_tokens": 32},
                                       num_rollouts=1, max_concurrent=256, folder=folder / "run",
                                       on_progress=lambda *a, **k: None)  # fmt: skip
                finally:
                    await client.aclose()
                return _rewarded(out)
        else:
            import verifiers as cvf

            rows = [{"question": "What is 2+2?", "answer": "4"} for _ in range(n)]

            def correct_answer(completion, answer, **kwargs) -> float:
                texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
                return 1.0 if answer in (texts[-1] if texts else "") else 0.0

            env = cvf.SingleTurnEnv(dataset=rows, eval_dataset=rows, system_prompt="Answer briefly.",
                                    rubric=cvf.Rubric(funcs=[correct_answer], weights=[1.0]))  # fmt: skip

            async def run() -> int:
                out = await env.evaluate(
                    cvf.ClientConfig(base_url="http://127.0.0.1:9/v1", api_key_var="BENCH_API_KEY"),
                    model="fast-model", sampling_args={"max_tokens": 32}, num_examples=n, rollouts_per_example=1,
                    max_concurrent=256, on_progress=lambda *a, **k: None, save_results=True,
                    results_path=folder / "run",
                )  # fmt: skip
                return _rewarded(out)

        cpu0 = time.process_time()
        rewarded = asyncio.run(run())
        cpu = time.process_time() - cpu0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if rewarded != n:
        raise SystemExit(f"{kind}: {rewarded} of {n} rollouts were rewarded 1.0 (the canned answer is right)")
    print(json.dumps({"kind": kind, "rollouts": n, "cpu_us": cpu / n * 1e6}), flush=True)


def _rewarded(out) -> int:
    """Rollouts rewarded 1.0, from the run's summary (reading the saved records back would count
    their parsing in the instructions)."""
    meta = out.metadata
    return meta["num_scored"] if meta["avg_reward"] == 1.0 and not meta["num_errors"] else -1


def _run(kind: str, n: int, *, valgrind: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--rollouts", str(n)]
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if valgrind:
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if not found:
            raise SystemExit(f"valgrind printed no instruction count:\n{proc.stderr[-2000:]}")
        out["instructions"] = int(found.group(1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="v1,classic")
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="also count instructions per rollout (valgrind)")
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--large", type=int, default=900)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--child", choices=["v1", "classic"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.rollouts)
        return
    kinds = [k for k in args.kinds.split(",") if k]
    if any(k not in ("v1", "classic") for k in kinds):
        raise SystemExit(f"--kinds: v1 and/or classic, got {args.kinds!r}")
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH (apt-get install valgrind); leave the flag out for CPU time only")
    rows = {}
    for kind in kinds:
        cpu = statistics.median(_run(kind, args.rollouts)["cpu_us"] for _ in range(args.repeats))
        rows[kind] = {"cpu_us": cpu}
        if args.instructions:
            small = _run(kind, args.small, valgrind=True)["instructions"]
            large = _run(kind, args.large, valgrind=True)["instructions"]
            rows[kind]["instructions"] = (large - small) / (args.large - args.small)
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _common import machine, table

    print(f"Rollout hot path, transport replaced: CPU per rollout, median of {args.repeats} x {args.rollouts} ({machine()})")
    headers = ["engine", "us CPU per rollout"] + (["instructions per rollout"] if args.instructions else [])
    body = [[kind, f"{row['cpu_us']:.1f}"] + ([f"{row['instructions']:,.0f}"] if args.instructions else []) for kind, row in rows.items()]
    print(table(headers, body))
    if "v1" in rows and "classic" in rows:
        rows["v1_over_classic_cpu"] = rows["v1"]["cpu_us"] / rows["classic"]["cpu_us"]
        line = f"v1 / classic: {rows['v1_over_classic_cpu']:.2f}x the CPU"
        if args.instructions:
            rows["v1_over_classic_instructions"] = rows["v1"]["instructions"] / rows["classic"]["instructions"]
            line += f", {rows['v1_over_classic_instructions']:.2f}x the instructions"
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))

if __name__ == "__main__":
    main()
