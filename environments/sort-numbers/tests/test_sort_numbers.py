"""sort-numbers: seeded tasks, exact and partial scoring, bad configs refused, and a v1 eval end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sort_numbers as sn

from verifiers.testing import ScriptedServer


def _tasks(**cfg):
    return list(sn.SortNumbers(sn.SortConfig(**cfg)).load())


def test_same_seed_same_tasks_other_seed_other_tasks() -> None:
    a, b, c = _tasks(n=30, seed=3), _tasks(n=30, seed=3), _tasks(n=30, seed=4)
    assert [t.data.numbers for t in a] == [t.data.numbers for t in b]
    assert [t.data.numbers for t in a] != [t.data.numbers for t in c]
    for t in a:
        assert 3 <= len(t.data.numbers) <= 6 and all(-50 <= x <= 99 for x in t.data.numbers)
        assert t.data.prompt == " ".join(map(str, t.data.numbers))


def test_parse_numbers_reads_signs_and_separators() -> None:
    assert sn.parse_numbers("-7, 13 42.") == [-7, 13, 42]
    assert sn.parse_numbers("") == [] and sn.parse_numbers(None) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(("cfg", "message"), [({"min_len": 4, "max_len": 2}, "min_len"), ({"low": 5, "high": 1}, "low")])
def test_bad_ranges_are_refused(cfg: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tasks(**cfg)


def _reply_for(request: dict) -> str:
    prompt = request["messages"][-1]["content"]
    numbers = [int(x) for x in prompt.split()]
    if numbers[0] % 2:  # odd first number: a wrong answer (reversed), so both rewards occur
        return " ".join(map(str, sorted(numbers, reverse=True)))
    return " ".join(map(str, sorted(numbers)))


def test_vf_eval_scores_every_task(tmp_path: Path) -> None:
    """The real `vf eval` on this package against a scripted server: the reward is 1 exactly where the
    reply was sorted, and the metric gives partial credit."""
    with ScriptedServer(lambda req: _reply_for(req)) as server:
        out = tmp_path / "runs"
        proc = subprocess.run(
            [sys.executable, "-m", "verifiers.cli", "eval", "sort-numbers", "-m", "scripted", "-b", server.base_url,
             "-n", "12", "-r", "1", "-o", str(out)],
            capture_output=True, text=True, timeout=300,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (traces,) = list(out.glob("*/traces.jsonl"))
    rows = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(rows) == 12
    tasks = {t.data.idx: t.data.numbers for t in _tasks(n=12)}
    for row in rows:
        numbers = tasks[row["example_id"]]
        assert row["reward"] == (0.0 if numbers[0] % 2 else 1.0), row
        assert 0.0 <= row["metrics"]["in_place"] <= 1.0
    assert {r["reward"] for r in rows} == {0.0, 1.0}
