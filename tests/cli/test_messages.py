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
