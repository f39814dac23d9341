"""The classic ``evaluate`` / ``generate`` keywords beyond the named parameters, checked once.

0.1.x callers pass their own ``semaphore`` / ``generation_semaphore`` / ``scoring_semaphore``;
0.3.x callers ``max_concurrent_generation`` / ``_scoring``, ``independent_scoring``, ``on_start``,
``shuffle`` / ``shuffle_seed`` and ``max_retries``; a few (``save_every``, ``use_tqdm`` ...) have
nothing left to do here and are accepted as no-ops. Anything else is refused (a misspelt run
option must not be silently ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["CLASSIC_RUN_OPTIONS", "classic_options", "shuffled", "with_max_retries"]


#: Keywords of the classic ``evaluate`` / ``generate`` that are accepted besides the named ones.
CLASSIC_RUN_OPTIONS = frozenset({
    "max_retries", "max_concurrent_generation", "max_concurrent_scoring", "independent_scoring", "on_start",
    "on_log", "save_every", "interleave_scoring", "use_tqdm", "push_to_hf_hub", "hf_hub_dataset_name",
    "num_examples", "rollouts_per_example", "shuffle", "shuffle_seed", "semaphore", "generation_semaphore",
    "scoring_semaphore",
})


def classic_options(method: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check the extra keywords of ``method`` (``Environment.evaluate`` / ``generate``): classic
    ones pass, others raise naming the closest of ``method``'s parameters or the classic options."""
    where = method.__name__
    unknown = sorted(k for k in kwargs if k not in CLASSIC_RUN_OPTIONS)
    if unknown:
        import difflib
        import inspect

        named = [n for n in inspect.signature(method).parameters if n not in ("self", "kwargs")]
        close = difflib.get_close_matches(unknown[0], [*named, *sorted(CLASSIC_RUN_OPTIONS)], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}{hint}; "
            f"besides its named parameters it accepts the classic {', '.join(sorted(CLASSIC_RUN_OPTIONS))}"
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


def shuffled(items: list[Any], opts: Mapping[str, Any]) -> list[Any]:
    """The classic ``shuffle=True`` (seed ``shuffle_seed``, default 0): the same permutation as
    ``datasets.Dataset.shuffle(seed=...)``, numpy's ``default_rng(seed).permutation``, so a classic
    caller gets the rows it got before.

    >>> shuffled([1, 2, 3], {})
    [1, 2, 3]
    >>> sorted(shuffled(list(range(5)), {"shuffle": True})) == list(range(5))
    True
    """
    if not opts.get("shuffle") or len(items) < 2:
        return items
    import numpy as np

    seed = opts.get("shuffle_seed")
    order = np.random.default_rng(0 if seed is None else seed).permutation(len(items))
    return [items[int(i)] for i in order]


def with_max_retries(client: Any, max_retries: int) -> Any:
    """A copy of our model client with ``max_retries`` (the client itself when it already has it)."""
    from verifiers.clients import ModelClient

    if not isinstance(client, ModelClient):
        raise TypeError(f"max_retries needs a model client of ours (or a base URL / openai client), got {type(client).__name__}")
    if client.config.max_retries == max_retries:
        return client
    return ModelClient(client.config, max_retries=max_retries)
