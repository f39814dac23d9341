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
