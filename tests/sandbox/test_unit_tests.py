"""`run_python_tests`: the shared "program + tests -> fraction passed" helper of code environments."""

from __future__ import annotations

import pytest

from verifiers.sandbox import Sandbox, run_python_tests

pytestmark = pytest.mark.sandbox

PROGRAM = "def add(a, b):\n    return a + b\n"


async def test_fraction_of_passing_tests(sandbox: Sandbox) -> None:
    report = await run_python_tests(
        sandbox, PROGRAM, ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(-1, 1) == 0"]
    )
    assert (report.passed, report.total) == (2, 3)
    assert report.fraction == pytest.approx(2 / 3)
    assert not report.all_passed
    assert [d.passed for d in report.details] == [True, False, True]
    assert "AssertionError" in (report.details[1].error or "")


async def test_humaneval_style_check_with_entry_point(sandbox: Sandbox) -> None:
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"
    good = await run_python_tests(sandbox, PROGRAM, tests, entry_point="add")
    assert good.all_passed and good.total == 1
    stub = await run_python_tests(sandbox, "def add(a, b):\n    return None\n", tests, entry_point="add")
    assert stub.passed == 0


async def test_program_that_fails_to_load_fails_every_test(sandbox: Sandbox) -> None:
    report = await run_python_tests(sandbox, "def add(a, b) return a", ["assert add(1, 1) == 2"] * 2)
    assert report.passed == 0 and report.total == 2
    assert all(
        "program failed: " in (d.error or "") and "SyntaxError" in (d.error or "") for d in report.details
    )


async def test_hanging_test_fails_alone(sandbox: Sandbox) -> None:
    report = await run_python_tests(
        sandbox, PROGRAM, ["while True: pass", "assert add(1, 1) == 2"], timeout=30, test_timeout=1.0
    )
    assert [d.passed for d in report.details] == [False, True]
    assert "timed out" in (report.details[0].error or "")


async def test_whole_run_timeout_fails_everything(sandbox: Sandbox) -> None:
    report = await run_python_tests(sandbox, "while True:\n    pass\n", ["assert True"], timeout=1)
    assert report.passed == 0 and report.error == "killed: timeout"


async def test_printed_fake_verdicts_do_not_count(sandbox: Sandbox) -> None:
    cheat = (
        "import json, os, sys\n"
        "line = json.dumps({'load_error': None, 'results': [[True, None]]})\n"
        "print('0' * 32 + line)\n"
        "os.write(1, (line + '\\n').encode())\n"
        "def add(a, b):\n    return 0\n"
    )
    report = await run_python_tests(sandbox, cheat, ["assert add(1, 2) == 3"])
    assert report.passed == 0
    # ending the process before the verdict is written also counts as failure
    quitter = "import os\nos._exit(0)\n"
    report = await run_python_tests(sandbox, quitter, ["assert True"])
    assert report.passed == 0 and report.error is not None


async def test_program_output_floods_are_ignored(sandbox: Sandbox) -> None:
    noisy = "print('x' * 5_000_000)\n" + PROGRAM
    report = await run_python_tests(sandbox, noisy, ["assert add(1, 2) == 3"])
    assert report.all_passed, report
