"""Rollouts per second: our library vs the original ``verifiers==0.3.0``, same server, same run.

    .venv/bin/python benchmarks/rollouts.py [--rollouts 5000] [--peer-rollouts 2000] [--repeats 3]

A fast scripted OpenAI-compatible server (``verifiers.testing.fast_server``, its own process) answers
every chat request immediately, so the figures measure the client library: a single-turn
environment (one request per rollout) and a tool-using one (a tool call, the tool runs, then the
answer: two requests per rollout), both at 256 rollouts in flight. Each library runs the same driver
(``benchmarks/_rollout_driver.py``) in its own subprocess; the original is installed from PyPI into
``.venv-bench-verifiers-0.3.0`` on first use. The raw row is a bare aiohttp loop against the same
server (the ceiling on this machine; a tool rollout costs two requests so its ceiling is half).
Every run is checked: all rollouts rewarded 1.0 and the server saw the expected number of requests.
The figures are medians over ``--repeats`` rounds; each round runs every measurement once.

A second table divides by the CPU time of the driver process instead of wall time. Against an
instant server every client is CPU-bound, so this rate is what the library costs, and it stays
meaningful when other work on a shared machine steals cycles (wall-clock figures then drop for all
three alike, but by varying amounts from run to run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    OUR_PYTHON,
    PEER_VENV,
    REPO,
    add_priority_argument,
    ensure_peer_venv,
    fast_server,
    log,
    machine,
    median,
    run_json,
    set_priority,
    table,
)

DRIVER = str(BENCH_DIR / "_rollout_driver.py")
REQUESTS_PER_ROLLOUT = {"single": 1, "tool": 2}


def measure(python: str, kind: str, srv, rollouts: int, concurrency: int) -> dict:
    before = srv.requests()
    result = run_json(
        [
            python,
            DRIVER,
            "--kind",
            kind,
            "--base-url",
            srv.base_url,
            "--rollouts",
            str(rollouts),
            "--concurrency",
            str(concurrency),
        ]
    )
    sent = srv.requests() - before
    if kind == "raw":
        if result["requests"] != rollouts or sent != rollouts:
            raise RuntimeError(
                f"raw loop: expected {rollouts} requests, got {result['requests']} / server {sent}"
            )
        return result
    # each side must really have run its own library: the peer from its venv, ours from this repo
    module = Path(result["module"]).resolve()
    expected_root = PEER_VENV if result["library"] == "original" else REPO / "verifiers"
    if expected_root.resolve() not in module.parents or (python == str(OUR_PYTHON)) != (
        result["library"] == "ours"
    ):
        raise RuntimeError(f"{python} ran {result['library']} from {module}")
    expected = rollouts * REQUESTS_PER_ROLLOUT[kind]
    if result["rollouts"] != rollouts or sent != expected or result["avg_reward"] != 1.0:
        raise RuntimeError(
            f"{result['library']} {kind}: {result['rollouts']} rollouts, server saw {sent} requests "
            f"(expected {expected}), avg reward {result['avg_reward']}, errors {result['errors']}"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000, help="rollouts per measurement of our library")
    parser.add_argument(
        "--peer-rollouts",
        type=int,
        default=2000,
        help="rollouts per measurement of the original (it runs ~70/s; 2,000 is a stable rate)",
    )
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument(
        "--raw-requests", type=int, default=20000, help="requests of the bare aiohttp loop per round"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default="single,tool")
    parser.add_argument("--libraries", default="ours,original", help="which of ours,original to run")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    add_priority_argument(parser)
    args = parser.parse_args()
    set_priority(args.nice)
    kinds = [k for k in args.kinds.split(",") if k]

    libraries = {x for x in args.libraries.split(",") if x}
    peer_python = str(ensure_peer_venv()) if "original" in libraries else None
    ours_python = str(OUR_PYTHON) if "ours" in libraries else None
    runs: dict[str, list[dict]] = {}
    log(f"machine: {machine()}")
    with fast_server() as srv:
        for rep in range(args.repeats):
            for kind in kinds:
                if ours_python:
                    r = measure(ours_python, kind, srv, args.rollouts, args.concurrency)
                    runs.setdefault(f"ours/{kind}", []).append(r)
                    log(f"round {rep + 1} ours {kind}: {r['rollouts_per_s']:.0f} rollouts/s")
                if peer_python:
                    r = measure(peer_python, kind, srv, args.peer_rollouts, args.concurrency)
                    runs.setdefault(f"original/{kind}", []).append(r)
                    log(f"round {rep + 1} original {kind}: {r['rollouts_per_s']:.1f} rollouts/s")
            r = measure(str(OUR_PYTHON), "raw", srv, args.raw_requests, args.concurrency)
            runs.setdefault("raw", []).append(r)
            log(f"round {rep + 1} raw aiohttp: {r['requests_per_s']:.0f} requests/s")

    raw = median([r["requests_per_s"] for r in runs["raw"]])
    raw_cpu = median([r["requests_per_cpu_s"] for r in runs["raw"]])
    rows = []
    cpu_rows = []
    summary: dict[str, dict] = {
        "raw_requests_per_s": raw,
        "machine": machine(),
        "concurrency": args.concurrency,
    }
    for kind in kinds:
        ours_runs = [r["rollouts_per_s"] for r in runs.get(f"ours/{kind}", [])]
        orig_runs = [r["rollouts_per_s"] for r in runs.get(f"original/{kind}", [])]
        ours = median(ours_runs) if ours_runs else None
        orig = median(orig_runs) if orig_runs else None
        # ratio of medians, and the median of per-round ratios (each pair ran back to back, so load
        # from other work on a shared machine affects both sides of a pair alike)
        ratio = ours / orig if ours and orig else None
        paired = [a / b for a, b in zip(ours_runs, orig_runs, strict=False) if b]
        paired_ratio = median(paired) if paired else None
        ceiling = raw / REQUESTS_PER_ROLLOUT[kind]
        over_raw = ours / ceiling if ours else None
        label = {"single": "single-turn", "tool": "tool (2 turns)"}[kind]
        rows.append([label, ours, orig, ratio, paired_ratio, ceiling, over_raw])
        ours_cpu_runs = [r["rollouts_per_cpu_s"] for r in runs.get(f"ours/{kind}", [])]
        orig_cpu_runs = [r["rollouts_per_cpu_s"] for r in runs.get(f"original/{kind}", [])]
        ours_cpu = median(ours_cpu_runs) if ours_cpu_runs else None
        orig_cpu = median(orig_cpu_runs) if orig_cpu_runs else None
        ceiling_cpu = raw_cpu / REQUESTS_PER_ROLLOUT[kind]
        cpu_rows.append(
            [
                label,
                ours_cpu,
                orig_cpu,
                ours_cpu / orig_cpu if ours_cpu and orig_cpu else None,
                ceiling_cpu,
                ours_cpu / ceiling_cpu if ours_cpu else None,
            ]
        )
        summary[kind] = {
            "ours": ours,
            "original": orig,
            "ratio": ratio,
            "paired_ratio": paired_ratio,
            "raw_ceiling": ceiling,
            "ours_over_raw": over_raw,
            "ours_runs": ours_runs,
            "original_runs": orig_runs,
            "per_cpu_second": {
                "ours": ours_cpu,
                "original": orig_cpu,
                "ratio": ours_cpu / orig_cpu if ours_cpu and orig_cpu else None,
                "raw_ceiling": ceiling_cpu,
                "ours_over_raw": ours_cpu / ceiling_cpu if ours_cpu else None,
            },
        }
    print(f"\nRollouts/s at {args.concurrency} concurrent, median of {args.repeats} ({machine()})")
    print(
        f"ours: {args.rollouts} rollouts per run; original verifiers==0.3.0: {args.peer_rollouts}; "
        f"raw: bare aiohttp loop, {raw:,.0f} requests/s\n"
    )
    headers = ["environment", "ours", "original", "ours/original", "raw ceiling", "ours/raw"]
    print(table([*headers[:4], "same, per round", *headers[4:]], rows))
    print(f"\nThe same runs per CPU-second of the driver process (raw: {raw_cpu:,.0f} requests per CPU-s)\n")
    print(table(headers, cpu_rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
