"""The install commands ``vf info`` shows: the hub writes them (``hub/queries.py``
``install_commands``, also on the env page and in the API); the client only checks their shape.

The hub's answer is untrusted input: it must be strings (pip: a list of them) and is printed through
``printable`` by the CLI, never run by it. Advice that mixes package indexes for one command
(``--extra-index-url``, ``--find-links``, two ``--index-url``, uv's ``unsafe-*`` index strategies) is
refused, not printed: pip takes the highest version of a name across all its indexes, so whoever
holds the name on either side could take it (hub/README.md, "Install instructions never mix
indexes").
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from verifiers.hub_client.errors import HubClientError


@dataclass
class InstallAdvice:
    vf: str
    uv: str
    pip: list[str] = field(default_factory=list)
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"vf": self.vf, "uv": self.uv, "pip": self.pip, "note": self.note}


def install_advice(answer: Any) -> InstallAdvice:
    """The ``install_commands`` of a hub answer (version or environment detail)."""
    raw = answer.get("install_commands") if isinstance(answer, dict) else None
    ok = (
        isinstance(raw, dict)
        and isinstance(raw.get("vf"), str)
        and isinstance(raw.get("uv"), str)
        and isinstance(raw.get("pip"), list)
        and all(isinstance(line, str) for line in raw["pip"])
        and (raw.get("note") is None or isinstance(raw.get("note"), str))
    )
    if not ok:
        raise HubClientError(
            "the hub sent no usable install commands (install_commands: vf, uv, pip lines)",
            hint="the hub may be older than this client; upgrade the hub",
        )
    for line in [raw["uv"], *raw["pip"]]:
        why = mixed_indexes(line)
        if why:
            raise HubClientError(
                f"the hub's install advice mixes package indexes ({why}); refusing to print it",
                hint="pip takes a name's highest version from any index it is given, so either index could "
                "supply it; install with `vf install owner/name` instead, and tell the hub's operator",
            )
    return InstallAdvice(vf=raw["vf"], uv=raw["uv"], pip=list(raw["pip"]), note=raw.get("note"))


# Options and variables that add an index (or a page of links) beside the one a command names.
_EXTRA = {"--extra-index-url", "--find-links", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_EXTRA_INDEX_URL",
          "UV_FIND_LINKS"}


def _spelled_out(key: str) -> str:
    """pip takes any unambiguous start of a long option (``--extra-ind`` is ``--extra-index-url``):
    the option such a start may stand for, else ``key`` itself."""
    if key.startswith("--") and len(key) > 3:
        for full in ("--extra-index-url", "--find-links", "--index-url"):
            if full.startswith(key):
                return full
    return key


def mixed_indexes(line: str) -> str | None:
    """Why one advised shell line would let one name come from two indexes (None: it would not)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return "a command that cannot be parsed"
    indexes = 0
    for i, word in enumerate(words):
        if word in ("&&", "||", ";", "|"):  # each command of a chain counts its own indexes
            indexes = 0
            continue
        key, _, value = word.partition("=")
        key = _spelled_out(key)
        short = word[:2] if word.startswith("-") and not word.startswith("--") else ""
        if key in _EXTRA or short == "-f":  # pip's and uv's -f is --find-links
            return f"{key if key in _EXTRA else '--find-links'} in {line[:200]!r}"
        if key == "--index-url" or short == "-i":
            indexes += 1
            if indexes > 1:
                return f"two --index-url in {line[:200]!r}"
        if key in ("--index-strategy", "UV_INDEX_STRATEGY"):
            strategy = value or (words[i + 1] if i + 1 < len(words) else "")
            if strategy.startswith("unsafe"):
                return f"--index-strategy {strategy} in {line[:200]!r}"
    return None
