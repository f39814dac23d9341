"""python-tool: computation-heavy questions solved with a persistent, sandboxed Python tool.

Each question has an integer answer that is tedious or impossible to get by mental arithmetic (sums
of primes below 50,000, the last digits of a large Fibonacci number, divisor counts, ...). The model
gets one tool, ``python``, backed by a persistent interpreter in ``verifiers.sandbox`` (bubblewrap by
default): variables survive across calls within a rollout, the interpreter is killed when the
rollout ends (also on error or cancellation), and nothing the code does reaches the host.
"""

from __future__ import annotations

import math
import random
import re
import uuid
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from datasets import Dataset

import verifiers as vf

ENV_ID = "python-tool"

SYSTEM_PROMPT = """Answer the question exactly. You have a `python` tool that runs code in a persistent
Python interpreter (state is kept between calls; print what you want to see, or end a cell with an
expression). Use it for any computation. When you are done, reply without a tool call and give only
the final integer inside <answer></answer>."""

MAX_TOOL_OUTPUT = 4000


# --------------------------------------------------------------------------------------------------
# Problems: each returns (question, answer, reference code that prints the answer)
# --------------------------------------------------------------------------------------------------


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"
    for i in range(2, math.isqrt(n - 1) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(range(i * i, n, i)))
    return [i for i in range(n) if sieve[i]]


