"""Start-up cost: ``import verifiers`` plus building an environment, ours vs the original.

    .venv/bin/python benchmarks/import_time.py [--repeats 7]

Each measurement is a fresh interpreter (run from a scratch directory, no PYTHONPATH) that imports
``verifiers``, builds a SingleTurnEnv with a rubric over 100 rows, and reports the time from just
before the import to just after the environment exists, its resident memory then (VmRSS) and the
whole process's wall time (interpreter start-up included). The original ``verifiers==0.3.0`` runs in
``.venv-bench-verifiers-0.3.0`` (installed on first use). An environment package normally builds its
rows with ``datasets``; ours also accepts a plain list of dicts, which keeps ``datasets`` (pyarrow,
pandas) out of the process, so ours is measured both ways and the original with ``datasets``.
Figures are medians over ``--repeats`` runs. Target (issue 2): under 0.5 s and 80 MB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    OUR_PYTHON,
    _apply_priority,
    add_priority_argument,
    clean_env,
    ensure_peer_venv,
    log,
    machine,
    median,
    set_priority,
    table,
)

PROBE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import verifiers as vf
t_import = time.perf_counter() - t0
rows = [{"question": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(100)]
if sys.argv[1] == "datasets":
    from datasets import Dataset
    rows = Dataset.from_list(rows)
def correct(completion, answer, **kwargs):
    return 1.0 if answer in str(completion) else 0.0
env = vf.SingleTurnEnv(dataset=rows, eval_dataset=rows, system_prompt="Answer.",
                       rubric=vf.Rubric(funcs=[correct], weights=[1.0]))
t_total = time.perf_counter() - t0
rss = 0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
heavy = sorted(m for m in ("datasets", "pyarrow", "pandas", "torch", "transformers", "openai", "math_verify")
               if m in sys.modules)
print(json.dumps({"import_s": t_import, "import_build_s": t_total, "rss_mb": rss,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "heavy_modules": heavy, "module": vf.__file__}))
"""


def probe(python: str, dataset: str) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vf-import-") as cwd:
        start = time.perf_counter()
        proc = subprocess.run(
            [python, "-c", PROBE, dataset],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_apply_priority,
        )
        wall = time.perf_counter() - start
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"probe failed under {python} ({dataset}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1])
    result["process_s"] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--libraries", default="ours,original")
    parser.add_argument("--json", type=Path, default=None)
    add_priority_argument(parser)
    args = parser.parse_args()
    set_priority(args.nice)
    libraries = {x for x in args.libraries.split(",") if x}
    cases: list[tuple[str, str, str]] = []
    if "ours" in libraries:
        cases += [
            ("ours, list rows", str(OUR_PYTHON), "list"),
            ("ours, datasets.Dataset", str(OUR_PYTHON), "datasets"),
        ]
    if "original" in libraries:
        cases.append(("original 0.3.0, datasets.Dataset", str(ensure_peer_venv()), "datasets"))
    results: dict[str, list[dict]] = {name: [] for name, _, _ in cases}
    log(f"machine: {machine()}")
    for rep in range(args.repeats):  # interleaved, so load changes hit every case alike
        for name, python, dataset in cases:
            results[name].append(probe(python, dataset))
        log(f"round {rep + 1}/{args.repeats} done")
    rows = []
    summary = {}
    for name, runs in results.items():
        row = {
            "import_s": median([r["import_s"] for r in runs]),
            "import_build_s": median([r["import_build_s"] for r in runs]),
            "process_s": median([r["process_s"] for r in runs]),
            "rss_mb": median([r["rss_mb"] for r in runs]),
            "heavy_modules": runs[-1]["heavy_modules"],
        }
        summary[name] = row
        rows.append(
            [
                name,
                row["import_s"],
                row["import_build_s"],
                row["process_s"],
                row["rss_mb"],
                ",".join(row["heavy_modules"]) or "-",
            ]
        )
    print(f"\nimport verifiers + build a SingleTurnEnv, median of {args.repeats} ({machine()})\n")
    print(table(["case", "import s", "import+build s", "process s", "RSS MB", "heavy modules loaded"], rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
