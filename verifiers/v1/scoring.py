"""Running hooks: arguments injected by name, sync hooks off the event loop, every failure recorded.

A hook names what it needs: ``trace``, ``task`` (the task's data), ``runtime``, ``state``,
``config``, ``request``, ``response`` (also matched by annotation: a parameter annotated
``Request`` gets the request whatever its name). Async hooks run on the loop; sync hooks run in
the lane of sync environment code (``engine/threads.py``): off the loop, so a slow one does not
stall it, and one at a time, as the original runs them. Each call has its own time limit, counted
from its start.

Scoring never turns a failure into a score: a hook that raises, times out or returns something
that is not a finite number leaves its key unscored (None), and the trace carries an error
naming the hook, so the run's summary counts it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
import weakref
from collections.abc import Callable, Mapping
from numbers import Real
from typing import TYPE_CHECKING, Any, get_origin, get_type_hints

from verifiers.errors import env_raised

if TYPE_CHECKING:
    from verifiers.v1.task import Task
    from verifiers.v1.trace import Trace

DEFAULT_HOOK_TIMEOUT = 300.0
"""Seconds one scoring hook may take when the task sets no ``timeout.scoring``."""

# the names a hook may ask for (0.4.0's, plus state/config which tasks reach through self)
INJECTABLE = ("trace", "task", "runtime", "state", "config", "request", "response")


class HookError(Exception):
    """A hook that failed: raised, timed out, asked for an unknown argument or returned a non-number."""

    def __init__(self, kind: str, name: str, message: str, *, cause_type: str | None = None) -> None:
        super().__init__(f"{kind} {name!r}: {message}")
        self.kind, self.name, self.cause_type = kind, name, cause_type


class HookTimeout(HookError):
    pass


class InvalidScore(HookError):
    pass


class _Plan:
    """What a hook's signature says, read once per function: its named parameters (required or
    not) and, on first need, its resolved annotations."""

    __slots__ = ("_fn", "hints", "is_async", "params")

    def __init__(self, fn: Callable[..., Any]) -> None:
        # the plain function, weakly: a cached plan must keep neither a bound method's task object
        # alive nor its own cache key (a value holding its WeakKeyDictionary key never goes)
        plain = getattr(fn, "__func__", fn)
        try:
            self._fn: Callable[[], Any] = weakref.ref(plain)
        except TypeError:  # not weakly referable (then not cached either): held
            self._fn = lambda: plain
        self.is_async = inspect.iscoroutinefunction(fn)
        self.params = [
            (name, p.default is p.empty)
            for name, p in inspect.signature(fn).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        self.hints: dict[str, Any] | None = None

    def hint(self, name: str) -> Any:
        if self.hints is None:
            try:
                self.hints = get_type_hints(self._fn())
            except Exception:  # unresolvable annotations: injection by name still works
                self.hints = {}
        hint = self.hints.get(name)
        return get_origin(hint) or hint


# plans by the plain function (a bound method's ``__func__``): hooks are methods of task classes,
# so a run reads each signature once, not once per call; an entry goes with its function
_PLANS: dict[bool, weakref.WeakKeyDictionary[Any, _Plan]] = {True: weakref.WeakKeyDictionary(), False: weakref.WeakKeyDictionary()}


def _plan(fn: Callable[..., Any]) -> _Plan:
    bound = inspect.ismethod(fn)
    target = fn.__func__ if bound else fn  # type: ignore[attr-defined]
    cache = _PLANS[bound]
    try:
        plan = cache.get(target)
    except TypeError:  # not hashable / not weakly referable: no cache
        return _Plan(fn)
    if plan is None:
        plan = _Plan(fn)
        try:
            cache[target] = plan
        except TypeError:
            pass
    return plan


def hook_arguments(fn: Callable[..., Any], available: Mapping[Any, Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` asks for, by parameter name, then by annotated type for the
    type keys of ``available``. A required parameter nothing provides is a ``TypeError``."""
    return _arguments(_plan(fn), available)


