"""``verifiers.v1.utils.score``: the scoring helpers tasksets written for the original import.

Each helper is checked on cases written here, and the pure ones also against the original 0.4.0's
own functions (its released source, installed from the package index without dependencies by the
surface tests' machinery) on a few thousand generated inputs: the same answers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys

import pytest

import verifiers.v1 as vf
from tests.compat.test_classic_surface import _install
from verifiers.v1.errors import SandboxError
from verifiers.v1.utils import score

SUMMARY = """\
============================= test session starts ==============================
tests/test_a.py .F.sx                                                    [100%]
=================================== FAILURES ===================================
___________________________________ test_two ___________________________________
    def test_two():
>       assert add(1, 1) == 3
E       assert 2 == 3
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
\x1b[31mFAILED\x1b[0m tests/test_a.py::test_two - assert 2 == 3
PASSED tests/test_a.py::test_param[a - b]
FAILED tests/test_a.py::test_param[c - d] - ValueError: x - y
SKIPPED [1] tests/test_a.py:20: no network
XFAIL tests/test_a.py::test_known - reason: flaky
ERROR tests/test_b.py - ImportError: cannot import name 'f'
=================== 1 failed, 2 passed, 1 skipped, 1 xfailed ===================
"""


def test_parse_pytest_outcomes_reads_the_short_summary() -> None:
    assert score.parse_pytest_outcomes(SUMMARY) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
        "tests/test_a.py::test_param[a - b]": "PASSED",
        "tests/test_a.py::test_param[c - d]": "FAILED",
        "tests/test_a.py::test_known": "XFAIL",
        "tests/test_b.py": "ERROR",
    }
    assert score.parse_pytest_outcomes(None) == {} and score.parse_pytest_outcomes("") == {}


def test_parse_pytest_outcomes_on_a_huge_hostile_output_stays_bounded() -> None:
    junk = "PASSED " + "x" * (20 << 20) + "\n"  # one 20 MB line, then the real summary
    out = score.parse_pytest_outcomes(junk + "PASSED tests/t.py::test_ok\n")
    assert out == {"tests/t.py::test_ok": "PASSED"}


@pytest.mark.parametrize(
    ("got", "want", "same"),
    [
        ("1 2 3\n", "1 2 3", True),
        ("1\n\n2\n", "1\n2", True),
        ("1 2\n3", "1\n2 3", True),
        ("0.3333333", "0.333", True),
        ("0.34", "0.333", False),
        ("1 2", "1 2 3", False),
        ("nan", "nan", True),  # equal as text
        ("nan 1", "nan 2", False),  # not finite: no tolerance
        ("abc", "abd", False),
        ("", "", True),
        ("", "0", False),
    ],
)
def test_compare_stdout_results(got, want, same) -> None:
    assert score.compare_stdout_results(got, want) is same
    assert vf.compare_stdout_results is score.compare_stdout_results


class _Runtime:
    def __init__(self, result):
        self.result = result

    async def read(self, path):
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


class _Trace:
    last_reply = "from the chat"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (b"  42\n", "42"),
        (b"\xff\xfe7", "\ufffd\ufffd7"),
        (b"   ", "from the chat"),
        (FileNotFoundError("answer.txt"), "from the chat"),
        (SandboxError("the box is gone"), "from the chat"),
    ],
)
def test_read_answer_file_or_last_reply(result, expected) -> None:
    got = asyncio.run(score.read_answer_file_or_last_reply(_Runtime(result), "answer.txt", _Trace()))
    assert got == expected


def test_read_answer_file_or_last_reply_does_not_hide_other_failures() -> None:
    with pytest.raises(RuntimeError):
        asyncio.run(score.read_answer_file_or_last_reply(_Runtime(RuntimeError("bug")), "a", _Trace()))


def _original_score_module():
    root = _install("0.4.0")
    spec = importlib.util.spec_from_file_location("_original_v1_score", root / "v1" / "utils" / "score.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def _random_summary(rng: random.Random) -> str:
    words = ["PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS", "passed", "\x1b[32mPASSED\x1b[0m", "E", ">"]
    ids = ["t.py::a", "t.py::b[x - y]", "t.py::c[1]", "[2] t.py:3: why", "t.py", "t.py::d[a - b - c]"]
    tails = ["", " - boom", " - a - b", "   ", " - [x]"]
    lines = []
    for _ in range(rng.randint(0, 8)):
        lines.append(" " * rng.randint(0, 2) + rng.choice(words) + " " * rng.randint(0, 2) + rng.choice(ids) + rng.choice(tails))
    return "\n".join(lines)


def _random_stdout(rng: random.Random) -> str:
    tokens = ["1", "1.0", "1.0004", "2", "-0", "0.333", "1e3", "1000", "nan", "inf", "x", "", "\n", " ", "\t"]
    return "".join(rng.choice(tokens) + rng.choice([" ", "\n", ""]) for _ in range(rng.randint(0, 6)))


def test_the_pure_helpers_answer_as_the_original_does() -> None:
    theirs = _original_score_module()
    rng = random.Random(20261206)
    for _ in range(3000):
        text = _random_summary(rng)
        assert score.parse_pytest_outcomes(text) == theirs.parse_pytest_outcomes(text), text
        a, b = _random_stdout(rng), _random_stdout(rng)
        assert score.compare_stdout_results(a, b) == theirs.compare_stdout_results(a, b), (a, b)
        boxed = rng.choice(["", "\\boxed{", "}", "{", "x", "\\boxed{1}", "\\boxed{\\frac{1}{2}}"])
        text = "".join(rng.choice([boxed, "a", "{", "}"]) for _ in range(rng.randint(0, 5)))
        for strict in (False, True):
            assert score.extract_boxed_answer(text, strict) == theirs.extract_boxed_answer(text, strict), text
