"""Constructor keywords the classic API accepted, and what happens to the others.

Classic constructors (``Environment`` and its subclasses in 0.1.x and 0.3.x, ``Rubric`` in 0.1.x)
took ``**kwargs`` and turned every unknown keyword into an attribute, and real environments rely on
it: a 0.1.x environment hands ``SingleTurnEnv`` its ``max_concurrent``. Ours does the same, so such
an environment loads; a keyword that is neither a parameter nor one classic code is known to pass
(below) is still kept, with a warning naming the closest accepted keyword, so that a typo
(``sytem_prompt=``) is never silent. Only where every classic release refused a keyword (the
parsers took no ``**kwargs``) is it refused. Only the standard library is imported.
"""

from __future__ import annotations

import difflib
import inspect
import os
import warnings
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["CLASSIC_ENVIRONMENT_KEYWORDS", "CLASSIC_RUN_KEYWORDS", "accept_keywords"]

#: Accepted by the classic ``Environment`` and kept as attributes: ``map_kwargs`` (arguments of the
#: dataset ``map`` that formats prompts; ours formats rows itself) and ``pass_threshold`` (the
#: reward counted as a pass in pass@k).
CLASSIC_ENVIRONMENT_KEYWORDS = frozenset({"map_kwargs", "pass_threshold"})

#: Run options of the classic ``evaluate`` / ``generate`` that classic environments also passed to
#: their constructors (0.1.x environments set them there and read them back): kept as attributes,
#: without a warning. They do not configure our runs; the run's own keywords do.
CLASSIC_RUN_KEYWORDS = frozenset({
    "max_concurrent", "max_concurrent_requests", "max_concurrent_generation", "max_concurrent_scoring",
    "semaphore", "generation_semaphore", "scoring_semaphore", "rollouts_per_example", "num_examples",
    "timeout_per_rollout", "max_retries", "interleave_scoring", "save_every", "independent_scoring",
})

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@lru_cache(maxsize=256)
def _named_parameters(cls: type) -> frozenset[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names.update(
            p.name for p in params
            if p.name != "self" and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        )
    return frozenset(names)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this package (the environment's own code),
    however many ``super().__init__`` calls lie between."""
    import sys

    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def _hint(name: str, accepted: list[str]) -> str:
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def accept_keywords(obj: Any, kwargs: Mapping[str, Any], classic: Iterable[str] = (), *, refuse: bool = False) -> dict[str, Any]:
    """The keywords of ``kwargs`` to keep as attributes of ``obj`` (the classic effect).

    ``classic`` ones pass silently; any other is kept with a warning naming the closest accepted
    keyword, or, with ``refuse=True`` (a class whose classic releases all refused extra keywords),
    raises ``TypeError``.

    >>> class Box:
    ...     def __init__(self, size=1, **kwargs):
    ...         vars(self).update(accept_keywords(self, kwargs, classic={"label"}))
    >>> Box(label="x").label
    'x'
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     Box(sise=2).sise
    2
    >>> print(caught[0].message)
    Box() got an unknown keyword argument 'sise' (did you mean 'size'?); it is kept as an attribute, as classic releases did. Accepted: label, size
    """
    classic = frozenset(classic)
    unknown = [k for k in kwargs if k not in classic and k not in CLASSIC_RUN_KEYWORDS]
    if unknown:
        accepted = sorted(_named_parameters(type(obj)) | classic)
        name = type(obj).__name__
        if refuse:
            raise TypeError(
                f"{name}() got an unexpected keyword argument {unknown[0]!r}{_hint(unknown[0], accepted)}; "
                f"it accepts: {', '.join(accepted)}"
            )
        for key in unknown:
            warnings.warn(
                f"{name}() got an unknown keyword argument {key!r}{_hint(key, accepted)}; it is kept as an "
                f"attribute, as classic releases did. Accepted: {', '.join(accepted)}",
                UserWarning,
                stacklevel=_caller_level(),
            )
    return dict(kwargs)