def _arguments(plan: _Plan, available: Mapping[Any, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    by_type: dict[Any, Any] | None = None
    for name, required in plan.params:
        if name in available:
            kwargs[name] = available[name]
            continue
        if by_type is None:
            by_type = {k: v for k, v in available.items() if isinstance(k, type)}
        hint = plan.hint(name) if by_type else None
        if hint is not None and hint in by_type:
            kwargs[name] = by_type[hint]
        elif required:
            offered = ", ".join(sorted(str(k) for k in available if isinstance(k, str)))
            raise TypeError(f"needs the argument {name!r}, which a hook cannot be given (it can ask for: {offered})")
    return kwargs


async def invoke(fn: Callable[..., Any], available: Mapping[Any, Any]) -> Any:
    """Call ``fn`` with the arguments it names (by name, else by annotated type), awaiting what it
    returns: how a task's ``setup`` and ``finalize`` are called, as in the original (a
    ``setup(self, runtime)`` gets the runtime; parameter order does not matter)."""
    return await _settle(fn(**hook_arguments(fn, available)))


async def call_hook(
    fn: Callable[..., Any], available: Mapping[Any, Any], *, kind: str, timeout: float | None, name: str | None = None
) -> Any:
    """Call one hook with the arguments it names, under ``timeout``; any failure is a ``HookError``
    naming the hook (``name``, else the function's name)."""
    if not name:
        name = getattr(fn, "__name__", None)
        if name is None:  # repr only when there is no name (a bound method's repr is not cheap)
            name = repr(fn)
    try:
        plan = _plan(fn)  # the signature, read once per function
        kwargs = _arguments(plan, available)
    except (TypeError, ValueError) as exc:
        raise HookError(kind, name, str(exc), cause_type="TypeError") from exc

    owner = asyncio.current_task()
    if plan.is_async:
        try:
            # The hook runs in this task under a deadline (as wait_for, without a task per call),
            # taken when it starts. Its first step runs with no timer armed: a deadline only acts
            # where the hook suspends, so a hook that finishes without suspending (most: they read
            # the trace) cannot overrun it, and one that suspends runs on under the timer.
            deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
            coro = fn(**kwargs)
            if not inspect.iscoroutine(coro):  # an awaitable of another kind: awaited as it is
                async with asyncio.timeout_at(deadline):
                    result = await coro
            else:
                try:
                    first = coro.send(None)
                except StopIteration as done:
                    result = done.value
                else:
                    async with asyncio.timeout_at(deadline):
                        result = await _Resumed(coro, first)
            # a sync wrapper around an async function returns an awaitable
            return (await result) if inspect.isawaitable(result) else result
        except TimeoutError as exc:
            raise HookTimeout(kind, name, f"did not finish within {timeout:g} s", cause_type="TimeoutError") from exc
        except HookError:
            raise
        except BaseException as exc:  # SystemExit, GeneratorExit ... of the hook's own: its error, not the run's end
            if not env_raised(exc, owner):
                raise
            raise HookError(kind, name, f"raised {type(exc).__name__}: {exc}", cause_type=type(exc).__name__) from exc

    # A sync hook runs in the lane: its clock starts when the lane starts it (waiting behind other
    # sync calls is not counted against it), and one that overruns is abandoned (its thread cannot
    # be stopped; it finishes outside the lane and its result is dropped), so the next one starts.
    from verifiers.engine.threads import call_sync

    try:
        result = await call_sync(fn, (), kwargs, timeout=timeout)
        return await _settle(result)
    except TimeoutError as exc:
        raise HookTimeout(kind, name, f"did not finish within {timeout:g} s", cause_type="TimeoutError") from exc
    except HookError:
        raise
    except BaseException as exc:
        if not env_raised(exc, owner):
            raise
        raise HookError(kind, name, f"raised {type(exc).__name__}: {exc}", cause_type=type(exc).__name__) from exc


class _Resumed:
    """The rest of a coroutine whose first step already ran and yielded ``first``: awaiting it
    hands ``first`` to the event loop and then drives the coroutine as ``await`` would (values
    sent and exceptions thrown in, its return value out)."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Any, first: Any) -> None:
        self.coro, self.first = coro, first

    def __await__(self) -> Any:
        coro, value = self.coro, self.first
        self.first = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation (or a throw) reaches the hook where it waits
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    return done.value


async def together(coros: list[Any]) -> list[Any]:
    """Await ``coros`` concurrently (``gather``); their results in order. One is awaited as it
    is, none costs nothing."""
    if len(coros) == 1:
        return [await coros[0]]
    if coros:
        return list(await asyncio.gather(*coros))
    return []


_UNSCORED = object()
"""A scoring hook that failed (its error is kept; its key stays unscored)."""


async def _settle(result: Any) -> Any:
    # a sync wrapper around an async function returns an awaitable
    return await result if inspect.isawaitable(result) else result


def check_score(kind: str, name: str, value: Any) -> dict[str, float] | float:
    """A hook's result as a float (or ``{key: float}``); anything else is an ``InvalidScore``.
    Booleans count as 1.0 / 0.0 (a reward that returns ``answer == expected`` is common)."""
    if isinstance(value, Mapping):
        if not value:
            raise InvalidScore(kind, name, "returned an empty mapping")
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise InvalidScore(kind, name, f"returned a mapping with the non-string key {key!r}")
            out[key] = _number(kind, key, v)
        return out
    return _number(kind, name, value)


def _number(kind: str, key: str, v: Any) -> float:
    if not isinstance(v, Real):
        raise InvalidScore(kind, key, f"returned {type(v).__name__} {v!r:.80}, not a number")
    f = float(v)
    if not math.isfinite(f):
        raise InvalidScore(kind, key, f"returned {f}, not a finite number")
    return f


def needs_runtime(fn: Callable[..., Any]) -> bool:
    """Whether a scoring hook cannot run without the rollout's runtime (a required ``runtime``
    parameter): offline scoring (``vf replay``) skips it."""
    p = inspect.signature(fn).parameters.get("runtime")
    return p is not None and p.default is p.empty


SCORING_KINDS = ("metric", "reward", "judge")


_SCORING_MESSAGE = re.compile(r"^task \w+ scoring: (?:" + "|".join(SCORING_KINDS) + ") ")


def is_scoring_error(error: Any) -> bool:
    """Whether a recorded trace error (``trace.errors[i]``) came from scoring (a metric, reward or
    judge hook, as :func:`score_task` records them: ``TaskError "task <Task> scoring: reward 'x'
    ..."``, or a rollout error raised in one, such as a judge's ``ProviderError``, with the same
    message; traces saved before wrote ``HookError "reward 'x' ..."``) rather than from the rollout."""
    kind, message = getattr(error, "type", None), str(getattr(error, "message", ""))
    if _SCORING_MESSAGE.match(message):  # a TaskError, or a rollout error raised in a hook (a judge's ProviderError)
        return True
    return kind in ("HookError", "HookTimeout", "InvalidScore") and message.startswith(tuple(f"{k} " for k in SCORING_KINDS))


async def score_task(
    task: Task, trace: Trace, runtime: Any = None, *, timeout: float | None = None, judges: bool = True
) -> None:
    """Run ``task``'s metrics, then its rewards, on ``trace`` and record them.

    Every expected key is first set to None (unscored), so a trace shows what should have run
    even when a hook fails. A hook that needs ``runtime`` is skipped (left None, no error) when
    none is given, as when re-scoring saved traces offline. ``judges=False`` leaves the judges
    plugged into the task's config out (``vf validate``'s noop check asks no model)."""
    if timeout is None:
        timeout = task.data.timeout.scoring or DEFAULT_HOOK_TIMEOUT
    available: dict[Any, Any] = {"task": task.data, "trace": trace, "state": trace.state, "config": task.config}
    if runtime is not None:
        available["runtime"] = runtime

    metrics, rewards = task.hooks("metric"), task.hooks("reward")
    if runtime is None:
        metrics = [fn for fn in metrics if not needs_runtime(fn)]
        rewards = [fn for fn in rewards if not needs_runtime(fn)]
    for fn in metrics:
        trace.metrics[fn.__name__] = None
    for fn in rewards:
        trace.rewards[fn.__name__] = None
    errors: list[HookError] = []
    plugged: list[Any] = []
    for config in task.config.judges if judges else ():
        trace.rewards[config.key] = None
        try:
            plugged.append(task.plugged_judge(config))
        except Exception as exc:  # a judge that cannot be built: its reward stays unscored
            errors.append(HookError("judge", config.key, f"could not be loaded: {type(exc).__name__}: {exc}", cause_type=type(exc).__name__))
    if runtime is None:
        plugged = [j for j in plugged if not needs_runtime(j.score)]

    async def one(kind: str, name: str, fn: Callable[..., Any]) -> Any:
        try:
            return check_score(kind, name, await call_hook(fn, available, kind=kind, timeout=timeout, name=name))
        except HookError as exc:
            errors.append(exc)
            return _UNSCORED

    # metrics first, then rewards, then the plugged judges (a judge's reward is `name or id`, its
    # weight the config's), as the original does: a reward may read a metric off the trace (one
    # metric runs the program, the reward reads ``passed``). Each stage runs concurrently and is
    # recorded once the whole stage is back, in the hooks' order: no hook of a stage reads another's
    # score of the same stage. As in the original, the scoring is one whole: a stage with a failed
    # hook records none of its scores and the later stages do not run (their keys stay unscored),
    # the failures are the trace's errors
    stages = (
        ("metric", [(fn.__name__, fn, 1.0) for fn in metrics]),
        ("reward", [(fn.__name__, fn, getattr(fn, "reward_weight", 1.0)) for fn in rewards]),
        ("judge", [(j.reward_name, j.score, j.config.weight) for j in plugged]),
    )
    for kind, hooks in stages:
        if not hooks:
            continue
        before = len(errors)
        values = await together([one(kind, name, fn) for name, fn, _ in hooks])  # a stage's calls made as it starts
        if len(errors) > before:
            break
        for (name, _, weight), value in zip(hooks, values, strict=True):
            if kind == "metric":
                _record_metric(trace, name, value)
            else:
                _record_reward(trace, name, value, weight)
    if not errors:
        return
    from verifiers.v1.errors import RolloutError, TaskError

    for exc in errors:
        cause = exc.__cause__
        if isinstance(cause, RolloutError):
            # it crossed a more specific boundary first (a judge's ProviderError): recorded as itself
            # (its type and status code, what retry rules match), the message saying where it failed
            trace.record_error(cause)
            trace.errors[-1].message = f"task {type(task).__name__} scoring: {exc}"
            continue
        # as the original records a scoring failure: a TaskError "task <Task> scoring: ...", whose
        # message names the hook and what it did (raised, did not finish, returned a non-number),
        # with the hook's own traceback
        _record(trace, exc, TaskError, as_hook=False, prefix=f"task {type(task).__name__} scoring: ")


def _record_reward(trace: Trace, name: str, value: Any, weight: float) -> None:
    """A reward hook's (or judge's) value on the trace: a dict is several rewards (the hook's own
    unscored key then goes), a number is the hook's."""
    if isinstance(value, dict):
        if trace.rewards.get(name) is None:
            trace.rewards.pop(name, None)
        for key, v in value.items():
            trace.record_reward(key, v, weight)
    else:
        trace.record_reward(name, value, weight)


