"""Drive one v1 rollout benchmark with whichever ``verifiers`` the running interpreter has installed.

Run by ``benchmarks/rollouts.py`` as a subprocess, once under the project's venv (our
``verifiers.v1``) and once under ``.venv-bench-verifiers-0.4.0`` (the original from PyPI). Both
sides run the same taskset (``benchmarks/_v1_tasks/vbench_tasks.py``, put on ``sys.path`` and
``PYTHONPATH`` here) with the ``null`` harness on the subprocess runtime, through each library's
own eval path: ours ``verifiers.v1.rollout.run_v1`` (what ``vf eval`` calls), the original's
``verifiers.v1.cli.eval.runner.run_eval`` on the config its ``vf-eval`` parses (``--no-rich
--no-push``). Both write ``traces.jsonl`` into a scratch folder. This file must not import anything
from this repository (it runs in the original's venv).

CPU time is the driver's own plus that of its finished children: the original runs each rollout's
harness as a program in the runtime and its MCP toolset as a server process, and that work is part
of what a rollout costs.

Prints one JSON line: rollouts, seconds, rollouts_per_s, cpu_s, rollouts_per_cpu_s, avg_reward,
errors, library + version; or ``{"unavailable": "<why>"}`` when the library lacks what the kind needs.
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
from importlib import metadata
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "_v1_tasks"
TASKSET_ID = "vbench_tasks"


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def mcp_unavailable() -> str | None:
    """Why this library cannot run the MCP row (None: it can)."""
    import verifiers.v1 as vf

    missing = [name for name in ("Toolset", "SharedToolsetConfig", "ToolsetConfig") if not hasattr(vf, name)]
    if missing:
        return f"verifiers.v1 has no {', '.join(missing)} (MCP toolsets are not implemented in this checkout)"
    return None


def prepare_ours(args: argparse.Namespace, out_dir: Path):
    """Build the env and its tasks (not timed); the coroutine function that runs them (timed)."""
    import verifiers.v1 as vf
    from verifiers.clients import ModelClient
    from verifiers.v1.rollout import run_v1

    env = vf.load_environment(env_table(args))
    tasks = list(env.taskset.select(vf.SelectConfig(limit=args.rollouts)))

    async def run() -> Path:
        client = ModelClient.from_any({"base_url": args.base_url, "api_key_var": "BENCH_API_KEY"})
        try:
            await run_v1(
                env, tasks, client, model="fast-model", sampling_args={"max_tokens": 32}, num_rollouts=1,
                max_concurrent=args.concurrency, folder=out_dir / "run", on_progress=lambda *a, **k: None,
            )  # fmt: skip
        finally:
            await client.aclose()
        return out_dir / "run" / "traces.jsonl"

    return run


def read_traces(path: Path) -> list[tuple[float, str | None]]:
    """(reward, first error) per line of our ``traces.jsonl`` (read after the timed run)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            err = rec.get("error")
            rows.append(
                (
                    float(rec.get("reward") or 0.0),
                    f"{err.get('type')}: {err.get('message')}"[:500] if err else None,
                )
            )
    return rows


def prepare_original(args: argparse.Namespace, out_dir: Path):
    """Parse the config as its ``vf-eval`` does (not timed); the coroutine function that runs the
    eval (timed: it loads the env, then runs every rollout)."""
    import vbench_tasks  # noqa: F401  (imported here, not in the timed run)
    from pydantic_config import cli
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.cli.resolve import narrow_config, with_positional_taskset
    from verifiers.v1.configs.cli.eval import EvalConfig

    argv = with_positional_taskset(
        [
            TASKSET_ID, "--env.taskset.n", str(args.rollouts), "--env.taskset.mcp", json.dumps(args.kind == "mcp"),
            "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess", "--env.agent.max-turns", "4",
            "-m", "fast-model", "--client.base-url", args.base_url, "--client.api-key-var", "BENCH_API_KEY",
            "--sampling.max-tokens", "32", "-n", str(args.rollouts), "-r", "1", "-c", str(args.concurrency),
            "--no-rich", "--no-push", "--output-dir", str(out_dir), "--run.name", "bench",
        ]
    )  # fmt: skip
    sys.argv = [sys.argv[0], *argv]  # its vf-eval's parse, as in verifiers.v1.cli.eval.main
    config = cli(narrow_config(EvalConfig, argv))

    async def run() -> list[tuple[float, str | None]]:
        episodes = await run_eval(config)
        return [
            (sum(t.reward or 0.0 for t in ep.traces) / max(len(ep.traces), 1), _first_error(ep))
            for ep in episodes
        ]

    return run


def _first_error(episode) -> str | None:
    errors = list(episode.errors) + [e for t in episode.traces for e in t.errors]
    if errors:
        return f"{errors[0].type}: {errors[0].message}"[:500]
    return None if episode.ok else "episode not ok"


def env_table(args: argparse.Namespace) -> dict:
    return {
        "taskset": {"id": TASKSET_ID, "n": args.rollouts, "mcp": args.kind == "mcp"},
        "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 4},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["single", "mcp"], required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    sys.path.insert(0, str(TASKS_DIR))
    # for a toolset launched as `python -m <module>` (kept in front of ours' checkout, if set)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TASKS_DIR), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("BENCH_API_KEY", "sk-bench")

    import verifiers

    version = metadata.version("verifiers")
    ours = int(version.split(".")[0]) >= 1
    if args.kind == "mcp":
        why = mcp_unavailable()
        if why:
            print(
                json.dumps(
                    {"library": "ours" if ours else "original", "version": version, "unavailable": why}
                )
            )
            return
    with tempfile.TemporaryDirectory(prefix="vf-v1-bench-") as tmp:
        run = (prepare_ours if ours else prepare_original)(args, Path(tmp))
        cpu0 = _cpu()
        start = time.perf_counter()
        result = asyncio.run(run())
        seconds = time.perf_counter() - start
        cpu1 = _cpu()
        rows = read_traces(result) if isinstance(result, Path) else result
    own_cpu, kids_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    cpu = own_cpu + kids_cpu
    print(
        json.dumps(
            {
                "library": "ours" if ours else "original",
                "version": version,
                "module": verifiers.__file__,
                "kind": args.kind,
                "rollouts": len(rows),
                "seconds": seconds,
                "rollouts_per_s": len(rows) / seconds if seconds else 0.0,
                "cpu_s": cpu,
                "own_cpu_s": own_cpu,
                "children_cpu_s": kids_cpu,
                "rollouts_per_cpu_s": len(rows) / cpu if cpu else 0.0,
                "avg_reward": sum(r for r, _ in rows) / len(rows) if rows else 0.0,
                "errors": sum(1 for _, e in rows if e),
                "first_error": next((e for _, e in rows if e), None),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
