"""A taskset: config in, tasks out (``load()``, which may be a generator, even an endless one).

Iterating sets each task's ``idx`` to its position in ``load()`` and applies the config's
system-prompt file. Views are lazy shallow copies, chainable in any order::

    taskset.include(idx=["0:100"]).exclude(names=["broken"]).shuffle(seed=0).take(5)

``select(SelectConfig)`` chains them in the config's fixed order. 0.3.0's ``head(n)`` and
``view(transform)`` are kept.
"""

from __future__ import annotations

import copy
import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, Self

from typing_extensions import TypeVar

from verifiers.v1.configs import SelectConfig, TaskMatchConfig, TasksetConfig
from verifiers.v1.plugins import concrete_type
from verifiers.v1.task import Task, TaskT

TasksetConfigT = TypeVar("TasksetConfigT", bound=TasksetConfig, default=TasksetConfig)
Transform = Callable[[Iterator[Any]], Iterator[Any]]


class Taskset(ABC, Generic[TaskT, TasksetConfigT]):
    INFINITE: bool = False
    """Whether ``load()`` never ends (a ``take`` or a closed ``include`` range bounds a view)."""

    transform: Transform | None = None
    _bounded: bool | None = None
    _ordered: bool = True

    def __init__(self, config: TasksetConfigT | None = None) -> None:
        declared = self.config_type()
        if config is None:
            config = declared()
        elif not isinstance(config, declared):
            raise TypeError(
                f"{type(self).__name__} takes a {declared.__name__}, not a {type(config).__name__} "
                "(vf.load_taskset narrows a config by its id)"
            )
        self.config = config
        path = config.system_prompt
        if path is not None:
            try:
                self.system_prompt: str | None = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"system_prompt file {str(path)!r} cannot be read: {exc.strerror}") from None
        else:
            self.system_prompt = None

    @abstractmethod
    def load(self) -> Iterable[TaskT]:
        """Build the tasks (``yield`` them for a large or endless taskset)."""

    @property
    def bounded(self) -> bool:
        return not self.INFINITE if self._bounded is None else self._bounded

    def __iter__(self) -> Iterator[TaskT]:
        update = {} if self.system_prompt is None else {"system_prompt": self.system_prompt}
        task_type = self.task_type()

        def stream() -> Iterator[TaskT]:
            loaded = self.load()
            if loaded is None:
                raise TypeError(f"{type(self).__name__}.load() returned None; return or yield its tasks")
            for idx, task in enumerate(loaded):
                if not isinstance(task, Task):
                    raise TypeError(f"{type(self).__name__}.load() yielded {type(task).__name__} at position {idx}, not a Task")
                if task_type is not Task and not isinstance(task, task_type):
                    raise TypeError(
                        f"{type(self).__name__}.load() yielded a {type(task).__name__} at position {idx}; "
                        f"it declares {task_type.__name__} (a taskset yields one task type)"
                    )
                yield task.with_data(idx=idx, **update)

        tasks = stream()
        return tasks if self.transform is None else self.transform(tasks)

    # --- views -------------------------------------------------------------------------------

    def _view(self, transform: Transform) -> Self:
        clone = copy.copy(self)
        prev = self.transform
        clone.transform = transform if prev is None else (lambda tasks: transform(prev(tasks)))
        return clone

    def view(self, transform: Transform) -> Self:
        """0.3.0: a view iterating through ``transform``."""
        return self._view(transform)

    def take(self, num_tasks: int) -> Self:
        """The first ``num_tasks`` tasks (always finite)."""
        _count("take", num_tasks)
        view = self._view(lambda tasks: itertools.islice(tasks, num_tasks))
        view._bounded = True
        view.INFINITE = False  # what 0.3.0 code reads on a head(n) view
        return view

    def head(self, num_tasks: int) -> Self:
        """0.3.0's name of :meth:`take`."""
        return self.take(num_tasks)

    def skip(self, num_tasks: int) -> Self:
        _count("skip", num_tasks)
        return self._view(lambda tasks: itertools.islice(tasks, num_tasks, None))

    def shuffle(self, seed: int | None = 0) -> Self:
        """A shuffled view (reads the whole stream when iterated): refused on an endless view."""
        if not self.bounded:
            raise ValueError(
                f"{type(self).__name__} is infinite - cannot shuffle; bound it first with take(n) "
                "or closed include idx ranges"
            )
        rng_seed = 0 if seed is None else seed

        def shuffled(tasks: Iterator[TaskT]) -> Iterator[TaskT]:
            items = list(tasks)
            random.Random(rng_seed).shuffle(items)
            return iter(items)

        view = self._view(shuffled)
        view._ordered = False
        return view

    def include(self, **match: Any) -> Self:
        """Only the tasks named by ``idx``, ``ids``, ``keys`` or ``names`` (``TaskMatchConfig``)."""
        config = TaskMatchConfig(**match)
        if not self.bounded and (config.ids or config.keys or config.names):
            raise ValueError(
                f"{type(self).__name__} is infinite - include by ids, keys or names may never end; "
                "bound it first with take(n) or closed include idx ranges"
            )
        stop = config.idx_stop if self._ordered else None
        view = self._view(lambda tasks: _match(tasks, config, True, "include", stop))
        if config.idx_stop is not None:
            view._bounded = True
        return view

    def exclude(self, **match: Any) -> Self:
        """All tasks but those ``match`` names."""
        config = TaskMatchConfig(**match)
        if not self.bounded and config.idx_tail:
            raise ValueError(
                f"{type(self).__name__} is infinite - excluding an open idx range drops every task after "
                "its start; exclude a closed range instead"
            )
        return self._view(lambda tasks: _match(tasks, config, False, "exclude", None))

    def select(self, config: SelectConfig) -> Self:
        """The views ``config`` describes: include, exclude, shuffle, skip, limit."""
        view = self
        if not config.include.empty:
            view = view.include(**config.include.model_dump())
        if not config.exclude.empty:
            view = view.exclude(**config.exclude.model_dump())
        if config.shuffle:
            view = view.shuffle(config.seed)
        if config.skip:
            view = view.skip(config.skip)
        if config.limit is not None:
            view = view.take(config.limit)
        return view

    # --- types -------------------------------------------------------------------------------

    @classmethod
    def task_type(cls) -> type[Task]:
        return concrete_type(cls, Task, origin=Taskset) or Task

    @classmethod
    def config_type(cls) -> type[TasksetConfig]:
        return concrete_type(cls, TasksetConfig, origin=Taskset) or TasksetConfig

    @classmethod
    def toolsets(cls, config: TasksetConfigT) -> list[Any]:
        """Tool servers shared by every task of the taskset (``vf.Toolset`` instances: one MCP
        server each per worker process for the whole run; each call sees its rollout's State)."""
        return []


