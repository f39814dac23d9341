"""Memory on long runs: peak RSS of a 20,000-rollout evaluation that saves its results to disk.

    .venv/bin/python benchmarks/memory.py [--rollouts 20000] [--kind single|tool] [--with-original]

Runs the rollout driver (``benchmarks/_rollout_driver.py``) against the fast scripted server with
``save_results=True`` into a scratch run folder and reports the driver process's peak RSS (target,
issue 2: under 500 MB), its rollouts/s, and checks that ``results.jsonl`` holds every rollout. The
environment's rows come from ``datasets`` (as environment packages build them), so the figure includes
pyarrow. ``--with-original`` also runs the original ``verifiers==0.3.0`` (slow: ~70 rollouts/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    OUR_PYTHON,
    add_priority_argument,
    ensure_peer_venv,
    fast_server,
    log,
    machine,
    run_json,
    set_priority,
    table,
)

DRIVER = str(BENCH_DIR / "_rollout_driver.py")


def count_results(folder: Path) -> tuple[int, int]:
    """(lines in the results.jsonl found under folder, its size in bytes)."""
    files = sorted(folder.rglob("results.jsonl"))
    if not files:
        return 0, 0
    with files[0].open("rb") as f:
        lines = sum(1 for line in f if line.strip())
    return lines, files[0].stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--kind", choices=["single", "tool"], default="single")
    parser.add_argument("--dataset", choices=["datasets", "list"], default="datasets")
    parser.add_argument("--with-original", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    add_priority_argument(parser)
    args = parser.parse_args()
    set_priority(args.nice)
    pythons = [("ours", str(OUR_PYTHON))]
    if args.with_original:
        pythons.append(("original 0.3.0", str(ensure_peer_venv())))
    log(f"machine: {machine()}")
    rows = []
    summary = {}
    with fast_server() as srv:
        for name, python in pythons:
            with tempfile.TemporaryDirectory(prefix="vf-mem-") as tmp:
                out_dir = Path(tmp) / "run"
                result = run_json(
                    [
                        python,
                        DRIVER,
                        "--kind",
                        args.kind,
                        "--base-url",
                        srv.base_url,
                        "--rollouts",
                        str(args.rollouts),
                        "--concurrency",
                        str(args.concurrency),
                        "--results-path",
                        str(out_dir),
                        "--dataset",
                        args.dataset,
                    ],
                    timeout=7200,
                )
                lines, size = count_results(Path(tmp))
            if result["rollouts"] != args.rollouts or lines != args.rollouts:
                raise RuntimeError(
                    f"{name}: {result['rollouts']} rollouts, {lines} lines saved (expected {args.rollouts})"
                )
            log(f"{name}: peak RSS {result['peak_rss_mb']:.0f} MB, {result['rollouts_per_s']:.0f} rollouts/s")
            summary[name] = {**result, "results_lines": lines, "results_mb": size / 2**20}
            rows.append([name, args.rollouts, result["peak_rss_mb"], result["rollouts_per_s"], size / 2**20])
    print(
        f"\n{args.rollouts:,} {args.kind} rollouts, {args.concurrency} concurrent, results saved ({machine()})\n"
    )
    print(table(["library", "rollouts", "peak RSS MB", "rollouts/s", "results.jsonl MB"], rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
