"""What both checkers share (``verifiers.check`` for classic environments, ``verifiers.v1.check``
for v1 packages): the verdict (:class:`CheckReport`, one JSON schema whatever the API), the
scripted model's replies, and the leftovers check run after teardown."""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: How long threads and processes may take to wind down after ``close()`` before they count as left
#: running (sandboxes and thread pools stop asynchronously).
LEFTOVER_GRACE_S = 10.0
MAX_RECORDED_REPLIES = 8
#: The model name judge calls are sent under during a check, so that the scripted server tells them
#: from the environment's own model calls (it answers them ``yes``).
JUDGE_MODEL = "vf-check-judge"

@dataclass
class CheckResult:
    """One named check: ``ok`` (True/False), or ``skipped`` when it did not apply or could not run."""

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


@dataclass
class CheckReport:
    """What a check found (``verifiers.check_environment``). ``ok`` when no check failed and the
    required one ran."""

    target: str
    env_id: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    #: What the scripted model answered (the first few replies, as text), for people reading a verdict.
    replies: list[str] = field(default_factory=list)
    #: The check that must have passed (not merely been skipped) for the verdict to pass: the
    #: rollouts, or a v1 validation's model-free check (``--only-gold`` ...).
    required: str = field(default="rollouts", repr=False)

    @property
    def ok(self) -> bool:
        return all(c.ok or c.skipped for c in self.checks) and any(c.name == self.required and c.ok for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.ok and not c.skipped]

    def add(self, name: str, ok: bool, detail: str = "", *, skipped: bool = False) -> bool:
        self.checks.append(CheckResult(name, ok, detail, skipped))
        return ok

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able verdict: ``{"ok", "target", "env_id", "checks": [...], "rollouts": [...]}``."""
        return {
            "ok": self.ok,
            "target": self.target,
            "env_id": self.env_id,
            "checks": [asdict(c) for c in self.checks],
            "rollouts": self.rollouts,
            "replies": self.replies,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def __str__(self) -> str:
        lines = [f"{self.env_id or self.target}: {'passed' if self.ok else 'FAILED'}"]
        for c in self.checks:
            mark = "skip" if c.skipped else ("ok" if c.ok else "FAIL")
            lines.append(f"  {mark:<4} {c.name:<12} {c.detail}".rstrip())
        return "\n".join(lines)


# ------------------------------------------------------------------------------ scripted replies
def sample_arguments(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """Arguments that satisfy a tool's JSON schema: the first enum value, else a small value of the
    declared type, for its required properties (all properties when none is marked required).

    >>> sample_arguments({"type": "object", "properties": {"code": {"type": "string"},
    ...     "n": {"type": "integer"}, "mode": {"enum": ["fast", "slow"]}}, "required": ["code", "mode"]})
    {'code': '1', 'mode': 'fast'}
    """
    props = dict((schema or {}).get("properties") or {})
    required = list((schema or {}).get("required") or props)
    return {name: _sample_value(props.get(name) or {}) for name in required}


def _sample_value(prop: Mapping[str, Any]) -> Any:
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and prop.get("anyOf"):
        return _sample_value(next((p for p in prop["anyOf"] if p.get("type") != "null"), {}))
    return {
        "integer": 1,
        "number": 1.0,
        "boolean": True,
        "array": [],
        "object": {},
        "null": None,
    }.get(str(kind), "1")


def final_text(parser: Any, answer: str) -> str:
    """A reply that parsers of every common shape (and ``parser``'s own format, when given) read
    ``answer`` from."""
    parts = ["<think>\nChecking the environment.\n</think>"]
    fmt = getattr(parser, "format", None)
    fields = getattr(parser, "get_fields", None)
    if callable(fmt) and callable(fields):
        try:
            parts.append(fmt(**{name: answer for name in fields() if name != "think"}))
        except Exception:  # a custom parser's format(): the generic shapes below still apply
            pass
    parts += [f"<answer>{answer}</answer>", f"\\boxed{{{answer}}}", answer]
    return "\n".join(parts)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def scripted_replies(parser: Any, rows: Sequence[Mapping[str, Any]], record: list[str] | None = None) -> Callable[[Any], Any]:
    """The check's model: a judge's question (``JUDGE_MODEL``) is answered ``yes``; a first turn
    that offers tools calls every tool once with arguments built from its schema; any other turn
    answers the reference answer of the row whose prompt it was asked (``rows``: ``prompt`` and
    ``answer``) in every common format. ``record`` collects the first few replies as text."""
    from verifiers.testing.scripted import reply, tool_call, tool_calls

    answers: dict[str, str] = {}
    for row in rows:
        prompt = row.get("prompt")
        if isinstance(prompt, list) and prompt:
            answers.setdefault(_message_text(prompt[-1].get("content")), str(row.get("answer") or ""))
        elif isinstance(prompt, str):
            answers.setdefault(prompt, str(row.get("answer") or ""))

    def script(request: Any) -> Any:
        if request.get("model") == JUDGE_MODEL:  # a judge's question (verifiers.check._judges_on)
            return reply("yes")
        if request.tools and request.turn == 0:
            calls = [
                tool_call(t["function"]["name"], sample_arguments(t["function"].get("parameters")), id=f"check-{i}")
                for i, t in enumerate(request.tools)
            ]
            if record is not None and len(record) < MAX_RECORDED_REPLIES:
                record.append("tool calls: " + ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls))
            return tool_calls(*calls, content="Calling every tool once.")
        texts = [request.prompt] if request.prompt is not None else [
            _message_text(m.get("content")) for m in request.messages if m.get("role") == "user"
        ]
        answer = next((answers[t] for t in texts if t in answers), "1")
        text = final_text(parser, answer)
        if record is not None and len(record) < MAX_RECORDED_REPLIES:
            record.append(text)
        return reply(text)

    return script



def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {Path(frame[0].filename).name}:{frame[0].lineno})" if frame else ""
    return text.splitlines()[0][:500] + where


def child_pids() -> set[int]:
    """Live child processes of this process (Linux ``/proc``); empty elsewhere."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return pids


def check_leftovers(
    report: CheckReport, threads_before: set[int | None], children_before: set[int], grace: float = LEFTOVER_GRACE_S
) -> None:
    """The ``leftovers`` check: no child process or non-daemon thread started since the
    snapshot is alive once ``grace`` seconds have passed."""
    deadline = time.monotonic() + grace
    while True:
        threads = [t for t in threading.enumerate() if t.ident not in threads_before and not t.daemon and t.is_alive()]
        children = child_pids() - children_before
        if (not threads and not children) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    left = [f"thread {t.name}" for t in threads] + [f"process {pid}" for pid in sorted(children)]
    report.add("leftovers", not left, ", ".join(left[:5]) or "nothing left running")