def _count(view: str, n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{view}() takes a number of tasks >= 0, got {n!r}")


def _match(tasks: Iterator[Any], match: TaskMatchConfig, keep: bool, label: str, stop: int | None) -> Iterator[Any]:
    ranges = match.idx_ranges()
    wanted = {"ids": set(match.ids), "keys": set(match.keys), "names": set(match.names)}
    found: dict[str, set[str]] = {k: set() for k in wanted}
    hit: set[int] = set()
    for task in tasks:
        idx = task.data.idx
        if stop is not None and idx >= stop:
            break
        in_ranges = {i for i, r in enumerate(ranges) if idx in r}
        hit |= in_ranges
        values = {"ids": task.data.id, "keys": task.key if match.keys else None, "names": task.data.name}
        hits = [k for k, v in values.items() if v is not None and v in wanted[k]]
        for k in hits:
            found[k].add(values[k])
        if bool(hits or in_ranges) == keep:
            yield task
        if stop is not None and idx + 1 >= stop:
            break
    missing = {k: sorted(wanted[k] - found[k]) for k in wanted if wanted[k] - found[k]}
    if unmatched := [match.idx[i] for i in range(len(ranges)) if i not in hit]:
        missing["idx"] = unmatched
    if missing:
        # usually a typo: say so instead of silently running fewer tasks
        import logging  # only here: logging stays off the import path of a taskset (~3 ms)

        logging.getLogger(__name__).warning("%s matched no task for %s", label, missing)
