"""What a newcomer reads: help at 80 columns, hints that say what to do next, summaries that explain
themselves. Every command runs as a real `vf` subprocess."""

from __future__ import annotations

import re

from tests.cli.helpers import run_vf
from verifiers.cli.eval_cmd import BUILTIN_DEFAULTS


def test_eval_help_at_80_columns_shows_every_flag_whole_and_the_defaults():
    from typer.main import get_command

    from verifiers.cli.main import app

    proc = run_vf("eval", "--help", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    command = get_command(app).commands["eval"]  # type: ignore[attr-defined]
    flags = [opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")]
    assert len(flags) > 30
    for flag in flags:  # each one whole, followed by a space, comma, slash or end of line
        assert re.search(rf"(^|[\s,/]){re.escape(flag)}([\s,]|$)", out, re.M), flag
    assert f"default {BUILTIN_DEFAULTS['num_examples']}," in out
    assert f"default {BUILTIN_DEFAULTS['rollouts_per_example']}," in out
    assert f"default {BUILTIN_DEFAULTS['max_concurrent']})" in out


def test_the_docs_give_the_tiny_models_real_parameter_count():
    from pathlib import Path

    from verifiers.serving.tiny_model import TinyModelSpec, parameter_count

    repo = Path(__file__).resolve().parents[2]
    real = f"{parameter_count(TinyModelSpec()) / 1e6:.2f}"  # what `vf model tiny` prints, in millions
    stated = []
    for rel in ("README.md", "docs/architecture.md", "verifiers/train/README.md", "examples/tiny.toml",
                "benchmarks/train.py"):
        text = (repo / rel).read_text()
        stated += [(rel, m) for m in re.findall(r"(\d+\.\d+) M[- ]param", text) if m.startswith("0.")]
    assert stated and all(m == real for _rel, m in stated), (real, stated)


def _saved_run(folder, **metadata):
    import json

    folder.mkdir(parents=True)
    base = {"env_id": "wordle", "model": "tiny", "num_rollouts": 4, "num_examples": 2, "rollouts_per_example": 2,
            "avg_reward": 0.5, "num_errors": 0, "finished_at": "2026-12-03T16:00:00"}
    (folder / "metadata.json").write_text(json.dumps({**base, **metadata}))
    (folder / "results.jsonl").write_text("")
    return folder


def test_vf_results_lists_run_ids_whole_at_80_columns(tmp_path):
    import io

    from rich.console import Console

    from verifiers.cli.results_cmd import show_results

    ids = ["wordle--tiny/20261203-164512-a1b2c3", "math-problems--some-org--a-long-model-name/20261203-170001-d4e5f6"]
    for run_id in ids:
        _saved_run(tmp_path / "evals" / run_id, stop_conditions={"completed": 3, "prompt_too_long": 1})
    proc = run_vf("results", str(tmp_path / "evals"), env={"COLUMNS": "80"})  # a pipe
    assert proc.returncode == 0, proc.stderr
    for run_id in ids:
        assert any(line.startswith(run_id + "\t") for line in proc.stdout.splitlines()), proc.stdout
    # a terminal 80 columns wide: each id still on one line, whole
    for width in (80, 200):
        buf = io.StringIO()
        show_results(tmp_path / "evals", console=Console(file=buf, force_terminal=True, width=width, color_system=None))
        for run_id in ids:
            assert run_id in buf.getvalue(), (width, buf.getvalue())


def test_the_summary_says_what_truncated_means(tmp_path):
    run = _saved_run(tmp_path / "run", stop_conditions={"completed": 2, "prompt_too_long": 2}, num_truncated=2)
    proc = run_vf("results", str(run), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "truncated" in line)
    assert "(2 truncated: ended by a limit (context length, token budget or time), not by the environment)" in line