def _record_metric(trace: Trace, name: str, value: Any) -> None:
    """A metric hook's value on the trace: a dict is several metrics (the hook's own unscored key
    then goes), a number is the hook's."""
    if isinstance(value, dict):
        if trace.metrics.get(name) is None:
            trace.metrics.pop(name, None)
        trace.record_metrics(value)
    else:
        trace.record_metric(name, value)


async def score_harness(harness: Any, trace: Trace, runtime: Any = None, *, timeout: float | None = DEFAULT_HOOK_TIMEOUT) -> None:
    """A harness's ``@vf.metric`` methods on ``trace`` (they name ``task``, ``trace``, ``state``,
    ``runtime``), each key first set to None; a failing one is a ``HarnessError`` on the trace."""
    from verifiers.v1.decorators import discover_decorated
    from verifiers.v1.errors import HarnessError

    fns = discover_decorated(harness, "metric")
    available: dict[Any, Any] = {"task": trace.task.data if trace.task is not None else None, "trace": trace, "state": trace.state}
    if runtime is not None:
        available["runtime"] = runtime
    else:
        fns = [fn for fn in fns if not needs_runtime(fn)]
    for fn in fns:
        trace.metrics[fn.__name__] = None
    errors: list[HookError] = []

    async def one(fn: Callable[..., Any]) -> Any:
        try:
            return check_score("metric", fn.__name__, await call_hook(fn, available, kind="metric", timeout=timeout))
        except HookError as exc:
            errors.append(exc)
            return _UNSCORED

    values = await together([one(fn) for fn in fns])
    if not errors:  # recorded once all are back; as in the original, none when one failed
        for fn, value in zip(fns, values, strict=True):
            _record_metric(trace, fn.__name__, value)
    for exc in errors:
        _record(trace, exc, HarnessError, prefix=f"harness {getattr(harness.config, 'id', type(harness).__name__)!r} ")


