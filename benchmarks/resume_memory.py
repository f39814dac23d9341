"""Peak memory of a resume over a large results.jsonl (issue 23, item 10): resume streams the file.

Writes a run folder whose ``results.jsonl`` holds N finished records of ``--record-kb`` each, then
resumes it with ``Environment.evaluate(..., resume=True)`` in a fresh subprocess (nothing is left to
run, so no model server is involved) and prints that process's peak RSS beside the file's size.
Run it with ``PYTHONPATH`` pointing at another checkout to compare versions:

    python benchmarks/resume_memory.py --size-mb 1200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = r"""
import asyncio, json, resource, sys
import verifiers as vf

folder, n = sys.argv[1], int(sys.argv[2])
rows = [{"question": f"q{i}", "answer": "ok"} for i in range(n)]
env = vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda **kw: 1.0]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = asyncio.run(env.evaluate("http://127.0.0.1:9/v1", "m", num_examples=-1, rollouts_per_example=1,
                               results_path=folder, resume=True))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rollouts": out["metadata"]["num_rollouts"], "rss_before_mb": before / 1024, "peak_rss_mb": peak / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--record-kb", type=int, default=100)
    args = parser.parse_args()
    n = max(1, args.size_mb * 1024 // args.record_kb)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        text = "x" * (args.record_kb * 1024)
        with open(path, "w") as fh:
            for i in range(n):
                fh.write(json.dumps({"example_id": i, "rollout_index": 0, "completion": text, "reward": 1.0}) + "\n")
        size_mb = path.stat().st_size / 2**20
        # cwd: the folder, so that PYTHONPATH (not the current checkout) decides which verifiers runs
        res = subprocess.run([sys.executable, "-c", DRIVER, tmp, str(n)], capture_output=True, text=True, check=True,
                             cwd=tmp)
        result = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"results.jsonl {size_mb:,.0f} MB, {n} records: resume peak RSS {result['peak_rss_mb']:,.0f} MB "
          f"(after import {result['rss_before_mb']:,.0f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
