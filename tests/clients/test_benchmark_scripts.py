"""The benchmark scripts run end to end (small sizes, our library only; the peer install is skipped
here because it needs the network and minutes, and the figures are not asserted: they are not tests
of speed, only of the harness that measures it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, tmp_path: Path) -> dict:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "|" in proc.stdout  # the printed table
    return json.loads(out.read_text())


def test_rollouts_benchmark_harness(tmp_path):
    figures = run(
        "rollouts.py",
        "--rollouts",
        "300",
        "--repeats",
        "1",
        "--concurrency",
        "64",
        "--libraries",
        "ours",
        "--raw-mcp-rollouts",
        "200",
        tmp_path=tmp_path,
    )
    assert figures["raw_requests_per_s"] > 0
    for kind in ("single", "tool"):
        assert figures[kind]["ours"] > 0
        assert figures[kind]["original"] is None and figures[kind]["ours_over_raw"] > 0
    # the v1 rows: our verifiers.v1 on the benchmark's own taskset (the driver checked every
    # rollout's reward and the server's request count); the MCP row runs or says why it cannot
    v1 = figures["v1"]["per_cpu_second"]
    assert v1["ours"] > 0 and v1["original"] is None and v1["ours_over_raw"] > 0
    # the floor: the v1 records alone on our engine (no API layer; the driver checked every reward
    # and the server's request count), the bound of the v1 row
    floor = figures["v1-floor"]["per_cpu_second"]
    assert floor["ours"] > 0 and floor["original"] is None and floor["ours_over_raw"] > 0
    mcp = figures["v1-mcp"]
    if mcp["per_cpu_second"]["ours"] is None:
        assert mcp["unavailable"]["ours"]  # no figures, and the reason why
    else:
        assert mcp["per_cpu_second"]["ours"] > 0 and not mcp["unavailable"]
        # its ceiling is the bare MCP loop (model requests plus a bare tools/call to the same tool
        # server, checked by the harness), which costs more than the two model requests alone
        assert 0 < mcp["per_cpu_second"]["raw_ceiling"] < figures["v1"]["per_cpu_second"]["raw_ceiling"] / 2


def test_memory_benchmark_harness(tmp_path):
    figures = run("memory.py", "--rollouts", "300", "--dataset", "list", tmp_path=tmp_path)
    ours = figures["ours"]
    assert ours["results_lines"] == 300 and ours["peak_rss_mb"] > 0


def test_import_time_benchmark_harness(tmp_path):
    figures = run("import_time.py", "--repeats", "1", "--libraries", "ours", tmp_path=tmp_path)
    row = figures["ours, list rows"]
    assert row["heavy_modules"] == []  # building an env from plain rows pulls no datasets/torch/openai
    assert row["import_build_s"] > 0
    v1 = figures["ours v1"]  # verifiers.v1 + a taskset of this checkout
    assert v1["heavy_modules"] == [] and v1["import_build_s"] > 0


def test_hot_path_benchmark_harness(tmp_path):
    figures = run("hot_path.py", "--rollouts", "40", "--repeats", "1", tmp_path=tmp_path)
    # each kind ran its rollouts in process, every one rewarded (the child exits non-zero otherwise)
    assert figures["v1"]["cpu_us"] > 0 and figures["classic"]["cpu_us"] > 0
    assert figures["v1_over_classic_cpu"] > 0


def test_make_bench_and_the_readme_list_every_benchmark_script():
    """`make bench` runs every script in benchmarks/ (the original's memory figure needs
    --with-original), and the README's layout names each one."""
    import re

    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))
    makefile = (REPO / "Makefile").read_text()
    bench = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    run_lines = re.findall(r"benchmarks/(\w+\.py)(.*)", bench)
    assert sorted(name for name, _args in run_lines) == scripts
    assert "--with-original" in dict(run_lines)["memory.py"]
    readme = (REPO / "README.md").read_text()
    layout = next(line for line in readme.splitlines() if line.startswith("benchmarks/ "))
    assert sorted(re.findall(r"\w+\.py", layout)) == scripts


def test_train_benchmark_rows_are_medians_and_a_run_that_missed_the_target_ranks_last():
    """benchmarks/train.py's repeated agentic rounds: a row is the median run's figures, a run that
    never reached the target counts as slower than any that did (a median of misses is a miss), and
    every run's time to the target is listed beside it."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.train import median_row
    finally:
        sys.path.remove(str(REPO))

    def run(t, steps, s_per_step):
        return {"time_to_target_s": t, "steps_to_target": steps, "s_per_step": s_per_step, "cpu_s": 10.0}

    row = median_row("x", [run(None, None, 2.0), run(30.0, 15, 1.5), run(20.0, 12, 1.0)])
    assert (row["time_to_target_s"], row["steps_to_target"], row["s_per_step"]) == (30.0, 15, 1.5)
    assert row["each_time_to_target_s"] == "-/30/20" and row["each_steps_to_target"] == "-/15/12"
    row = median_row("x", [run(None, None, 2.0), run(None, None, 2.2), run(20.0, 12, 1.0)])
    assert row["time_to_target_s"] is None and row["steps_to_target"] is None
    assert median_row("x", [run(40.0, 20, 3.0)])["time_to_target_s"] == 40.0