_BOUNDARIES: dict[bool, weakref.WeakKeyDictionary[Any, type | None]] = {True: weakref.WeakKeyDictionary(), False: weakref.WeakKeyDictionary()}


def hook_boundary(fn: Callable[..., Any]) -> type | None:
    """What a ``@vf.stop`` / ``@vf.intercept`` hook looks at: ``Request``, ``Response``, or None
    (the trace itself), from its parameters (annotated type, else the names ``request`` /
    ``response``). Read once per function (every model call asks, twice)."""
    bound = inspect.ismethod(fn)
    target = fn.__func__ if bound else fn  # type: ignore[attr-defined]
    cache = _BOUNDARIES[bound]
    try:
        if target in cache:
            return cache[target]
    except TypeError:  # not hashable / not weakly referable: no cache
        return _hook_boundary(fn)
    found = _hook_boundary(fn)
    try:
        cache[target] = found
    except TypeError:
        pass
    return found


def _hook_boundary(fn: Callable[..., Any]) -> type | None:
    from verifiers.v1.types import Request, Response

    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    found = set()
    for name in inspect.signature(fn).parameters:
        hint = get_origin(hints.get(name)) or hints.get(name)
        if hint in (Request, Response):
            found.add(hint)
        elif hint is None and name in ("request", "response"):
            found.add(Request if name == "request" else Response)
    if len(found) > 1:
        raise TypeError(f"{getattr(fn, '__name__', fn)} looks at both a Request and a Response; a hook takes one")
    return found.pop() if found else None


