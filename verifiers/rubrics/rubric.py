"""``Rubric``: reward functions, weights, and error-recording scoring.

Reward functions receive only the keywords they name (or everything, with ``**kwargs``): ``prompt``,
``completion``, ``answer``, ``state``, ``info``, ``task``, ``example_id``, ``parser``, every other key
of the rollout state (extra dataset columns among them) and objects added with
:meth:`Rubric.add_class_object`. A function naming a plural keyword (``prompts``, ``completions``,
``answers``, ``states``, ``tasks``, ``infos``) is a *group* function: it sees all rollouts of one
example at once and returns one value per rollout.

Unlike the classic library, a reward function that raises does not silently score 0.0: the rollout
gets ``error = {"type", "message", "source": "reward:<name>" | "parser" | "judge"}`` and reward 0.0,
and the run summary counts it. The same holds for a function that returns NaN or an infinity, and
for ``SystemExit`` / ``KeyboardInterrupt`` / a stray ``CancelledError`` raised by the function (a
real cancellation of the run still cancels).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verifiers.engine.threads import run_sync, running
from verifiers.errors import JudgeError, error_record, is_user_raised
from verifiers.parsers.parser import Parser
from verifiers.train.advantages import group_advantages
from verifiers.types import RolloutScore, RolloutScores, State
from verifiers.utils.async_utils import call_with_kwargs, func_name, func_spec

__all__ = ["GROUP_KEYWORDS", "RolloutScore", "RolloutScores", "Rubric", "ScoreResult"]

GROUP_KEYWORDS = frozenset({"prompts", "completions", "answers", "states", "tasks", "infos", "example_ids"})


@dataclass(slots=True)
class ScoreResult:
    """Internal per-rollout result before it is written to the state."""

    reward: float
    metrics: dict[str, float]
    error: dict[str, Any] | None


def is_group_func(func: Callable[..., Any]) -> bool:
    """True when ``func`` names a plural (group) keyword."""
    return any(name in GROUP_KEYWORDS for name in func_spec(func).names)


def reward_error_source(exc: BaseException, default: str) -> str:
    """Where a reward-time exception came from: the judge, a parser, or the reward function."""
    if isinstance(exc, JudgeError):
        return "judge"
    tb = exc.__traceback__
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get("self"), Parser):
            return "parser"
        tb = tb.tb_next
    return default


def _is_async(func: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _to_float(value: Any, name: str) -> float:
    if value is None:
        # the classic Rubric once scored None as 0 silently; a function that forgot its return is
        # a bug to report, not a wrong answer (v1's scoring runner agrees)
        raise TypeError(f"reward function {name!r} returned None, expected a number")
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and "score" in value:  # a RewardResult: {"score", "feedback"}
        value = value["score"]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"reward function {name!r} returned {type(value).__name__}, expected a number") from None
    if not math.isfinite(number):
        # NaN / inf would poison the run's averages (and every advantage of the group): an error
        raise ValueError(f"reward function {name!r} returned {number}, expected a finite number")
    return number


def _is_metric_table(value: Any) -> bool:
    """A ``dict[str, number]`` that is not a RewardResult (``{"score", ...}``)."""
    return isinstance(value, Mapping) and "score" not in value and bool(value)


def _metric_table(value: Mapping[str, Any], name: str, weight: float) -> dict[str, float]:
    """The entries of a reward function's ``dict[str, float]`` result (a return type the classic
    Rubric documents), logged as metrics under their own names. Only a weight-0 function may return
    one (it logs a breakdown next to the reward); with any other weight the reward it adds is
    undefined, which is an error, as is an entry that is not a finite number."""
    if weight != 0:
        raise TypeError(
            f"reward function {name!r} returned a dict of metrics but has weight {weight}; return a number, "
            "or give it weight 0 to log the dict's entries as metrics"
        )
    return {str(k): _to_float(v, f"{name}[{k}]") for k, v in value.items()}


class Rubric:
    """Weighted reward functions; reward = sum(weight * value), each value logged under its name.

    ``funcs``/``weights``: reward functions (sync or async) and their weights (default 1.0 each).
    ``parser``: handed to reward functions as ``parser``. Unknown keywords become attributes
    (with a warning; see :mod:`verifiers.classic.keywords`).
    """

    #: True for a subclass whose classic releases all refused unknown constructor keywords.
    _refuses_unknown_keywords = False

    def __init__(
        self,
        funcs: Sequence[Callable[..., Any]] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        parallelize_scoring: bool = True,
        **kwargs: Any,
    ) -> None:
        self.parallelize_scoring = parallelize_scoring  # classic keyword; scoring is always concurrent here
        funcs = list(funcs or [])
        weights = list(weights) if weights is not None else [1.0] * len(funcs)
        if len(weights) != len(funcs):
            raise ValueError(f"Rubric got {len(funcs)} functions but {len(weights)} weights")
        self.funcs: list[Callable[..., Any]] = funcs
        self.weights: list[float] = [float(w) for w in weights]
        self.parser: Parser = parser if parser is not None else Parser()
        self.class_objects: dict[str, Any] = {}
        from verifiers.classic.keywords import accept_keywords

        # 0.1.x kept unknown keywords as attributes (0.3.x refused them): kept, a typo warned about;
        # refused for the subclasses whose every classic release refused them
        for key, value in accept_keywords(self, kwargs, refuse=self._refuses_unknown_keywords).items():
            setattr(self, key, value)

    # ----- building -------------------------------------------------------------------------------

    def add_reward_func(self, func: Callable[..., Any], weight: float = 1.0) -> None:
        self.funcs.append(func)
        self.weights.append(float(weight))

    def add_metric(self, func: Callable[..., Any], weight: float = 0.0) -> None:
        """A function that is logged in ``metrics`` but does not count towards the reward."""
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Make ``obj`` available to reward functions as the keyword ``name``."""
        self.class_objects[name] = obj

    # classic names
    @property
    def reward_funcs(self) -> list[Callable[..., Any]]:
        return self.funcs

    @reward_funcs.setter
    def reward_funcs(self, value: list[Callable[..., Any]]) -> None:
        self.funcs = list(value)

    @property
    def reward_weights(self) -> list[float]:
        return self.weights

    @reward_weights.setter
    def reward_weights(self, value: list[float]) -> None:
        self.weights = [float(v) for v in value]

    def get_reward_funcs(self) -> list[Callable[..., Any]]:
        return list(self.funcs)

    def get_reward_weights(self) -> list[float]:
        return list(self.weights)

    def get_reward_func_names(self) -> list[str]:
        return [func_name(f) for f in self.funcs]

    def metric_names(self) -> list[str]:
        return self.get_reward_func_names()

    # ----- scoring --------------------------------------------------------------------------------

    def _kwargs_for(self, state: dict[str, Any]) -> dict[str, Any]:
        kw = dict(state)
        kw["state"] = state
        kw.setdefault("info", {})
        kw.setdefault("task", "default")
        kw.setdefault("answer", "")
        kw["parser"] = self.parser
        if self.class_objects:
            kw.update(self.class_objects)
        return kw

    async def _call(self, func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        name = func_name(func)
        if _is_async(func):
            with running(f"reward function {name!r}"):  # named for the stall watchdog
                value = call_with_kwargs(func, kwargs)
                if inspect.isawaitable(value):
                    value = await value
        else:
            # a sync reward runs in the shared sync pool: one that sleeps or blocks must not stall
            # every other rollout of the run (their timeouts keep counting)
            value = await run_sync(call_with_kwargs, func, kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def _score_one(self, state: dict[str, Any], individual: list[tuple[str, Callable[..., Any], float]]) -> ScoreResult:
        kwargs = self._kwargs_for(state)
        metrics: dict[str, float] = {}
        extra: dict[str, float] = {}
        reward = 0.0
        error = None
        for name, func, weight in individual:
            try:
                raw = await self._call(func, kwargs)
                if _is_metric_table(raw):
                    extra.update(_metric_table(raw, name, weight))
                    value = 0.0
                else:
                    value = _to_float(raw, name)
            except BaseException as exc:  # SystemExit, a stray CancelledError ... are recorded too
                if not is_user_raised(exc):
                    raise
                value = 0.0
                if error is None:
                    error = error_record(exc, reward_error_source(exc, f"reward:{name}"))
            metrics[name] = value
            reward += weight * value
        for key, value in extra.items():  # a function's own name wins over a table entry
            metrics[key if key not in metrics else f"{key} (table)"] = value
        return ScoreResult(reward, metrics, error)

    async def compute_scores(self, states: Sequence[dict[str, Any]]) -> list[ScoreResult]:
        """Scores for ``states`` (one group) without touching them. States that already carry an
        error (the rollout failed) are not scored: reward 0.0, every metric 0.0."""
        entries = [(func_name(f), f, w) for f, w in zip(self.funcs, self.weights, strict=True)]
        individual = [e for e in entries if not is_group_func(e[1])]
        group = [e for e in entries if is_group_func(e[1])]
        live = [i for i, s in enumerate(states) if not s.get("error")]
        results = [ScoreResult(0.0, {name: 0.0 for name, _, _ in entries}, None) for _ in states]
        if individual and live:
            if len(live) == 1:
                scored = [await self._score_one(states[live[0]], individual)]
            else:
                scored = await asyncio.gather(*(self._score_one(states[i], individual) for i in live))
            for i, res in zip(live, scored, strict=True):
                results[i] = res
        if group and live:
            live_states = [states[i] for i in live]
            kw: dict[str, Any] = {
                "prompts": [s.get("prompt") for s in live_states],
                "completions": [s.get("completion") for s in live_states],
                "answers": [s.get("answer", "") for s in live_states],
                "states": live_states,
                "tasks": [s.get("task", "default") for s in live_states],
                "infos": [s.get("info") or {} for s in live_states],
                "example_ids": [s.get("example_id") for s in live_states],
                "parser": self.parser,
                **self.class_objects,
            }
            for name, func, weight in group:
                try:
                    values = await self._call(func, kw)
                    values = list(values)
                    if len(values) != len(live_states):
                        raise ValueError(f"group reward function {name!r} returned {len(values)} values for {len(live_states)} rollouts")
                    floats = [_to_float(v, name) for v in values]
                except BaseException as exc:
                    if not is_user_raised(exc):
                        raise
                    floats = [0.0] * len(live_states)
                    err = error_record(exc, reward_error_source(exc, f"reward:{name}"))
                    for i in live:
                        if results[i].error is None:
                            results[i].error = err
                for i, v in zip(live, floats, strict=True):
                    results[i].metrics[name] = v
                    results[i].reward += weight * v
        for res in results:
            if res.error is not None:
                res.reward = 0.0
        return results

    async def score_group(self, states: Sequence[dict[str, Any]]) -> None:
        """Score one group of rollouts in place: sets ``reward``, ``metrics``, ``error`` (first one
        wins) and ``timing["scoring_ms"]`` on each state."""
        t0 = time.perf_counter()
        results = await self.compute_scores(states)
        ms = (time.perf_counter() - t0) * 1000.0
        apply_scores(states, results, ms)

    # ----- classic entry points --------------------------------------------------------------------

    async def score_rollout(
        self,
        prompt: Any = None,
        completion: Any = None,
        answer: Any = "",
        state: dict[str, Any] | None = None,
        task: str = "default",
        info: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RolloutScore | None:
        """Score one rollout.

        NEW style ``await rubric.score_rollout(state)`` scores the state in place (returns None);
        OLD style ``score_rollout(prompt, completion, answer, state, task, info)`` returns a
        :class:`RolloutScore`.
        """
        if isinstance(prompt, dict) and completion is None and state is None and "prompt" in prompt:
            await self.score_group([prompt])
            return None
        st = dict(state or {})
        st.update(kwargs)
        st.update(prompt=prompt, completion=completion, answer=answer, task=task, info=info or {})
        st.pop("error", None)
        res = (await self.compute_scores([st]))[0]
        return RolloutScore(res.reward, res.metrics)

    async def score_rollouts(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        answers: Sequence[Any],
        states: Sequence[dict[str, Any]],
        tasks: Sequence[str] | None = None,
        infos: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> RolloutScores:
        """OLD API: score several rollouts (treated as one group) and return column lists."""
        n = len(prompts)
        tasks = tasks or ["default"] * n
        infos = infos or [{}] * n
        sts = []
        for i in range(n):
            st = dict(states[i] or {})
            st.update(prompt=prompts[i], completion=completions[i], answer=answers[i], task=tasks[i], info=infos[i])
            st.pop("error", None)
            sts.append(st)
        results = await self.compute_scores(sts)
        names = self.get_reward_func_names()
        return RolloutScores(
            reward=[r.reward for r in results],
            metrics={name: [r.metrics.get(name, 0.0) for r in results] for name in names},
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(funcs={self.get_reward_func_names()!r}, weights={self.weights!r})"


def apply_scores(states: Sequence[dict[str, Any]], results: Sequence[ScoreResult], scoring_ms: float) -> None:
    """Write scores into states; an error already on a state (the rollout failed) is kept.

    Also sets the group-relative ``advantage`` (reward - mean reward of the group) on each state and
    the ``reward`` / ``advantage`` of each of its trajectory steps.
    """
    for st, res in zip(states, results, strict=True):
        if res.error is not None and not st.get("error"):
            st["error"] = res.error
        st["reward"] = 0.0 if st.get("error") else res.reward
        st["metrics"] = res.metrics
        timing = st.get("timing")
        if isinstance(timing, dict):
            timing["scoring_ms"] = scoring_ms
    if not states:
        return
    for st, adv in zip(states, group_advantages([st["reward"] for st in states]), strict=True):
        st["advantage"] = adv
        for step in st.get("trajectory") or ():
            if isinstance(step, dict):
                step["reward"] = st["reward"]
                step["advantage"] = adv


# Callables that give reward functions extra keyword objects from a rollout's state, or a group's
# states (classic public names, for annotations).
ScoreObjectProvider = Callable[[State], Mapping[str, object]]
GroupScoreObjectProvider = Callable[[list[State]], Mapping[str, object]]
