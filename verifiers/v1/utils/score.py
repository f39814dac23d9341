"""Scoring helpers that tasksets written for the original 0.3/0.4 import from
``verifiers.v1.utils.score``: the boxed-answer and judge-verdict readers (their home is
``verifiers.v1.judge``), an answer read from the runtime or the last reply, stdout comparison with
numeric tolerance (code tasks), and pytest's short test summary read into outcomes per test."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from verifiers.v1.judge import extract_boxed_answer, parse_judge_choice, verify_boxed_math_answer

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

__all__ = [
    "BOXED_START",
    "PYTEST_OUTCOMES",
    "compare_stdout_results",
    "extract_boxed_answer",
    "parse_judge_choice",
    "parse_pytest_outcomes",
    "read_answer_file_or_last_reply",
    "verify_boxed_math_answer",
]

BOXED_START = "\\boxed{"
PYTEST_OUTCOMES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
"""The outcome words of pytest's short test summary (``-rA``) lines."""

# terminal colour and cursor sequences (CSI ... final byte), which ``--color=yes`` output carries
ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_MAX_SCAN = 8 << 20  # characters of test output read at most (a hostile program can print gigabytes)


async def read_answer_file_or_last_reply(runtime, path: str, trace: Trace) -> str:
    """The text of ``path`` in the rollout's runtime, stripped; when it is missing, unreadable or
    blank, the trace's last reply. A task that lets the agent answer in a file or in chat reads
    both ways with this."""
    from verifiers.v1.errors import SandboxError

    try:
        data = await runtime.read(path)
    except (OSError, SandboxError):
        data = b""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else str(data or "")
    return text.strip() or trace.last_reply


def _tokens(text: str) -> tuple[list[str], list[str]]:
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    return lines, [tok for line in lines for tok in line.split()]


def compare_stdout_results(exec_stdout: str, expected: str, *, tolerance: float = 1e-3) -> bool:
    """Whether a program's stdout matches the expected output, the way code datasets judge it:
    equal after stripping; else equal line by line ignoring blank lines and surrounding blanks;
    else equal token by token; else the same number of tokens, all finite numbers, each within
    ``tolerance`` of its expected value."""
    if exec_stdout.strip() == expected.strip():
        return True
    got_lines, got = _tokens(exec_stdout)
    want_lines, want = _tokens(expected)
    if got_lines == want_lines or got == want:
        return True
    if not got or len(got) != len(want):
        return False
    try:
        pairs = [(Decimal(a), Decimal(b)) for a, b in zip(got, want, strict=True)]
    except (InvalidOperation, ValueError):
        return False
    if not all(a.is_finite() and b.is_finite() for a, b in pairs):
        return False
    limit = Decimal(str(tolerance))
    return all(abs(a - b) <= limit for a, b in pairs)


def _node_id(outcome: str, rest: str) -> str:
    """The test id of a summary line's remainder. FAILED/ERROR/XFAIL/XPASS rows append
    ``" - <reason>"``; a parametrised id may itself contain ``" - "`` inside its brackets, so the
    id is the shortest prefix before a ``" - "`` whose brackets balance."""
    if outcome in ("FAILED", "ERROR", "XFAIL", "XPASS") and " - " in rest:
        pieces = rest.split(" - ")
        for n in range(1, len(pieces)):
            head = " - ".join(pieces[:n])
            if head.count("[") == head.count("]"):
                return head.rstrip()
    return rest.rstrip()


def parse_pytest_outcomes(output: str | None) -> dict[str, str]:
    """Outcome per test id from pytest's short test summary lines (run pytest with ``-rA``):
    ``{"tests/test_x.py::test_a": "PASSED", ...}``. Colour codes are ignored; lines that are not
    summary rows (progress, tracebacks, skip reasons given by file and line) are skipped; a test
    named twice keeps its last outcome."""
    outcomes: dict[str, str] = {}
    text = ANSI_RE.sub("", (output or "")[-_MAX_SCAN:])
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or parts[0] not in PYTEST_OUTCOMES:
            continue
        outcome, rest = parts
        if rest.startswith("["):  # "SKIPPED [1] tests/x.py:3: reason": a location, not a test id
            continue
        outcomes[_node_id(outcome, rest)] = outcome
    return outcomes
