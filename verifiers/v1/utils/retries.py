"""Whole-run retries: an agent's run again on a fresh trace (``Agent.run``), or a whole episode
again (the run's episode loop), while the run ends with an error its rules allow another try for.
Each try's errors stay on the final record, before the last try's own."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from verifiers.v1.configs.retries import RetryConfig, RetryRule

logger = logging.getLogger(__name__)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt + 1``: doubling from 0.5 s, at most 30 s, jittered."""
    return min(0.5 * 2**attempt, 30.0) * (0.5 + random.random())


def _status_matches(status: int | None, wanted: list[Any]) -> bool:
    if status is None:
        return False
    return any(status == w if isinstance(w, int) else status // 100 == int(w[0]) for w in wanted)


class RetryState:
    """The budgets of one run's retries (shared by its tries, never by two runs)."""

    def __init__(self, config: RetryConfig) -> None:
        self.rules: list[RetryRule] = [*config.rules, RetryRule(max_retries=config.max_retries)]
        self.max_retries = sum(rule.max_retries for rule in self.rules)
        """At most this many retries in all: each one spends one rule's budget."""
        self.used = [0] * len(self.rules)
        self._patterns = [re.compile(rule.message) if rule.message is not None else None for rule in self.rules]

    def next_error(self, errors: Iterable[Any]) -> Any | None:
        """The first of ``errors`` (recorded ``Error`` records) that a rule with budget left covers,
        spending one retry of it; None: no retry. An error's first matching rule decides for it,
        so a rule out of budget (or set to 0) makes its errors final."""
        for error in errors:
            for index, rule in enumerate(self.rules):
                if rule.type is not None and error.type != rule.type:
                    continue
                if rule.status_code is not None and not _status_matches(error.status_code, rule.status_code):
                    continue
                pattern = self._patterns[index]
                if pattern is not None and pattern.search(error.message or "") is None:
                    continue
                if self.used[index] < rule.max_retries:
                    self.used[index] += 1
                    return error
                break
        return None


__all__ = ["RetryState", "backoff"]


async def retry_episode(episode: Any, again: Callable[[], Awaitable[Any]], retry: RetryConfig) -> tuple[Any, list[Any]]:
    """``[env.retries]`` for a played ``episode``: ``again()`` plays a fresh try while the last one
    failed with an error the rules allow another try for. Returns the final try and the history
    of the dropped ones (every error of each, a good trace's recovered failures included), which
    the caller puts first on the final episode; its standing (``ok``) is the final try's own."""
    import asyncio

    state, history = RetryState(retry), []
    for attempt in range(state.max_retries):
        errors = [*episode.errors, *(e for t in episode.traces if not t.ok for e in t.errors)]
        if episode.ok or state.next_error(errors) is None:
            break
        history.extend(episode.errors)
        for trace in episode.traces:
            history.extend(trace.errors)
        logger.warning(
            "retrying episode %s (retry %d of at most %d) after %s", episode.id, attempt + 1, state.max_retries, errors[0].type
        )
        await asyncio.sleep(backoff(attempt))
        episode = await again()
    return episode, history