def _p_prime_sum(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(10_000, 80_000)
    return (f"What is the sum of all prime numbers below {n}?", sum(_primes_below(n)),
            f"n = {n}\ns = bytearray([1]) * n\ns[:2] = b'\\x00\\x00'\nfor i in range(2, int(n ** 0.5) + 1):\n"
            "    if s[i]:\n        s[i*i::i] = bytearray(len(range(i*i, n, i)))\nprint(sum(i for i in range(n) if s[i]))")


def _p_fib_tail(rng: random.Random) -> tuple[str, int, str]:
    n, d = rng.randint(300, 3000), rng.randint(6, 9)
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return (f"With F(0) = 0 and F(1) = 1, what number do the last {d} digits of the Fibonacci number F({n}) "
            f"form (as an integer, leading zeros dropped)?", a % 10**d,
            f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % 10**{d})")


def _p_divisors(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(10**7, 10**9)
    count, m, p = 1, n, 2
    while p * p <= m:
        e = 0
        while m % p == 0:
            m //= p
            e += 1
        count *= e + 1
        p += 1
    if m > 1:
        count *= 2
    return (f"How many positive divisors does {n} have?", count,
            f"n = {n}\nc, m, p = 1, n, 2\nwhile p * p <= m:\n    e = 0\n    while m % p == 0:\n        m //= p\n        e += 1\n"
            "    c *= e + 1\n    p += 1\nprint(c * (2 if m > 1 else 1))")


def _p_modpow(rng: random.Random) -> tuple[str, int, str]:
    a, b, m = rng.randint(2, 10**6), rng.randint(10**5, 10**9), rng.randint(10**6, 10**9)
    return (f"What is {a}^{b} mod {m}?", pow(a, b, m), f"print(pow({a}, {b}, {m}))")


def _p_digit_sum_count(rng: random.Random) -> tuple[str, int, str]:
    n, k = rng.randint(10**4, 2 * 10**5), rng.randint(10, 30)
    count = _digit_sum_count(n, k)
    return (f"How many integers from 1 to {n} (inclusive) have a digit sum of exactly {k}?", count,
            f"print(sum(1 for i in range(1, {n} + 1) if sum(map(int, str(i))) == {k}))")


def _digit_sum_count(n: int, k: int) -> int:
    """How many of 1..n have digit sum k (digit DP, so generation stays fast)."""
    digits = list(map(int, str(n)))

    @cache
    def walk(pos: int, remaining: int, tight: bool) -> int:
        if remaining < 0:
            return 0
        if pos == len(digits):
            return 1 if remaining == 0 else 0
        top = digits[pos] if tight else 9
        return sum(walk(pos + 1, remaining - d, tight and d == top) for d in range(top + 1))

    return walk(0, k, True) - (1 if k == 0 else 0)


def _p_lattice(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(12, 30), rng.randint(12, 30)
    return (f"How many shortest paths are there along grid lines from one corner of a {a} x {b} grid of squares "
            "to the opposite corner?", math.comb(a + b, a), f"import math\nprint(math.comb({a} + {b}, {a}))")


def _p_collatz(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(5_000, 30_000)
    lengths = {1: 0}
    best, best_len = 1, 0
    for s in range(1, n):
        path, x = [], s
        while x not in lengths:
            path.append(x)
            x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps = lengths[x]
        for y in reversed(path):
            steps += 1
            lengths[y] = steps
        if lengths[s] > best_len:
            best, best_len = s, lengths[s]
    return (f"Which starting number below {n} needs the most Collatz steps to reach 1 (halve even numbers, "
            "map odd x to 3x + 1)? If several tie, give the smallest.", best,
            f"best, bl = 1, 0\nfor s in range(1, {n}):\n    x, k = s, 0\n    while x != 1:\n"
            "        x = x // 2 if x % 2 == 0 else 3 * x + 1\n        k += 1\n    if k > bl:\n        best, bl = s, k\nprint(best)")


def _p_factorial_digits(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(100, 900)
    return (f"What is the sum of the decimal digits of {n}! ({n} factorial)?", sum(map(int, str(math.factorial(n)))),
            f"import math\nprint(sum(map(int, str(math.factorial({n})))))")


PROBLEMS: dict[str, Callable[[random.Random], tuple[str, int, str]]] = {
    "prime_sum": _p_prime_sum,
    "fibonacci_tail": _p_fib_tail,
    "divisor_count": _p_divisors,
    "modular_power": _p_modpow,
    "digit_sum_count": _p_digit_sum_count,
    "lattice_paths": _p_lattice,
    "collatz_longest": _p_collatz,
    "factorial_digit_sum": _p_factorial_digits,
}


def build_rows(n: int, seed: int, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
    chosen = list(kinds) if kinds else list(PROBLEMS)
    unknown = sorted(set(chosen) - set(PROBLEMS))
    if unknown:
        raise ValueError(f"unknown problem kinds {unknown}; choose from {list(PROBLEMS)}")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = chosen[i % len(chosen)]
        question, answer, code = PROBLEMS[kind](rng)
        rows.append({"question": question, "answer": str(answer), "task": ENV_ID,
                     "info": {"kind": kind, "reference_code": code}})
    return rows


# --------------------------------------------------------------------------------------------------
# Scoring (plain functions)
# --------------------------------------------------------------------------------------------------

def final_answer(completion: Any) -> str | None:
    """The last ``<answer>`` of the final assistant message, or None."""
    return vf.last_tag(completion)


def integer_match(predicted: str | None, answer: str) -> float:
    """1.0 when ``predicted`` is the reference integer (commas, spaces and a trailing '.' ignored).

    >>> integer_match("1,234", "1234"), integer_match("1234.", "1234"), integer_match("12", "1234")
    (1.0, 1.0, 0.0)
    """
    if not isinstance(predicted, str) or not isinstance(answer, str):
        return 0.0
    cleaned = re.sub(r"[\s,_]", "", predicted).rstrip(".")
    if not re.fullmatch(r"[+-]?\d{1,4000}", cleaned):
        return 0.0
    return 1.0 if int(cleaned) == int(answer) else 0.0


def correct_answer(completion: Any, answer: str, **_: Any) -> float:
    """Exact integer answer in ``<answer>`` tags."""
    return integer_match(final_answer(completion), answer)


def tool_calls_made(completion: Any, **_: Any) -> float:
    """Number of tool calls the model made (a metric)."""
    if not isinstance(completion, Sequence) or isinstance(completion, str):
        return 0.0
    total = 0
    for message in completion:
        try:
            if message.get("role") == "assistant":
                total += len(message.get("tool_calls") or [])
        except AttributeError:
            continue
    return float(total)


def format_result(result: Any) -> str:
    """What the model sees from one cell: stdout, the trailing expression, errors, kill reasons."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if getattr(result, "value", None) is not None:
        parts.append(result.value)
    if result.stderr:
        parts.append(f"[stderr]\n{result.stderr.rstrip()}")
    if result.killed:
        parts.append(f"[killed: {result.kill_reason}]")
    text = "\n".join(parts) or "(no output)"
    if len(text) > MAX_TOOL_OUTPUT:
        text = text[: MAX_TOOL_OUTPUT // 2] + "\n...[output truncated]...\n" + text[-MAX_TOOL_OUTPUT // 2 :]
    return text


# --------------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------------


class PythonToolEnv(vf.StatefulToolEnv):
    """A ``python`` tool backed by one persistent sandboxed interpreter per rollout."""

    def __init__(self, sandbox: Any = None, cell_timeout: float = 20.0, max_turns: int = 8,
                 warm_sandboxes: bool = True, **kwargs: Any) -> None:
        super().__init__(max_turns=max_turns, **kwargs)
        self._sandbox = sandbox
        self.cell_timeout = cell_timeout
        self.warm_sandboxes = warm_sandboxes
        # Sessions live here, keyed by an id kept in the state, so the state stays plain data.
        self._sessions: dict[str, Any] = {}
        self.add_tool(self.python, args_to_skip=["session_id"])

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from verifiers.sandbox import Sandbox

            self._sandbox = Sandbox(timeout=self.cell_timeout)
        return self._sandbox

    async def python(self, code: str, session_id: str) -> str:
        """Run Python code in a persistent interpreter and return its output.

        Args:
            code: Python source to run; variables and imports persist between calls.

        Returns:
            Printed output, the value of a trailing expression, and any error.
        """
        session = self._sessions.get(session_id)
        if session is None:
            return "Error: the Python session is closed."
        result = await session.run_python(code, timeout=self.cell_timeout)
        return format_result(result)

    async def setup_state(self, state: Any, **kwargs: Any) -> Any:
        session_id = uuid.uuid4().hex
        # warm: the rollout's interpreter starts in a pre-started sandbox, reset when handed back
        self._sessions[session_id] = self.sandbox.session(timeout=self.cell_timeout, warm=self.warm_sandboxes)
        state["python_session_id"] = session_id
        return state

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: Any,
                         **kwargs: Any) -> dict[str, Any]:
        if tool_name == "python":
            return {**tool_args, "session_id": state.get("python_session_id", "")}
        return tool_args

    @vf.cleanup
    async def close_session(self, state: Any, **kwargs: Any) -> None:
        """Kill the interpreter and delete its work dir when the rollout ends, however it ends."""
        session = self._sessions.pop(state.get("python_session_id", ""), None)
        if session is not None:
            await session.close()

    @vf.teardown
    async def close_sandboxes(self) -> None:
        """Close sessions of rollouts that never reached their cleanup, and stop the warm sandboxes."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            await session.close()
        if self._sandbox is not None:
            await self._sandbox.aclose()


def load_environment(
    num_train_examples: int = 400,
    num_eval_examples: int = 80,
    kinds: Sequence[str] | None = None,
    max_turns: int = 8,
    cell_timeout: float = 20.0,
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    sandbox: Any = None,
    warm_sandboxes: bool = True,
    **kwargs: Any,
) -> vf.Environment:
    """Build the python-tool environment.

    Args:
        num_train_examples: train questions.
        num_eval_examples: eval questions (different seed).
        kinds: problem kinds to use (default all: prime_sum, fibonacci_tail, divisor_count,
            modular_power, digit_sum_count, lattice_paths, collatz_longest, factorial_digit_sum).
        max_turns: model turns per rollout.
        cell_timeout: wall-clock seconds per tool call (a slower cell is killed and reported).
        seed: base seed.
        system_prompt: instructions shown to the model.
        sandbox: a ``verifiers.sandbox.Sandbox`` (default: the default backend).
        warm_sandboxes: each rollout's interpreter runs in a warm sandbox (pre-started, reset
            and reused after the rollout) where the backend can host them.
    """
    chosen = list(kinds) if kinds else None
    build_rows(1, seed, chosen)  # validate the kinds now, not on first dataset access
    rubric = vf.Rubric(funcs=[correct_answer, tool_calls_made], weights=[1.0, 0.0])
    return PythonToolEnv(
        sandbox=sandbox, cell_timeout=cell_timeout, max_turns=max_turns, warm_sandboxes=warm_sandboxes,
        dataset=lambda: Dataset.from_list(build_rows(num_train_examples, 2 * seed, chosen)),
        eval_dataset=lambda: Dataset.from_list(build_rows(num_eval_examples, 2 * seed + 1, chosen)),
        system_prompt=system_prompt, rubric=rubric, **kwargs,
    )
