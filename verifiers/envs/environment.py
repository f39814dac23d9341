"""``Environment``: datasets, the rollout engine, scoring and results.

The engine is plain asyncio:

* ``evaluate`` builds one *group* per example (``rollouts_per_example`` rollouts, scored together so
  group reward functions and advantages see them all) and runs groups with at most
  ``max_concurrent`` in flight: a fixed number of worker tasks pull groups from a shared iterator,
  so a 20,000-example run never creates 20,000 tasks up front.
* Requests in flight are bounded separately by ``max_concurrent_requests`` (one semaphore shared by
  every rollout of the run, wrapped around the model client).
* Each rollout runs under ``timeout_per_rollout`` (or the environment's ``timeout_seconds``);
  workers run in a ``TaskGroup`` so cancelling a run cancels and awaits every task it started.
* Finished rollouts are written to ``results.jsonl`` at once (flushed), and only a small summary
  is kept in memory while saving (see :class:`~verifiers.types.GenerateOutputs`).

Errors inside a rollout never abort the run: they are recorded on the rollout (``state["error"]``)
with a source (``model``, ``env_response``, ``setup``, ``timeout``, ``reward:<name>`` ...). That
includes ``SystemExit`` / ``KeyboardInterrupt`` and a stray ``CancelledError`` raised by user code;
only a real cancellation of the run (its task being cancelled) propagates. After a run, every
requested rollout has exactly one record (finished or errored), or the run fails loudly.

A rollout's timeout covers its own work, scoring included: the clock stops while the rollout waits
for a ``max_concurrent_requests`` slot, so rollouts queued behind a busy server are not cut off
before their first request was sent.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import gc
import json
import logging
import math
import random
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from verifiers.clients.slots import SLOT_WAIT, acquire_slot
from verifiers.envs.daemon_pool import DaemonThreadPool
from verifiers.errors import error_record, is_user_raised
from verifiers.parsers.parser import Parser
from verifiers.rubrics.rubric import Rubric
from verifiers.types import GenerateOutputs, State, SystemMessage, UserMessage, to_message, to_messages
from verifiers.utils.async_utils import SyncOrAsync, func_spec, run_sync
from verifiers.utils.data_utils import is_hf_dataset, rows_from_source, source_columns
from verifiers.utils.results import (
    LazyOutputs,
    ProgressTracker,
    ResultsWriter,
    ResumeScan,
    RolloutSummary,
    RunFolder,
    build_metadata,
    pair_rows,
    record_for,
    rollout_positions,
    set_timing,
    write_metadata,
)

__all__ = ["Environment"]

logger = logging.getLogger("verifiers")

_OVERRIDES: dict[type, bool] = {}
_TEARDOWN_AT_EXIT: weakref.WeakSet[Environment] = weakref.WeakSet()


@atexit.register
def _teardown_remaining() -> None:
    """Run teardown hooks of environments nobody closed (sandboxes, servers) before exit."""
    for env in list(_TEARDOWN_AT_EXIT):
        try:
            env.close()
        except Exception:
            logger.exception("teardown of %r at exit failed", env)  # class -> "overrides rollout()" (checked once per class)


class _RolloutClock:
    """The timeout of one rollout, which can be stopped while the rollout waits in a queue."""

    __slots__ = ("paused", "remaining", "scope")

    def __init__(self, scope: asyncio.Timeout) -> None:
        self.scope = scope
        self.paused = 0
        self.remaining: float | None = None

    def pause(self) -> None:
        self.paused += 1
        if self.paused > 1:
            return
        when = self.scope.when()
        if when is None or self.scope.expired():
            return
        self.remaining = max(0.0, when - asyncio.get_running_loop().time())
        with contextlib.suppress(RuntimeError):
            self.scope.reschedule(None)

    def resume(self) -> None:
        self.paused -= 1
        if self.paused or self.remaining is None:
            return
        remaining, self.remaining = self.remaining, None
        with contextlib.suppress(RuntimeError):
            self.scope.reschedule(asyncio.get_running_loop().time() + remaining)

    def left(self) -> float | None:
        """Seconds left before the rollout times out (None: no limit)."""
        if self.remaining is not None:
            return self.remaining
        when = self.scope.when()
        return None if when is None else max(0.0, when - asyncio.get_running_loop().time())


#: The clock of the rollout running in the current task (tool calls and model calls inherit it);
#: the model client's own request bound (``ClientConfig.max_concurrent_requests``) pauses it too.
_CLOCK = SLOT_WAIT
#: Set by a group run: id(state) -> seconds its rollout had left when it ended (bounds scoring).
_TIME_LEFT: contextvars.ContextVar[dict[int, float] | None] = contextvars.ContextVar("vf_time_left", default=None)


def _record_timeout(state: State, message: str) -> None:
    state["error"] = {"type": "TimeoutError", "message": message, "source": "timeout"}
    state["stop_condition"] = "timeout"
    state["is_truncated"] = True
    state["is_completed"] = True


class _BoundedClient:
    """A model client whose requests share one semaphore (``max_concurrent_requests``).

    Waiting for a slot does not count against the calling rollout's timeout.
    """

    __slots__ = ("inner", "semaphore")

    def __init__(self, inner: Any, semaphore: asyncio.Semaphore) -> None:
        self.inner = inner
        self.semaphore = semaphore

    async def chat(self, **kwargs: Any) -> Any:
        await acquire_slot(self.semaphore)
        try:
            return await self.inner.chat(**kwargs)
        finally:
            self.semaphore.release()

    async def completion(self, **kwargs: Any) -> Any:
        await acquire_slot(self.semaphore)
        try:
            return await self.inner.completion(**kwargs)
        finally:
            self.semaphore.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _is_model_client(obj: Any) -> bool:
    chat = getattr(obj, "chat", None)
    return callable(chat) and asyncio.iscoroutinefunction(chat)


def _client_base_url(client: Any) -> str | None:
    inner = getattr(client, "inner", client)
    url = getattr(inner, "base_url", None)
    return str(url) if url is not None else None


class Environment:
    """Base class of every environment: a dataset, a rubric, and how a rollout runs.

    Keywords (all optional but at least one dataset):

    * ``dataset`` / ``eval_dataset``: a ``datasets.Dataset``, a list of row dicts, a dict of
      columns, or a zero-argument callable returning one of those (built on first use). Rows carry
      ``question`` (turned into a chat prompt) or a ready ``prompt``; optionally ``answer``,
      ``info`` (dict or JSON string), ``task`` and ``example_id``; other columns reach reward
      functions by name.
    * ``system_prompt``, ``few_shot`` (messages inserted after the system prompt), ``parser``,
      ``rubric``, ``sampling_args`` (defaults merged under the caller's), ``message_type``
      (``"chat"`` or ``"completion"``), ``oai_tools`` (OLD) / ``tool_defs`` (NEW), ``max_workers``
      (thread pool for sync tools), ``env_id``, ``env_args``, ``max_seq_len``, ``score_rollouts``.
    * Unknown keywords are refused with a TypeError naming the closest accepted one (the classic
      ``map_kwargs`` and ``pass_threshold`` are accepted and kept as attributes).
    """

    def __init__(
        self,
        dataset: Any = None,
        eval_dataset: Any = None,
        system_prompt: str | None = None,
        few_shot: Sequence[Mapping[str, Any]] | None = None,
        parser: Parser | None = None,
        rubric: Rubric | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        message_type: str = "chat",
        oai_tools: list[dict[str, Any]] | None = None,
        tool_defs: list[dict[str, Any]] | None = None,
        max_workers: int = 64,
        env_id: str | None = None,
        env_args: Mapping[str, Any] | None = None,
        max_seq_len: int | None = None,
        score_rollouts: bool = True,
        **kwargs: Any,
    ) -> None:
        if message_type not in ("chat", "completion"):
            raise ValueError(f"message_type must be 'chat' or 'completion', got {message_type!r}")
        if dataset is None and eval_dataset is None:
            raise ValueError("an environment needs a dataset or an eval_dataset (or both)")
        self.message_type = message_type
        self.system_prompt = system_prompt
        self.few_shot = list(few_shot or [])
        self.parser = parser if parser is not None else (rubric.parser if rubric is not None else Parser())
        self.rubric = rubric if rubric is not None else Rubric(parser=self.parser)
        self.sampling_args: dict[str, Any] = dict(sampling_args or {})
        self.max_workers = max_workers
        self.env_id = env_id
        self.env_args: dict[str, Any] = dict(env_args or {})
        self.env_version: str | None = None
        self.max_seq_len = max_seq_len
        self.score_rollouts = score_rollouts
        self._set_tools(oai_tools, tool_defs)
        self._sources: dict[str, Any] = {"train": dataset, "eval": eval_dataset}
        self._rows_cache: dict[str, list[dict[str, Any]]] = {}
        self._executor: Executor | None = None
        self._clients: dict[int, Any] = {}
        self._torn_down = False
        from verifiers.utils.keywords import CLASSIC_ENVIRONMENT_KEYWORDS, accept_keywords

        for key, value in accept_keywords(self, kwargs, CLASSIC_ENVIRONMENT_KEYWORDS).items():
            setattr(self, key, value)
        for split in ("train", "eval"):
            self._check_columns(split)
        from verifiers.utils.decorators import collect_hooks

        if collect_hooks(type(self), "teardown"):
            _TEARDOWN_AT_EXIT.add(self)

    # ================================================================================================
    # Tools (schemas only; ToolEnv runs them)
    # ================================================================================================

    def _set_tools(self, oai_tools: list[dict[str, Any]] | None, tool_defs: list[dict[str, Any]] | None) -> None:
        if oai_tools is None and tool_defs is not None:
            oai_tools = [{"type": "function", "function": dict(t)} for t in tool_defs]
        self.oai_tools: list[dict[str, Any]] | None = list(oai_tools) if oai_tools else None

    @property
    def tool_defs(self) -> list[dict[str, Any]] | None:
        """NEW-style tool definitions ``{name, description, parameters}`` (from ``oai_tools``)."""
        if not self.oai_tools:
            return None
        return [dict(t.get("function", t)) for t in self.oai_tools]

    @tool_defs.setter
    def tool_defs(self, value: list[dict[str, Any]] | None) -> None:
        self._set_tools(None, value)

    # ================================================================================================
    # Datasets
    # ================================================================================================

    def _check_columns(self, split: str) -> None:
        source = self._sources.get(split)
        if source is None:
            return
        cols = source_columns(source)
        if cols is not None and cols and "prompt" not in cols and "question" not in cols:
            name = "dataset" if split == "train" else "eval_dataset"
            raise ValueError(
                f"{name} has neither a 'question' nor a 'prompt' column (columns: {cols}); "
                "each row needs one of them"
            )

    def format_prompt(self, question: Any, system_prompt: str | None = None, few_shot: Sequence[Any] | None = None) -> Any:
        """The prompt for a ``question``: ``[system?] + few_shot + [user: question]`` (chat), or the
        question text (completion mode, with the system prompt in front when set)."""
        system_prompt = self.system_prompt if system_prompt is None else system_prompt
        few_shot = self.few_shot if few_shot is None else few_shot
        if self.message_type == "completion":
            return f"{system_prompt}\n\n{question}" if system_prompt else str(question)
        msgs: list[Any] = []
        if system_prompt:
            msgs.append(SystemMessage(system_prompt))
        msgs.extend(to_message(m) for m in few_shot)
        msgs.append(UserMessage(question))
        return msgs

    def _format_row(self, row: Mapping[str, Any], index: int) -> dict[str, Any]:
        out = dict(row)
        prompt = row.get("prompt")
        if prompt is None:
            if "question" not in row or row["question"] is None:
                raise ValueError(f"dataset row {index} has neither 'question' nor 'prompt': keys {sorted(row)}")
            out["prompt"] = self.format_prompt(row["question"])
        elif self.message_type == "chat":
            if isinstance(prompt, str):
                out["prompt"] = self.format_prompt(prompt)
            else:
                # An Arrow round trip fills absent message fields with None (tool_calls: None on a
                # user message); drop them so the request carries only real fields.
                msgs = [to_message(_drop_none(m)) for m in prompt]
                if self.system_prompt and not (msgs and msgs[0].get("role") == "system"):
                    msgs.insert(0, SystemMessage(self.system_prompt))
                out["prompt"] = msgs
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info) if info.strip() else {}
            except ValueError:
                info = {"raw": info}
        out["info"] = info if isinstance(info, dict) else ({} if info is None else dict(info))
        answer = row.get("answer")
        out["answer"] = "" if answer is None else answer
        out["task"] = row.get("task") or "default"
        if out.get("example_id") is None:
            out["example_id"] = index
        return out

    def _rows(self, split: str) -> list[dict[str, Any]]:
        """Formatted rows of a split (built once, then cached); ``eval`` falls back to ``train``."""
        cached = self._rows_cache.get(split)
        if cached is not None:
            return cached
        source = self._sources.get(split)
        if source is None:
            other = "train" if split == "eval" else "eval"
            if self._sources.get(other) is None:
                return []
            rows = self._rows(other)
        else:
            if callable(source) and not is_hf_dataset(source) and not isinstance(source, list | tuple | Mapping):
                source = source()
                self._sources[split] = source
                self._check_columns(split)
            rows = [self._format_row(r, i) for i, r in enumerate(rows_from_source(source))]
        self._rows_cache[split] = rows
        return rows

    def _select(self, rows: list[dict[str, Any]], n: int, seed: int | None) -> list[dict[str, Any]]:
        if seed is not None:
            rows = list(rows)
            random.Random(seed).shuffle(rows)
        if n is not None and n > 0:
            rows = rows[:n]
        return rows

    def _as_source_kind(self, split: str, rows: list[dict[str, Any]]) -> Any:
        source = self._sources.get(split) or self._sources.get("train" if split == "eval" else "eval")
        if is_hf_dataset(source):
            from datasets import Dataset

            try:
                return Dataset.from_list(rows)
            except Exception:  # heterogeneous rows Arrow cannot type: hand back rows
                return rows
        return rows

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """The formatted training rows (``n`` of them, shuffled with ``seed`` when given); a
        ``datasets.Dataset`` when the source was one, else a list of dicts."""
        if self._sources.get("train") is None:
            raise ValueError("this environment has no training dataset")
        return self._as_source_kind("train", self._select(self._rows("train"), n, seed))

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """The formatted evaluation rows; falls back to the training set."""
        split = "eval" if self._sources.get("eval") is not None else "train"
        return self._as_source_kind(split, self._select(self._rows(split), n, seed))

    @property
    def dataset(self) -> Any:
        return self.get_dataset() if self._sources.get("train") is not None else None

    @dataset.setter
    def dataset(self, value: Any) -> None:
        self._sources["train"] = value
        self._rows_cache.clear()
        self._check_columns("train")

    @property
    def eval_dataset(self) -> Any:
        return self.get_eval_dataset() if self._sources.get("eval") is not None else None

    @eval_dataset.setter
    def eval_dataset(self, value: Any) -> None:
        self._sources["eval"] = value
        self._rows_cache.clear()
        self._check_columns("eval")

    # ================================================================================================
    # Settings
    # ================================================================================================

    def set_kwargs(self, **kwargs: Any) -> None:
        """Set attributes after construction (the classic API's way of adjusting an environment)."""
        for key, value in kwargs.items():
            setattr(self, key, value)

    def set_max_seq_len(self, max_seq_len: int | None) -> None:
        """Stop rollouts whose context reaches ``max_seq_len`` tokens (``stop_condition`` prompt_too_long)."""
        self.max_seq_len = max_seq_len

    def get_reward_funcs(self) -> list[Callable[..., Any]]:
        """The rubric's reward functions (OLD trainers read them from the environment)."""
        return self.rubric.get_reward_funcs()

    def get_reward_weights(self) -> list[float]:
        return self.rubric.get_reward_weights()

    @property
    def executor(self) -> Executor:
        """Thread pool for sync tools and other blocking work (``max_workers`` daemon threads: a
        tool that never returns does not keep the process alive after the run)."""
        if self._executor is None:
            self._executor = DaemonThreadPool(max(1, int(self.max_workers)), thread_name_prefix="vf-env")
        return self._executor

    # ================================================================================================
    # Model calls
    # ================================================================================================

    def _model_client(self, client: Any) -> Any:
        """Our ModelClient for whatever the caller passed (AsyncOpenAI, config, URL ...)."""
        if client is None:
            raise ValueError("a model client is required (a ModelClient, ClientConfig, base URL or openai client)")
        if _is_model_client(client):
            return client
        cached = self._clients.get(id(client))
        if cached is not None and cached[0] is client:
            return cached[1]
        from verifiers.clients import ModelClient

        mc = ModelClient.from_any(client)
        self._clients[id(client)] = (client, mc)
        return mc

    async def get_model_response(
        self,
        client: Any,
        model: str,
        prompt: Any,
        oai_tools: list[dict[str, Any]] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        message_type: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """One model call: chat (``prompt`` is a message list) or completion (``prompt`` is text).

        Returns a :class:`~verifiers.types.ModelResponse`. Sampling arguments are sent untouched.
        """
        if isinstance(client, list) or (isinstance(client, str) and not isinstance(prompt, str | list)):
            client, model, prompt = model, prompt, client  # OLD order: (prompt, client, model)
        mc = self._model_client(client)
        if (message_type or self.message_type) == "completion":
            return await mc.completion(model=model, prompt=prompt, sampling_args=sampling_args)
        return await mc.chat(model=model, messages=prompt, tools=oai_tools, sampling_args=sampling_args)

    # ================================================================================================
    # Rollouts (MultiTurnEnv implements the loop)
    # ================================================================================================

    def init_state(self, input: Mapping[str, Any], client: Any = None, model: str | None = None, sampling_args: Any = None) -> State:
        """A fresh :class:`State` for one rollout of dataset row ``input``."""
        if input.get("prompt") is None:  # a raw row (question only): format it like the dataset
            input = self._format_row(input, input.get("example_id") or 0)
        prompt = input["prompt"]
        state = State(input)
        state["prompt"] = to_messages(prompt) if not isinstance(prompt, str) else prompt
        state["completion"] = "" if isinstance(prompt, str) else []
        info = input.get("info")
        state["info"] = dict(info) if isinstance(info, dict) else {}
        state.setdefault("answer", "")
        state.setdefault("task", "default")
        state.setdefault("example_id", 0)
        state["rollout_index"] = input.get("rollout_index", 0)
        state["responses"] = []
        state["trajectory"] = []
        state["turn"] = 0
        state["reward"] = None
        state["metrics"] = {}
        state["timing"] = {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}
        state["usage"] = {"prompt_tokens": 0, "completion_tokens": 0}
        state["error"] = None
        state["is_completed"] = False
        state["is_truncated"] = False
        state["stop_condition"] = None
        return state

    async def rollout(self, input: Any, client: Any, model: str, sampling_args: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        """Run one rollout of ``input`` and return its state. Implemented by MultiTurnEnv."""
        raise NotImplementedError(f"{type(self).__name__} must implement rollout()")

    async def _drive(self, state: State, client: Any, model: str, sampling_args: Mapping[str, Any]) -> None:
        """Fill ``state`` by running the rollout (MultiTurnEnv implements the turn loop)."""
        raise NotImplementedError(f"{type(self).__name__} must implement rollout()")

    @staticmethod
    def _adopt_rollout_result(state: State, result: Any) -> State:
        if isinstance(result, tuple) and len(result) == 2:  # OLD: (completion, state)
            completion, st = result
            if isinstance(st, Mapping):
                state.update(st)
            state["completion"] = completion
        elif isinstance(result, Mapping):
            state.update(result)
        return state

    def _rollout_overridden(self) -> bool:
        cls = type(self)
        cached = _OVERRIDES.get(cls)
        if cached is None:
            from verifiers.envs.multiturn_env import MultiTurnEnv

            own = cls.rollout
            cached = own is not Environment.rollout and own is not MultiTurnEnv.rollout
            _OVERRIDES[cls] = cached
        return cached

    async def run_rollout(
        self,
        input: Mapping[str, Any],
        client: Any,
        model: str,
        sampling_args: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> State:
        """One rollout with a timeout; errors are recorded on the returned state, never raised.

        The timeout (``timeout``, else the environment's ``timeout_seconds``) stops counting while
        the rollout waits for a request slot; what is left of it when the rollout ends bounds its
        scoring (see :meth:`run_group`).
        """
        state = self.init_state(input, client, model, sampling_args)
        limit = timeout if timeout is not None else getattr(self, "timeout_seconds", None)
        t0 = time.perf_counter()
        clock: _RolloutClock | None = None
        scope: asyncio.Timeout | None = None
        try:
            if limit is not None and limit > 0:
                async with asyncio.timeout(limit) as scope:
                    clock = _RolloutClock(scope)
                    token = _CLOCK.set(clock)
                    try:
                        await self._drive_any(state, client, model, sampling_args or {})
                    finally:
                        _CLOCK.reset(token)
            else:
                await self._drive_any(state, client, model, sampling_args or {})
        except TimeoutError as exc:
            clock = None
            if scope is not None and scope.expired():
                _record_timeout(state, f"rollout exceeded {limit} s")
            else:  # a TimeoutError of the rollout's own code (a custom rollout()), not the limit
                if not state.get("error"):
                    state["error"] = error_record(exc, "rollout")
                state["is_completed"] = True
        except BaseException as exc:  # a bug in a custom rollout(): keep the run going, record it
            if not is_user_raised(exc):
                raise
            if not state.get("error"):
                state["error"] = error_record(exc, "rollout")
            state["is_completed"] = True
        budget = _TIME_LEFT.get()
        if budget is not None and clock is not None:
            budget[id(state)] = clock.left() or 0.0
        set_timing(state, "generation_ms", (time.perf_counter() - t0) * 1000.0)  # [faultsrun] a hook may have popped it
        return state

    async def _drive_any(self, state: State, client: Any, model: str, sampling_args: Mapping[str, Any]) -> None:
        if not self._rollout_overridden():
            await self._drive(state, client, model, sampling_args)
            return
        names = func_spec(self.rollout).names
        if names and names[0] == "client":  # OLD: rollout(client, model, prompt, answer, task, info, sampling_args)
            result = await self.rollout(
                client, model, state["prompt"], state.get("answer", ""), state.get("task", "default"),
                state.get("info", {}), sampling_args,
            )
        else:
            result = await self.rollout(dict(state), client, model, sampling_args)
        self._adopt_rollout_result(state, result)
        state["is_completed"] = True

    async def run_group(
        self,
        group_inputs: Sequence[Mapping[str, Any]],
        client: Any,
        model: str,
        sampling_args: Mapping[str, Any] | None = None,
        score: bool = True,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> list[State]:
        """All rollouts of one example, run concurrently and scored together."""
        client = self._model_client(client)
        sa = self._merge_sampling_args(sampling_args)
        return await self._run_group(group_inputs, client, model, sa, score, timeout)

    async def _run_group(
        self,
        group_inputs: Sequence[Mapping[str, Any]],
        client: Any,
        model: str,
        sampling_args: Mapping[str, Any],
        score: bool,
        timeout: float | None,
    ) -> list[State]:
        t0 = time.perf_counter()
        budget: dict[int, float] = {}
        token = _TIME_LEFT.set(budget)
        try:
            if len(group_inputs) == 1:
                states = [await self._run_one(group_inputs[0], client, model, sampling_args, timeout)]
            else:
                states = list(
                    await asyncio.gather(*(self._run_one(inp, client, model, sampling_args, timeout) for inp in group_inputs))
                )
        finally:
            _TIME_LEFT.reset(token)
        if score:
            # Scoring runs under what is left of the rollouts' timeouts (the longest of the group's
            # rollouts that are still live: group reward functions see them all at once).
            left = [budget[id(st)] for st in states if id(st) in budget and not st.get("error")]
            if left:
                try:
                    async with asyncio.timeout(max(left)) as scope:
                        # [faultsrun] a judge's request-slot wait pauses the scoring clock too
                        token = _CLOCK.set(_RolloutClock(scope))
                        try:
                            await self._score_group(states)
                        finally:
                            _CLOCK.reset(token)
                except TimeoutError:
                    for st in states:
                        if not st.get("error"):
                            _record_timeout(st, "scoring did not finish within the rollout timeout")
                            st["reward"] = 0.0
                            st["metrics"] = {name: 0.0 for name in self.rubric.get_reward_func_names()}
            else:
                await self._score_group(states)
        total = (time.perf_counter() - t0) * 1000.0
        for st in states:
            set_timing(st, "total_ms", total)
        return states

    async def _run_one(
        self, input: Mapping[str, Any], client: Any, model: str, sampling_args: Mapping[str, Any], timeout: float | None
    ) -> State:
        return await self.run_rollout(input, client, model, sampling_args, timeout=timeout)

    async def _score_group(self, states: list[State]) -> None:
        try:
            await self.rubric.score_group(states)
        except BaseException as exc:  # a broken rubric: record on every rollout, keep the run going
            if not is_user_raised(exc):
                raise
            err = error_record(exc, "rubric")
            for st in states:
                st["error"] = st.get("error") or err
                st["reward"] = 0.0

    async def _score_apart(self, states: list[State], gate: asyncio.Semaphore | None, independent: bool) -> None:
        """Classic scoring options: ``max_concurrent_scoring`` and ``independent_scoring``."""
        for part in ([st] for st in states) if independent else [states]:
            if gate is None:
                await self._score_group(part)
            else:
                async with gate:
                    await self._score_group(part)

    def _merge_sampling_args(self, sampling_args: Mapping[str, Any] | None) -> dict[str, Any]:
        if not self.sampling_args:
            return dict(sampling_args or {})
        merged = dict(self.sampling_args)
        merged.update(sampling_args or {})
        return merged

    # ================================================================================================
    # Runs: generate / evaluate
    # ================================================================================================

    def _inputs_from(self, inputs: Any) -> list[dict[str, Any]]:
        # Formatting is idempotent (a ready prompt keeps its system message and gets no few-shot),
        # so rows that already went through get_dataset() (and an Arrow round trip) are safe here.
        return [self._format_row(row, i) for i, row in enumerate(rows_from_source(inputs))]

    @staticmethod
    def _group_rows(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for row in rows:
            key = row.get("example_id")
            try:
                hash(key)
            except TypeError:
                key = json.dumps(key, sort_keys=True, default=str)
            group = groups.setdefault(key, [])
            if "rollout_index" not in row:
                row = {**row, "rollout_index": len(group)}
            group.append(row)
        return list(groups.values())

    def generate(
        self,
        inputs: Any,
        client: Any,
        model: str,
        sampling_args: Mapping[str, Any] | None = None,
        score_rollouts: bool = True,
        max_concurrent: int = -1,
        max_concurrent_requests: int | None = None,
        save_results: bool = False,
        results_path: str | Path | None = None,
        timeout_per_rollout: float | None = None,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
        state_columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run and score rollouts for ``inputs`` (rows with a prompt or question; rows sharing an
        ``example_id`` form one group). Returns :class:`GenerateOutputs`.

        Awaitable (NEW: ``await env.generate(...)``) and usable directly (OLD synchronous
        ``generate``): see :class:`~verifiers.utils.async_utils.SyncOrAsync`. The classic keywords
        are accepted (see :func:`_classic_options`); any other keyword is refused.
        """
        opts = _classic_options("generate", kwargs)
        if max_concurrent_requests is None:
            max_concurrent_requests = opts.pop("max_concurrent_generation", None)
        return SyncOrAsync(
            lambda: self._generate(
                inputs, client, model, sampling_args, score_rollouts, max_concurrent, max_concurrent_requests,
                save_results, results_path, timeout_per_rollout, on_progress, state_columns, opts,
            )
        )

    async def _generate(
        self, inputs: Any, client: Any, model: str, sampling_args: Any, score_rollouts: bool, max_concurrent: int,
        max_concurrent_requests: int | None, save_results: bool, results_path: Any, timeout_per_rollout: float | None,
        on_progress: Any, state_columns: Sequence[str] | None = None, opts: dict[str, Any] | None = None,
    ) -> GenerateOutputs:
        opts = dict(opts or {})
        rows = self._inputs_from(inputs)
        groups = _shuffled(self._group_rows(rows), opts)
        num_examples = opts.pop("num_examples", None)
        if num_examples is not None and num_examples > 0:
            groups = groups[:num_examples]
        repeat = opts.pop("rollouts_per_example", None)
        if repeat is not None and repeat > 1:  # OLD generate: each input row is sampled `repeat` times
            groups = [[{**row, "rollout_index": i * repeat + r} for i, row in enumerate(g) for r in range(repeat)] for g in groups]
        rpe = max((len(g) for g in groups), default=1)
        return await self._run(
            groups, client, model, sampling_args, rollouts_per_example=rpe, score=score_rollouts and self.score_rollouts,
            max_concurrent=max_concurrent, max_concurrent_requests=max_concurrent_requests,
            save_results=save_results, results_path=results_path, resume=False,
            timeout_per_rollout=timeout_per_rollout, on_progress=on_progress, state_columns=state_columns, options=opts,
        )

    a_generate = generate  # OLD async name (awaitable either way)

    def generate_sync(self, inputs: Any, client: Any, model: str, sampling_args: Mapping[str, Any] | None = None, **kwargs: Any) -> GenerateOutputs:
        """Synchronous ``generate`` (runs in a fresh event loop)."""
        return self.generate(inputs, client, model, sampling_args, **kwargs).result()

    def evaluate(
        self,
        client: Any,
        model: str,
        sampling_args: Mapping[str, Any] | None = None,
        num_examples: int = -1,
        rollouts_per_example: int = 1,
        max_concurrent: int = -1,
        max_concurrent_requests: int | None = None,
        save_results: bool = False,
        results_path: str | Path | None = None,
        resume: bool = False,
        timeout_per_rollout: float | None = None,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
        score_rollouts: bool = True,
        state_columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Evaluate ``model`` on the eval set (falls back to the train set).

        ``num_examples`` (-1: all) examples x ``rollouts_per_example``; ``max_concurrent`` bounds
        groups in flight, ``max_concurrent_requests`` requests in flight; ``timeout_per_rollout``
        in seconds. ``save_results`` / ``results_path`` write a run folder (default
        ``outputs/evals/<env_id>--<model>/<run_id>/``); ``resume=True`` with ``results_path`` skips
        rollouts already saved there. ``on_progress(event)`` gets ``{"done", "total", "avg_reward",
        "errors"}`` after each rollout. ``state_columns`` adds those state keys to each output
        record. Returns :class:`GenerateOutputs`; awaitable (NEW) and usable directly as a value (OLD
        synchronous ``evaluate``).

        Classic keywords are accepted: ``max_retries`` (retries of each model request; a client of
        ours is copied with it), ``max_concurrent_generation`` (= ``max_concurrent_requests``),
        ``max_concurrent_scoring``, ``independent_scoring``, ``on_start(total)``, ``shuffle`` /
        ``shuffle_seed`` (0.3.x: the same permutation as ``datasets``' shuffle, before the first
        ``num_examples``), the 0.1.x ``semaphore`` / ``generation_semaphore`` (the caller's own
        request bound) and ``scoring_semaphore``, and, with nothing
        left for them to do here, ``save_every`` (every rollout is saved as it finishes),
        ``interleave_scoring``, ``use_tqdm``, ``on_log``, ``hf_hub_dataset_name``. Any other keyword
        is refused with a ``TypeError`` (a misspelt option must not be silently ignored).
        """
        opts = _classic_options("evaluate", kwargs)
        if max_concurrent_requests is None:
            max_concurrent_requests = opts.pop("max_concurrent_generation", None)
        for key in ("num_examples", "rollouts_per_example"):
            opts.pop(key, None)
        return SyncOrAsync(
            lambda: self._evaluate(
                client, model, sampling_args, num_examples, rollouts_per_example, max_concurrent,
                max_concurrent_requests, save_results, results_path, resume, timeout_per_rollout, on_progress,
                score_rollouts, state_columns, opts,
            )
        )

    def evaluate_sync(self, client: Any, model: str, sampling_args: Mapping[str, Any] | None = None, **kwargs: Any) -> GenerateOutputs:
        """Synchronous ``evaluate`` (runs in a fresh event loop)."""
        return run_sync(lambda: self._evaluate_kw(client, model, sampling_args, **kwargs))

    async def _evaluate_kw(self, client: Any, model: str, sampling_args: Any, **kwargs: Any) -> GenerateOutputs:
        return await self.evaluate(client, model, sampling_args, **kwargs)

    async def _evaluate(
        self, client: Any, model: str, sampling_args: Any, num_examples: int, rollouts_per_example: int,
        max_concurrent: int, max_concurrent_requests: int | None, save_results: bool, results_path: Any,
        resume: bool, timeout_per_rollout: float | None, on_progress: Any, score_rollouts: bool,
        state_columns: Sequence[str] | None = None, opts: dict[str, Any] | None = None,
    ) -> GenerateOutputs:
        rows = _shuffled(self._rows("eval"), opts or {})
        if num_examples is not None and num_examples > 0:
            rows = rows[:num_examples]
        rpe = max(1, int(rollouts_per_example))
        groups = [[{**row, "rollout_index": r} for r in range(rpe)] for row in rows]
        return await self._run(
            groups, client, model, sampling_args, rollouts_per_example=rpe, score=score_rollouts and self.score_rollouts,
            max_concurrent=max_concurrent, max_concurrent_requests=max_concurrent_requests,
            save_results=save_results, results_path=results_path, resume=resume,
            timeout_per_rollout=timeout_per_rollout, on_progress=on_progress, state_columns=state_columns,
            options=opts,
        )

    def default_results_path(self, model: str) -> Path:
        """``outputs/evals/<env_id>--<model with / replaced by -->/<run_id>/``."""
        env = (self.env_id or type(self).__name__).replace("/", "--")
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        return Path("outputs") / "evals" / f"{env}--{model.replace('/', '--')}" / run_id

    async def _run(
        self,
        groups: list[list[dict[str, Any]]],
        client: Any,
        model: str,
        sampling_args: Any,
        *,
        rollouts_per_example: int,
        score: bool,
        max_concurrent: int,
        max_concurrent_requests: int | None,
        save_results: bool,
        results_path: Any,
        resume: bool,
        timeout_per_rollout: float | None,
        on_progress: Any,
        state_columns: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> GenerateOutputs:
        options = dict(options or {})
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        owned_client = not _is_model_client(client)
        mc = self._model_client(client)
        if options.get("max_retries") is not None:
            mc = _with_max_retries(mc, int(options["max_retries"]))
            owned_client = owned_client or mc is not self._model_client(client)
        run_client: Any = mc
        # The classic caller's own semaphore (0.1.x `semaphore` / `generation_semaphore`) bounds its
        # requests, shared with whatever else the caller bounds with it.
        caller_gate = options.get("generation_semaphore") or options.get("semaphore")
        if caller_gate is not None:
            run_client = _BoundedClient(run_client, caller_gate)
        if max_concurrent_requests is not None and max_concurrent_requests > 0:
            run_client = _BoundedClient(run_client, asyncio.Semaphore(max_concurrent_requests))
        sa = self._merge_sampling_args(sampling_args)
        score_limit = options.get("max_concurrent_scoring")
        score_gate = asyncio.Semaphore(score_limit) if score_limit is not None and score_limit > 0 else None
        if options.get("scoring_semaphore") is not None:
            score_gate = options["scoring_semaphore"]
        independent = bool(options.get("independent_scoring"))

        # Output order follows the inputs: (group position, rollout index).
        # [faultsrun] identities are unique (refused otherwise); the run folder is locked, an
        # existing run refused without resume, and a resume streams (verifiers/utils/results.py).
        position = rollout_positions(groups)
        folder: Path | None = None
        if save_results or results_path is not None or resume:
            folder = Path(results_path) if results_path is not None else self.default_results_path(model)
        kept: list[tuple[tuple[int, int], Any]] = []  # (order key, offset or record)
        states_kept: list[tuple[tuple[int, int], State]] = []
        run_folder = RunFolder(folder, resume=resume) if folder is not None else None
        scan = run_folder.open(position) if run_folder is not None else ResumeScan()
        try:
            writer = ResultsWriter(folder) if folder is not None else None
        except BaseException:
            if run_folder is not None:
                run_folder.close(0.0)
            raise
        if scan.done:
            kept.extend(scan.kept)
            groups = [
                g2 for g2 in ([r for r in g if (_key(r.get("example_id")), r.get("rollout_index", 0)) not in scan.done] for g in groups) if g2
            ]
        total = len(scan.summaries) + sum(len(g) for g in groups)
        requested = total
        on_start = options.get("on_start")
        if callable(on_start):
            try:
                on_start(total)
            except Exception:
                logger.warning("on_start callback failed", exc_info=True)
        tracker = ProgressTracker(total=total, callback=on_progress)
        tracker.start_from(scan.summaries)

        extra_columns = tuple(state_columns or ())

        def finish(state: State, row: Mapping[str, Any]) -> None:
            reward = state.get("reward")
            if isinstance(reward, float) and not math.isfinite(reward):  # set by custom scoring code
                if not state.get("error"):
                    state["error"] = {"type": "ValueError", "message": f"the rollout's reward is {reward}", "source": "reward"}
                state["reward"] = 0.0
            # [faultsrun] saving is part of the rollout: record_for / writer.write never raise for
            # what the rollout holds, and the record keeps the input's identity
            record = record_for(state, row, extra_columns)
            order = (position.get((_key(row.get("example_id")), row.get("rollout_index", 0)), 0), row.get("rollout_index", 0))
            if writer is not None:
                kept.append((order, writer.write(record)))
            else:
                kept.append((order, record))
                states_kept.append((order, state))
            tracker.add(RolloutSummary.from_record(record))

        it = iter(groups)

        scoring = score and (score_gate is not None or independent)

        async def worker() -> None:
            for group in it:
                states = await self._run_group(group, run_client, model, sa, score and not scoring, timeout_per_rollout)
                if scoring:
                    await self._score_apart(states, score_gate, independent)
                for row, st in pair_rows(group, states):
                    finish(st, row)

        n_workers = len(groups) if max_concurrent is None or max_concurrent <= 0 else min(max_concurrent, len(groups))
        try:
            if n_workers:
                with _relaxed_gc():
                    async with asyncio.TaskGroup() as tg:
                        for _ in range(n_workers):
                            tg.create_task(worker())
        except BaseExceptionGroup as group_error:
            # Rollout errors are recorded, never raised; what lands here is a bug or an I/O failure
            # (disk full). Raise it as itself rather than wrapped in a one-item group.
            if len(group_error.exceptions) == 1:
                raise group_error.exceptions[0] from None
            raise
        finally:
            if writer is not None:
                writer.close()
            if run_folder is not None:
                run_folder.close((time.perf_counter() - t0) * 1000.0)
            if owned_client:
                await _close_quietly(mc)
                self._clients.pop(id(client), None)

        if tracker.done != requested:
            # Every requested rollout must come back finished or errored; anything else is a bug
            # (an overridden group runner that dropped states): say so instead of a short result.
            errored = tracker.errors
            raise RuntimeError(
                f"the run lost rollouts: {requested} requested, {tracker.done - errored} finished + {errored} errored"
                + (f"; the {tracker.done} saved ones are in {folder}" if folder is not None else "")
            )
        kept.sort(key=lambda item: item[0])
        states_kept.sort(key=lambda item: item[0])
        finished = datetime.now(UTC)
        meta_extra = {
            "env_id": self.env_id,
            "env_args": self.env_args,
            "model": model,
            "base_url": _client_base_url(mc),
            "sampling_args": sa,
            "time_ms": (time.perf_counter() - t0) * 1000.0,
            "started_at": started.isoformat(),
            # [faultsrun] a resumed run's clock covers all its invocations (run.json)
            **(run_folder.clock((time.perf_counter() - t0) * 1000.0) if run_folder is not None else {}),
            "finished_at": finished.isoformat(),
            "versions": {"verifiers": _verifiers_version(), "environment": self.env_version},
            "path": str(folder) if folder is not None else None,
        }
        metadata = build_metadata(tracker.summaries, rollouts_per_example=rollouts_per_example, extra=meta_extra)
        if folder is not None:
            write_metadata(folder, metadata)
            outputs: Any = LazyOutputs(folder / "results.jsonl", [off for _, off in kept])
            return GenerateOutputs(outputs, metadata, None)
        return GenerateOutputs([rec for _, rec in kept], metadata, [st for _, st in states_kept])

    def make_dataset(
        self,
        results: Any,
        push_to_hub: bool = False,
        hub_name: str | None = None,
        state_columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """OLD helper: a ``datasets.Dataset`` of evaluation results (prompt, completion, answer,
        task, reward, one column per metric, and any ``state_columns``). Pushing to the Hugging Face
        Hub is not supported (no network); save the run folder instead."""
        if push_to_hub:
            raise ValueError("push_to_hub is not supported; use save_results=True and `vf push` for the Environments Hub")
        from datasets import Dataset

        if isinstance(results, SyncOrAsync):
            results = results.result()
        records = list(results["outputs"]) if isinstance(results, Mapping) and "outputs" in results else list(results)
        metric_names: list[str] = []
        for rec in records:
            for k in rec.get("metrics") or {}:
                if k not in metric_names:
                    metric_names.append(k)
        rows = []
        for rec in records:
            row = {k: rec.get(k) for k in ("example_id", "prompt", "completion", "answer", "task", "reward")}
            row["info"] = json.dumps(rec.get("info") or {})
            for m in metric_names:
                row[m] = (rec.get("metrics") or {}).get(m, 0.0)
            for col in state_columns or ():
                row[col] = rec.get(col)
            rows.append(row)
        return Dataset.from_list(rows)

    # ================================================================================================
    # Teardown
    # ================================================================================================

    async def aclose(self) -> None:
        """Run ``@vf.teardown`` hooks (once) and release the thread pool and cached clients.

        Environments with teardown hooks that were never closed are torn down at interpreter exit.
        """
        from verifiers.utils.decorators import collect_hooks

        hooks = () if self._torn_down else collect_hooks(type(self), "teardown")
        self._torn_down = True
        _TEARDOWN_AT_EXIT.discard(self)
        for name in hooks:
            try:
                result = getattr(self, name)()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("teardown hook %s failed", name)
        for _, mc in list(self._clients.values()):
            await _close_quietly(mc)
        self._clients.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def close(self) -> None:
        """Synchronous :meth:`aclose`."""
        run_sync(self.aclose)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env_id={self.env_id!r})"


_GC_DEPTH = 0
_GC_SAVED: tuple[int, int, int] | None = None


@contextlib.contextmanager
def _relaxed_gc() -> Any:
    """Collect young objects less often while a run is going.

    With hundreds of rollouts in flight, many young objects survive a few collections and the
    default gen-0 threshold (700 allocations) makes the cyclic collector walk them again and again:
    measured here it cost up to half of the engine's CPU time per rollout. Raising the threshold
    for the duration of the run (restored afterwards; nested runs share one setting) removes that
    cost; reference counting still frees almost everything immediately.
    """
    global _GC_DEPTH, _GC_SAVED
    if _GC_DEPTH == 0:
        _GC_SAVED = gc.get_threshold()
        gc.set_threshold(max(_GC_SAVED[0], 50_000), _GC_SAVED[1], _GC_SAVED[2])
    _GC_DEPTH += 1
    try:
        yield
    finally:
        _GC_DEPTH -= 1
        if _GC_DEPTH == 0 and _GC_SAVED is not None:
            gc.set_threshold(*_GC_SAVED)


#: Keywords of the classic ``evaluate`` / ``generate`` that are accepted besides the named ones.
_CLASSIC_KEYWORDS = frozenset({
    "max_retries", "max_concurrent_generation", "max_concurrent_scoring", "independent_scoring", "on_start",
    "on_log", "save_every", "interleave_scoring", "use_tqdm", "push_to_hf_hub", "hf_hub_dataset_name",
    "num_examples", "rollouts_per_example", "shuffle", "shuffle_seed", "semaphore", "generation_semaphore",
    "scoring_semaphore",
})


def _classic_options(where: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check the extra keywords of ``evaluate``/``generate``: classic ones pass, others raise."""
    unknown = sorted(k for k in kwargs if k not in _CLASSIC_KEYWORDS)
    if unknown:
        import difflib
        import inspect

        named = [n for n in inspect.signature(getattr(Environment, where)).parameters if n not in ("self", "kwargs")]
        close = difflib.get_close_matches(unknown[0], [*named, *sorted(_CLASSIC_KEYWORDS)], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}{hint}; "
            f"besides its named parameters it accepts the classic {', '.join(sorted(_CLASSIC_KEYWORDS))}"
        )
    if kwargs.get("push_to_hf_hub"):
        raise ValueError("push_to_hf_hub is not supported (no network); save the run with save_results=True")
    max_retries = kwargs.get("max_retries")
    if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0):
        raise ValueError(f"max_retries must be a whole number >= 0, got {max_retries!r}")
    seed = kwargs.get("shuffle_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"shuffle_seed must be a whole number >= 0 or None, got {seed!r}")
    for key in ("semaphore", "generation_semaphore", "scoring_semaphore"):
        gate = kwargs.get(key)
        if gate is not None and not (hasattr(gate, "acquire") and hasattr(gate, "release") and hasattr(gate, "locked")):
            raise TypeError(f"{key} must be an asyncio.Semaphore, got {type(gate).__name__}")
    return dict(kwargs)


def _shuffled(items: list[Any], opts: Mapping[str, Any]) -> list[Any]:
    """The classic ``shuffle=True`` (seed ``shuffle_seed``, default 0): the same permutation as
    ``datasets.Dataset.shuffle(seed=...)``, numpy's ``default_rng(seed).permutation``, so a classic
    caller gets the rows it got before.

    >>> _shuffled([1, 2, 3], {})
    [1, 2, 3]
    >>> sorted(_shuffled(list(range(5)), {"shuffle": True})) == list(range(5))
    True
    """
    if not opts.get("shuffle") or len(items) < 2:
        return items
    import numpy as np

    seed = opts.get("shuffle_seed")
    order = np.random.default_rng(0 if seed is None else seed).permutation(len(items))
    return [items[int(i)] for i in order]


def _with_max_retries(client: Any, max_retries: int) -> Any:
    """A copy of our model client with ``max_retries`` (the client itself when it already has it)."""
    from verifiers.clients import ModelClient

    if not isinstance(client, ModelClient):
        raise TypeError(f"max_retries needs a model client of ours (or a base URL / openai client), got {type(client).__name__}")
    if client.config.max_retries == max_retries:
        return client
    return ModelClient(client.config, max_retries=max_retries)


def _drop_none(message: Any) -> Any:
    if isinstance(message, dict) and any(v is None for k, v in message.items() if k != "content"):
        return {k: v for k, v in message.items() if v is not None or k == "content"}
    return message


def _key(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)


async def _close_quietly(client: Any) -> None:
    close = getattr(client, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:
        logger.debug("closing model client failed", exc_info=True)


def _verifiers_version() -> str:
    try:
        from importlib.metadata import version

        return version("verifiers")
    except Exception:
        return "unknown"


# Signatures of the hook methods (classic public names, for annotations).
from collections.abc import Awaitable  # noqa: E402

StopCondition = Callable[[State], Awaitable[bool]]  # a @vf.stop method
RolloutCleanup = Callable[[State], Awaitable[None]]  # a @vf.cleanup method
EnvironmentTeardown = Callable[[], Awaitable[None]]  # a @vf.teardown method
