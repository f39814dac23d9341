"""``MathRubric``: checks ``\\boxed{}`` answers for mathematical equivalence with math-verify.

math-verify's own timeout uses ``signal.alarm``, which only works in the main thread; we call it from
a thread pool with its timeout turned off and enforce our own (``timeout_seconds``). A check that
times out scores 0.0 (the answer could not be verified). The pool bounds how many checks run at
once; a stuck sympy computation keeps its worker thread until it finishes, which is why the pool
is bounded rather than per-call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verifiers.parsers.maybe_think_parser import MaybeThinkParser
from verifiers.parsers.parser import Parser
from verifiers.rubrics.rubric import Rubric
from verifiers.utils.async_utils import wait_for
from verifiers.utils.data_utils import extract_boxed_answer

__all__ = ["MathRubric", "verify_math"]

_EXECUTOR: ThreadPoolExecutor | None = None


def _executor(max_workers: int) -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="math-verify")
    return _EXECUTOR


def verify_math(response: str, answer: str) -> bool:
    """True when ``response`` is mathematically equivalent to ``answer`` (both LaTeX or plain).

    Runs without math-verify's signal-based timeout (safe in threads); callers bound the time.
    """
    import math_verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold_text = answer if "\\boxed" in answer or "$" in answer else f"\\boxed{{{answer}}}"
    pred_text = response if "\\boxed" in response or "$" in response else f"\\boxed{{{response}}}"
    gold = math_verify.parse(gold_text, parsing_timeout=None)
    pred = math_verify.parse(pred_text, parsing_timeout=None)
    if not gold or not pred:
        return response.strip() == str(answer).strip()
    return bool(math_verify.verify(gold, pred, timeout_seconds=None))


class MathRubric(Rubric):
    """Reward 1.0 when the parsed answer equals the reference answer mathematically.

    The default parser strips a think block and extracts the last ``\\boxed{}``. The reward function
    is named ``correct_answer``.
    """

    _refuses_unknown_keywords = True  # as 0.1.7's and 0.3.0's did (no **kwargs)

    def __init__(
        self,
        funcs: Sequence[Callable[..., Any]] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        max_workers: int = 8,
        timeout_seconds: float = 5.0,
        max_verify_chars: int = 50_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            funcs=funcs,
            weights=weights,
            parser=parser if parser is not None else MaybeThinkParser(extract_fn=extract_boxed_answer),
            **kwargs,
        )
        self.max_workers = max_workers
        self.timeout_seconds = timeout_seconds
        self.max_verify_chars = max_verify_chars  # longer parsed answers score 0.0 unchecked
        self.add_reward_func(self.correct_answer)

    async def correct_answer(self, parser: Parser, completion: Any, answer: Any, **kwargs: Any) -> float:
        """1.0 if the model's answer is equivalent to ``answer``, else 0.0."""
        response = parser.parse_answer(completion)
        if not response or answer is None or len(response) > self.max_verify_chars:
            return 0.0
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(_executor(self.max_workers), verify_math, str(response), str(answer))
        try:
            ok = await wait_for(fut, timeout=self.timeout_seconds)
        except TimeoutError:
            return 0.0
        return 1.0 if ok else 0.0


def verify_response(response: str, answer: str, max_verify_chars: int, timeout_seconds: float = 5) -> tuple[float, float]:
    """``(score, seconds)``: 1.0 when ``response`` is equivalent to ``answer``, with the time the check took.

    Empty responses and responses longer than ``max_verify_chars`` score 0.0 without a check; a check
    that does not finish within ``timeout_seconds`` scores 0.0.
    """
    import time
    from concurrent.futures import TimeoutError as FutureTimeout

    start = time.perf_counter()
    if not response or len(response) > max_verify_chars:
        return 0.0, time.perf_counter() - start
    future = _executor(8).submit(verify_math, response, answer)
    try:
        score = 1.0 if future.result(timeout=timeout_seconds) else 0.0
    except FutureTimeout:
        score = 0.0
    return score, time.perf_counter() - start