def _boundary_available(trace: Trace, task: Task | None, runtime: Any, boundary: Any) -> dict[Any, Any]:
    from pydantic import BaseModel

    from verifiers.v1.types import Request, Response

    available: dict[Any, Any] = {"trace": trace, "state": trace.state}
    # a hook annotated ``vf.Trace`` gets the trace whatever its parametrized class (Trace[MyData]);
    # the trace's own classes are the keys, so scoring needs no import of the trace module
    for klass in type(trace).__mro__:
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            available[klass] = trace
    if task is not None:
        available |= {"task": task.data, "config": task.config}
    if runtime is not None:
        available["runtime"] = runtime
    if isinstance(boundary, Request):
        available |= {"request": boundary, Request: boundary}
    elif isinstance(boundary, Response):
        available |= {"response": boundary, Response: boundary}
    return available


async def first_stop(
    hooks: list[Callable[..., Any]], trace: Trace, boundary: Any = None, *, task: Task | None = None,
    runtime: Any = None, timeout: float | None = DEFAULT_HOOK_TIMEOUT,
) -> str | None:  # fmt: skip
    """The name of the first ``@vf.stop`` hook (by priority) that fires for ``boundary`` (a
    ``Request``, a ``Response``, or None for the trace itself); it becomes the trace's stop
    condition. A hook that fails or returns a non-bool is recorded and stops the trace as a
    ``task_error``: a broken stop never lets a rollout run on unchecked."""
    if not hooks:
        return None
    from verifiers.v1.errors import TaskError

    kind = None if boundary is None else type(boundary)
    available = _boundary_available(trace, task, runtime, boundary)
    for fn in hooks:
        if hook_boundary(fn) is not kind:
            continue
        try:
            fired = await call_hook(fn, available, kind="stop", timeout=timeout)
            if not isinstance(fired, bool):
                raise InvalidScore("stop", fn.__name__, f"returned {type(fired).__name__} {fired!r:.80}, not a bool")
        except HookError as exc:
            # a TaskError, as the original records a failed model-boundary hook (a retry rule on
            # ``type = "TaskError"`` matches it); the message names the hook and what it did
            _record(trace, exc, TaskError, as_hook=False)
            return trace.stop_condition
        if fired:
            trace.stop(fn.__name__)
            return fn.__name__
    return None


async def run_intercept(
    fn: Callable[..., Any], trace: Trace, value: Any, *, task: Task | None = None, runtime: Any = None,
    timeout: float | None = DEFAULT_HOOK_TIMEOUT,
) -> Any:  # fmt: skip
    """One ``@vf.intercept`` hook over ``value`` (a ``Request`` or ``Response``, which the hook may
    change in place): its replacement of the same type, or None (unchanged). A failing hook raises
    a ``HookError`` (``verifiers.v1.policy`` records it, and applies the rules on what a rewrite
    may change)."""
    available = _boundary_available(trace, task, runtime, value)
    result = await call_hook(fn, available, kind="intercept", timeout=timeout)
    if result is not None and not isinstance(result, type(value)):
        raise InvalidScore("intercept", fn.__name__, f"returned {type(result).__name__}, not a {type(value).__name__} or None")
    return result


def record_hook_error(trace: Trace, exc: HookError, what: str) -> Exception:
    """Record a failed model-boundary hook on ``trace`` as the original does: a ``TaskError``,
    ``"<what> failed: <the hook and what it did>"``; the error to raise."""
    from verifiers.v1.errors import TaskError

    return _record(trace, exc, TaskError, as_hook=False, prefix=f"{what} failed: ")


def _record(trace: Trace, exc: HookError, error_cls: type[Exception], *, as_hook: bool = True, prefix: str = "") -> Exception:
    error = error_cls(f"{prefix}{exc}")
    error.__cause__, error.__traceback__ = exc, exc.__traceback__
    trace.record_error(error)
    if as_hook:  # a scoring hook's error says what failed (HookTimeout, InvalidScore, HookError)
        trace.errors[-1].type = type(exc).__name__
    error.recorded = True  # type: ignore[attr-defined]  # the agent does not record it a second time
    return error
