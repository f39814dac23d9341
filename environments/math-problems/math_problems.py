"""math-problems: verified math with answers in ``\\boxed{}``.

Rows come from two offline sources: our own procedural generators (arithmetic, linear equations,
fraction sums, quadratics, 2x2 linear systems) and a set of reasoning-gym math families. The final
boxed answer is compared with the reference by math-verify (symbolic equivalence, so ``0.5`` and
``\\frac{1}{2}`` agree); reasoning-gym rows additionally accept what the family's own checker accepts
with full marks, because some of their answers (e.g. ``2 × 3 × 5``) are not plain numbers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from datasets import Dataset

import verifiers as vf

ENV_ID = "math-problems"

SYSTEM_PROMPT = (
    "Solve the math problem. Reason step by step, then give the final answer alone inside "
    "\\boxed{}, for example \\boxed{42} or \\boxed{\\frac{3}{4}}."
)

LEVELS = {"easy": 1, "medium": 2, "hard": 3}

# Answers longer than this are not handed to sympy: a pathological expression can make parsing or
# equivalence checking run for minutes, and no correct answer in this environment is that long.
MAX_ANSWER_CHARS = 300
# Seconds allowed for one math-verify comparison (its own signal-based timeout cannot run off the
# main thread, so it is switched off and this one is enforced around the call instead).
VERIFY_TIMEOUT_S = 5.0

logging.getLogger("math_verify").setLevel(logging.ERROR)

# --------------------------------------------------------------------------------------------------
# Procedural generators. Each takes (rng, level) and returns (question, answer) with the answer in a
# form math-verify parses (an integer or a reduced fraction a/b).
# --------------------------------------------------------------------------------------------------


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _terms(terms: Sequence[tuple[int, str]]) -> str:
    """Format ``[(3, "x"), (-1, "y"), (5, "")]`` as ``3x - y + 5`` (zero terms dropped)."""
    out = ""
    for coef, var in terms:
        if coef == 0:
            continue
        mag = abs(coef)
        body = f"{'' if (mag == 1 and var) else mag}{var}"
        if not out:
            out = f"-{body}" if coef < 0 else body
        else:
            out += f" {'-' if coef < 0 else '+'} {body}"
    return out or "0"


def _gen_arithmetic(rng: random.Random, level: int) -> tuple[str, str]:
    hi = (9, 50, 200)[level - 1]
    n_terms = rng.randint(3, 3 + level)
    expr = str(rng.randint(1, hi))
    for _ in range(n_terms - 1):
        op = rng.choice(["+", "-", "*"])
        term = str(rng.randint(1, hi if op != "*" else max(9, hi // 10)))
        if level >= 2 and rng.random() < 0.3:
            expr = f"({expr})"
        expr = f"{expr} {op} {term}"
    value = eval(expr, {"__builtins__": {}}, {})  # our own generated digits and operators only
    return f"Compute the value of {expr}.", str(value)


def _gen_linear_equation(rng: random.Random, level: int) -> tuple[str, str]:
    hi = (9, 20, 60)[level - 1]
    a = rng.choice([i for i in range(-hi, hi + 1) if i not in (0,)])
    x = Fraction(rng.randint(-hi, hi), 1 if level == 1 else rng.randint(1, 4))
    b = rng.randint(-hi, hi)
    c_coef = rng.randint(-hi, hi) if level == 3 else 0
    if c_coef == a:
        c_coef += 1
    # a*x + b = c_coef*x + d  =>  d = (a - c_coef) * x + b
    d = (a - c_coef) * x + b
    if d.denominator != 1:
        # Keep the printed equation integral: scale every coefficient by the denominator.
        k = d.denominator
        a, b, c_coef, d = a * k, b * k, c_coef * k, d * k
    lhs = _terms([(a, "x"), (b, "")])
    rhs = _terms([(c_coef, "x"), (int(d), "")])
    return f"Solve for x: {lhs} = {rhs}.", _fmt(x)


def _gen_fraction_sum(rng: random.Random, level: int) -> tuple[str, str]:
    hi = (6, 12, 30)[level - 1]
    n = 2 if level < 3 else 3
    pairs = [(rng.randint(1, hi), rng.randint(2, hi)) for _ in range(n)]
    ops = [rng.choice(["+", "-"]) for _ in range(n - 1)]
    total = Fraction(*pairs[0])
    text = f"{pairs[0][0]}/{pairs[0][1]}"
    for op, (num, den) in zip(ops, pairs[1:], strict=True):
        total = total + Fraction(num, den) if op == "+" else total - Fraction(num, den)
        text += f" {op} {num}/{den}"
    return f"Compute {text} and give the result as a reduced fraction (or an integer).", _fmt(total)


def _gen_quadratic(rng: random.Random, level: int) -> tuple[str, str]:
    hi = (6, 12, 25)[level - 1]
    r1, r2 = rng.randint(-hi, hi), rng.randint(-hi, hi)
    lead = 1 if level < 3 else rng.randint(1, 3)
    b, c = -lead * (r1 + r2), lead * r1 * r2
    poly = _terms([(lead, "x^2"), (b, "x"), (c, "")])
    return f"Find the larger root of {poly} = 0.", str(max(r1, r2))


def _gen_linear_system(rng: random.Random, level: int) -> tuple[str, str]:
    hi = (5, 10, 20)[level - 1]
    while True:
        a, b, c, d = (rng.choice([v for v in range(-hi, hi + 1) if v]) for _ in range(4))
        if a * d - b * c != 0:
            break
    x, y = rng.randint(-hi, hi), rng.randint(-hi, hi)
    e, f = a * x + b * y, c * x + d * y
    eq1 = f"{_terms([(a, 'x'), (b, 'y')])} = {e}"
    eq2 = f"{_terms([(c, 'x'), (d, 'y')])} = {f}"
    return f"Solve the system {eq1} and {eq2}. What is x + y?", str(x + y)


PROCEDURAL: dict[str, Callable[[random.Random, int], tuple[str, str]]] = {
    "arithmetic": _gen_arithmetic,
    "linear_equation": _gen_linear_equation,
    "fraction_sum": _gen_fraction_sum,
    "quadratic": _gen_quadratic,
    "linear_system": _gen_linear_system,
}

# reasoning-gym math families whose answers are numbers or simple fractions, with the config
# overrides per level (the family defaults are used where a level has no entry).
RG_FAMILIES: dict[str, dict[int, dict[str, Any]]] = {
    "basic_arithmetic": {1: {"max_terms": 3, "max_digits": 2}, 3: {"min_terms": 4, "max_terms": 6}},
    "chain_sum": {1: {"max_terms": 3, "max_digits": 2}, 3: {"min_terms": 5, "max_terms": 7}},
    "simple_equations": {},
    "fraction_simplification": {},
    "gcd": {},
    "lcm": {},
    "products": {},
    "gsm_symbolic": {},
    "leg_counting": {},
    "count_primes": {},
    "simple_geometry": {},
    "dice": {},
}

DEFAULT_SOURCES: tuple[str, ...] = (*PROCEDURAL, *RG_FAMILIES)

# --------------------------------------------------------------------------------------------------
# Answer extraction and checking (plain functions, usable outside any environment)
# --------------------------------------------------------------------------------------------------


def extract_boxed(text: str | None) -> str | None:
    """Return the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, or None.

    Braces are matched, so nested groups survive:

    >>> extract_boxed(r"so \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_boxed("no box") is None
    True
    """
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def _math_equal_sync(gold: str, predicted: str) -> bool:
    import math_verify

    gold_parsed = math_verify.parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = math_verify.parse(f"\\boxed{{{predicted}}}", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=None))


def math_equal(gold: str, predicted: str | None) -> bool:
    """Whether ``predicted`` is mathematically equal to ``gold`` (never raises).

    >>> math_equal("1/2", "0.5"), math_equal("3", "4"), math_equal("3", None)
    (True, False, False)
    """
    if not predicted or len(predicted) > MAX_ANSWER_CHARS:
        return False
    try:
        return _math_equal_sync(gold.strip().strip("$"), predicted)
    except Exception:
        return False


@lru_cache(maxsize=64)
def _rg_dataset(family: str, seed: int, size: int, config_json: str) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(family, seed=seed, size=size, **json.loads(config_json))


@lru_cache(maxsize=8192)
def _entry(family: str, seed: int, size: int, config_json: str, index: int) -> dict[str, Any]:
    """One generated entry, cached: scoring a rollout must not regenerate its puzzle (reasoning-gym
    builds entries on access, and some families take 0.1 s or more per entry)."""
    return _rg_dataset(family, seed, size, config_json)[index]


def rg_score(info: dict[str, Any], predicted: str) -> float:
    """The reasoning-gym checker's score for ``predicted`` on the row described by ``info``.

    The entry is regenerated from (family, seed, size, config, index) rather than stored, since
    the checkers need metadata that does not serialise into a dataset column.
    """
    try:
        ds = _rg_dataset(info["family"], int(info["seed"]), int(info["size"]), info["config"])
        entry = _entry(info["family"], int(info["seed"]), int(info["size"]), info["config"], int(info["index"]))
        return float(ds.score_answer(predicted, entry))
    except Exception:
        return 0.0


def score_answer(predicted: str | None, answer: str, info: Any = None) -> float:
    """1.0 when ``predicted`` (already extracted from the box) is correct for the row, else 0.0."""
    if predicted is None or not isinstance(answer, str):
        return 0.0
    if math_equal(answer, predicted):
        return 1.0
    meta = vf.parse_info(info)
    if meta.get("source") == "reasoning_gym" and rg_score(meta, predicted) >= 1.0:
        return 1.0
    return 0.0


# --------------------------------------------------------------------------------------------------
# Dataset building
# --------------------------------------------------------------------------------------------------


def _level(difficulty: str | int) -> int:
    if isinstance(difficulty, int) and 1 <= difficulty <= 3:
        return difficulty
    if isinstance(difficulty, str) and difficulty in LEVELS:
        return LEVELS[difficulty]
    raise ValueError(f"difficulty must be one of {list(LEVELS)} or 1-3, got {difficulty!r}")


def build_rows(sources: Sequence[str], num_examples: int, level: int, seed: int) -> list[dict[str, Any]]:
    """Generate ``num_examples`` rows spread round-robin over ``sources``, deterministic in ``seed``."""
    unknown = [s for s in sources if s not in PROCEDURAL and s not in RG_FAMILIES]
    if unknown:
        raise ValueError(f"unknown sources {unknown}; choose from {list(DEFAULT_SOURCES)}")
    if not sources:
        raise ValueError("sources must not be empty")
    per_source = {s: num_examples // len(sources) for s in sources}
    for s in list(sources)[: num_examples % len(sources)]:
        per_source[s] += 1
    rows: list[dict[str, Any]] = []
    for idx, source in enumerate(sources):
        count = per_source[source]
        if count == 0:
            continue
        source_seed = seed * 1000 + idx
        if source in PROCEDURAL:
            rng = random.Random(source_seed)
            for _ in range(count):
                question, answer = PROCEDURAL[source](rng, level)
                rows.append(_row(question, answer, source, {"source": "procedural", "level": level}))
        else:
            config = json.dumps(RG_FAMILIES[source].get(level, {}), sort_keys=True)
            for i in range(count):
                entry = _entry(source, source_seed, count, config, i)
                meta = {"source": "reasoning_gym", "seed": source_seed, "size": count, "config": config,
                        "index": i, "level": level}
                rows.append(_row(entry["question"], str(entry["answer"]), source, meta))
    random.Random(seed).shuffle(rows)
    return rows


def _row(question: str, answer: str, family: str, meta: dict[str, Any]) -> dict[str, Any]:
    info = {"source": meta["source"], "family": family, "seed": meta.get("seed", -1),
            "size": meta.get("size", -1), "config": meta.get("config", "{}"), "index": meta.get("index", -1),
            "difficulty": meta.get("level", 0)}
    return {"question": question, "answer": answer, "task": ENV_ID, "info": info}


# --------------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------------


async def correct_answer(completion: Any, answer: str, info: Any = None, **_: Any) -> float:
    """1.0 if the last boxed answer is correct (math-verify, or the family's own checker)."""
    predicted = extract_boxed(vf.completion_text(completion))
    if predicted is None:
        return 0.0
    try:
        async with asyncio.timeout(VERIFY_TIMEOUT_S):  # not asyncio.wait_for: 3.11's loses a cancellation
            return await asyncio.to_thread(score_answer, predicted, answer, info)
    except TimeoutError:
        return 0.0


def boxed_format(completion: Any, **_: Any) -> float:
    """1.0 when the final message contains a boxed answer (logged as a metric, not rewarded)."""
    return 1.0 if extract_boxed(vf.completion_text(completion)) is not None else 0.0


def load_environment(
    difficulty: str | int = "medium",
    sources: Sequence[str] | None = None,
    num_train_examples: int = 1000,
    num_eval_examples: int = 200,
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the math-problems environment.

    Args:
        difficulty: "easy", "medium" or "hard" (or 1-3); scales numbers, terms and family configs.
        sources: generator names (procedural and reasoning-gym families); default all.
        num_train_examples: rows in the train split.
        num_eval_examples: rows in the eval split (generated from a different seed; rows whose
            question also occurs in the train split are dropped).
        seed: base seed; the same arguments always give the same rows.
        system_prompt: instruction shown before each problem.
    """
    level = _level(difficulty)
    chosen = list(sources) if sources is not None else list(DEFAULT_SOURCES)

    def train() -> Dataset:
        return Dataset.from_list(build_rows(chosen, num_train_examples, level, seed=2 * seed))

    def evaluation() -> Dataset:
        train_questions = {r["question"] for r in build_rows(chosen, num_train_examples, level, seed=2 * seed)}
        rows = build_rows(chosen, num_eval_examples, level, seed=2 * seed + 1)
        return Dataset.from_list([r for r in rows if r["question"] not in train_questions] or rows)

    parser = vf.Parser(extract_fn=extract_boxed)
    rubric = vf.Rubric(funcs=[correct_answer, boxed_format], weights=[1.0, 0.0], parser=parser)
    return vf.SingleTurnEnv(
        dataset=train, eval_dataset=evaluation, system_prompt=system_prompt, parser=parser,
        rubric=rubric, **kwargs,
    )
