"""Judges: a model asked to grade a rollout, with its verdict parsed into a score.

``Judge[Parsed, Config]`` holds what every model-graded reward repeats: a prompt template filled
from named fields (``build_messages``), one chat call (``complete``), a parsed verdict
(``parse``), and, for a judge plugged from config, ``score(task, trace)``. ``evaluate(**fields)``
is build + complete + parse.

The endpoint is the judge config's ``base_url``, else the run's own model client (and its
``model``, else the run's model): a judge never reaches a hosted service nobody configured.

A judge never turns a failure into a score: a call that fails, times out or returns a verdict
``parse`` cannot read raises, and the scoring stage records it on the trace as an error (the
reward stays unscored). Every exchange that got an answer is recorded on the trace
(``info["judge_calls"]``, its usage in ``extra_usage``), also when parsing it failed.

Plugged judges: ``[[env.taskset.task.judges]]`` entries (``TaskConfig.judges``), each resolved
by ``id`` like any plugin (the built-ins ``reference``, ``rubric``, ``decision`` live in
``verifiers.v1.judges``); the task's scoring runs them after its own rewards.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, cast

from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar

from verifiers.v1.configs import JudgeConfig, Judges, judge_config_type
from verifiers.v1.plugins import concrete_type, import_plugin, plugin_class
from verifiers.v1.types import Messages, Usage

if TYPE_CHECKING:
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import Trace

ParsedT = TypeVar("ParsedT", default=Any)
ConfigT = TypeVar("ConfigT", bound=JudgeConfig, default=JudgeConfig)

JudgeView = Literal["last_reply", "full_trace"]
"""What of the rollout the judge reads: the final answer, or the whole transcript."""


class JudgeError(Exception):
    """A judge that could not give a verdict: its call failed, timed out, or its reply had no
    verdict. Raised, so the scoring stage records it instead of scoring the model 0."""


class JudgeVerdictError(JudgeError, ValueError):
    """The judge's reply holds no usable verdict, or the judge cannot be asked (a missing task
    field, no prompt, no endpoint). Also a ``ValueError``, as the original raises for these, so
    a reward written ``except ValueError:`` around a judge catches it the same way; a failed or
    timed-out call stays a plain ``JudgeError``."""


def strict_json_schema(schema: Any) -> Any:
    """``schema`` in the form OpenAI's strict structured outputs accept (the form the original's
    SDK sends): an object schema without ``additionalProperties`` closed, every listed property
    required, a ``default`` of None dropped, a lone ``allOf`` unwrapped, a ``$ref`` with keys beside
    it replaced by what it points at; through properties, items, ``anyOf``/``allOf`` and ``$defs``.
    Returns a new schema; ``schema`` is left as it is."""
    return _strict(schema, schema)


def _strict(node: Any, root: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n, root) for n in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    ref = out.get("$ref")
    if isinstance(ref, str) and len(out) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):  # the referenced schema, the keys beside the $ref over it
            out.pop("$ref")
            return _strict({**target, **out}, root)
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _strict(s, root) for name, s in out["properties"].items()}
        out["required"] = list(out["properties"])
    for key in ("items", "anyOf"):
        if key in out:
            out[key] = _strict(out[key], root)
    all_of = out.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            rest = {k: v for k, v in out.items() if k != "allOf"}
            out = {**_strict(all_of[0], root), **rest}
        else:
            out["allOf"] = _strict(all_of, root)
    for defs in ("$defs", "definitions"):
        if isinstance(out.get(defs), dict):
            out[defs] = {name: _strict(s, root) for name, s in out[defs].items()}
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


class JudgeResponse(BaseModel, Generic[ParsedT]):
    text: str
    parsed: ParsedT | None = None
    usage: Usage | None = None


# --- verdict parsing ----------------------------------------------------------------------------

_BOX = "\\boxed{"


def extract_boxed_answer(text: str, strict: bool = False) -> str:
    """The content of the last ``\\boxed{...}`` in ``text`` (nested braces balanced). Without a
    complete box: ``""`` when ``strict``, else ``text`` itself."""
    start = text.rfind(_BOX)
    if start != -1:
        depth, begin = 0, start + len(_BOX)
        for i in range(begin, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    return text[begin:i]
                depth -= 1
    return "" if strict else text


def verify_boxed_math_answer(response: str | None, answer: str, *, timeout_seconds: int = 5) -> float:
    """1.0 when the reply's last ``\\boxed{}`` is mathematically equal to ``answer`` (itself boxed
    or plain), by math-verify; else 0.0. Reasoning is skipped (only the text after the last
    ``</think>`` counts; a ``<think>`` that never closes scores 0), as is an answer that cannot be
    parsed. ``timeout_seconds`` is the original's knob; the scoring hook's timeout bounds the call."""
    if not response or ("<think>" in response and "</think>" not in response):
        return 0.0
    prediction = extract_boxed_answer(response.rsplit("</think>", 1)[-1], strict=True).strip()
    gold = (extract_boxed_answer(answer, strict=True) or answer).strip()
    if not prediction or not gold:
        return 0.0
    from verifiers.rubrics.math_rubric import verify_math

    try:
        return float(verify_math(f"\\boxed{{{prediction}}}", f"\\boxed{{{gold}}}"))
    except Exception:  # a malformed expression scores 0, as a wrong one does
        return 0.0


_LABEL = r"(?:FINAL\s+(?:JUDGMENT|ANSWER|VERDICT)|JUDGMENT|VERDICT|ANSWER)"


def parse_judge_choice(content: str | None, choices: Sequence[str] = ("A", "B", "C")) -> str | None:
    """The verdict a judge's reply names, as spelled in ``choices`` (matched case-insensitively,
    as whole words); None when the reply names none.

    Reasoning is skipped: only the text after the last ``</think>`` counts, and a reply whose
    ``<think>`` never closes has no verdict. Then, in order: the last line of the form
    ``FINAL JUDGMENT|ANSWER|VERDICT [IS][:|-] <choice>``; the last ``\\boxed{}`` if there is one;
    the first choice after the first ``JUDGMENT`` / ``VERDICT`` / ``ANSWER`` label (a label
    followed by no choice means no verdict); else the last choice named anywhere."""
    if not content or ("<think>" in content and "</think>" not in content):
        return None
    text = content.rsplit("</think>", 1)[-1].strip()
    if not choices:
        return None
    by_upper = {c.upper(): c for c in choices}
    word = r"(?<!\w)(" + "|".join(re.escape(c) for c in sorted(by_upper, key=len, reverse=True)) + r")(?!\w)"
    upper = text.upper()
    # each run of blanks has one quantifier that can take it (adjacent ``[ \t]*`` around optional
    # parts backtrack quadratically: a reply of blanks after the label took minutes)
    final = re.findall(r"^[ \t]*FINAL[ \t]+(?:JUDGMENT|ANSWER|VERDICT)(?:[ \t]*IS)?(?:[ \t]*[:\-])?[ \t]*" + word, upper, re.MULTILINE)
    if final:
        return by_upper[final[-1]]
    boxed = extract_boxed_answer(text, strict=True).strip()
    if boxed:
        upper = boxed.upper()
    label = re.search(r"^[ \t]*" + _LABEL + r"\s*(?:IS\s*)?[:\-]?\s*", upper, re.MULTILINE)
    if label:
        hit = re.search(word, upper[label.end() :])
        return by_upper[hit.group(1)] if hit else None
    hits = re.findall(word, upper)
    return by_upper[hits[-1]] if hits else None


def judge_verdict(text: str, choices: Sequence[str]) -> str:
    """``parse_judge_choice``, raising when the reply names no choice."""
    verdict = parse_judge_choice(text, choices)
    if verdict is None:
        raise JudgeVerdictError(f"the judge's reply names none of {'/'.join(choices)}: {text[:300]!r}")
    return verdict


# --- what the judge reads -----------------------------------------------------------------------


def judge_question(task: TaskData, question_field: str = "") -> str:
    """The task's question: the field ``question_field`` names, else the prompt as text."""
    if not question_field:
        return task.prompt_text
    value = getattr(task, question_field, None)
    if value is None:
        raise JudgeVerdictError(f"the task has no {question_field!r} field (question_field); leave it empty to use the prompt")
    return str(value)


def judge_field(task: TaskData, field: str, what: str) -> str:
    """A task field as text (a list: one item a line); a missing field is a ``JudgeError``."""
    value = getattr(task, field, None)
    if value is None:
        raise JudgeVerdictError(f"the task has no {field!r} field ({what})")
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return str(value)


def judge_response(trace: Trace, view: JudgeView = "last_reply") -> str:
    return trace.transcript if view == "full_trace" else trace.last_reply


def fill(template: str, fields: Mapping[str, Any]) -> str:
    """``template`` with each ``{name}`` of ``fields`` replaced, in one pass: braces of other
    text stay as written, and a value containing ``{name}`` is not filled again."""
    if not fields:
        return template
    pattern = re.compile(r"\{(" + "|".join(re.escape(k) for k in fields) + r")\}")
    return pattern.sub(lambda m: str(fields[m.group(1)]), template)


# --- the judge ----------------------------------------------------------------------------------


def judge_config_cls(cls: type) -> type[JudgeConfig]:
    return concrete_type(cls, JudgeConfig) or JudgeConfig


class Judge(Generic[ParsedT, ConfigT]):
    """A model that grades. Subclass: set ``prompt`` (a template) and override ``parse``; a
    pluggable judge also implements ``score(task, trace)``. ``schema``: a pydantic model the
    reply must be (JSON; asked for with ``response_format``), then ``parsed`` is that model."""

    prompt: str | None = None
    schema: type[BaseModel] | None = None

    def __init__(self, config: ConfigT | None = None) -> None:
        cls = judge_config_cls(type(self))
        if config is None:
            config = cast(ConfigT, cls())
        elif not isinstance(config, cls):
            config = cast(ConfigT, cls.model_validate(config.model_dump(exclude_unset=True) | {"id": config.id}))
        self.config: ConfigT = config
        if config.prompt is not None:
            self.prompt = config.prompt.read_text(encoding="utf-8")

    @property
    def reward_name(self) -> str:
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__.removesuffix("Judge")).lower()
        return self.config.key or snake or "judge"

    def build_messages(self, **fields: Any) -> str | Messages:
        if self.prompt is None:
            raise JudgeVerdictError(f"{type(self).__name__} has no prompt: set `prompt` or override build_messages")
        return fill(self.prompt, fields)

    def parse(self, response: JudgeResponse[ParsedT]) -> ParsedT:
        return cast(ParsedT, response.parsed if self.schema is not None else response.text)

    async def score(self, task: TaskData, trace: Trace) -> float | Mapping[str, float]:
        raise NotImplementedError(
            f"{type(self).__name__} has no score(task, trace), so it cannot be plugged into "
            "[env.taskset.task.judges]; implement score, or call evaluate from a @vf.reward"
        )

    async def complete(
        self, messages: str | Messages, *, trace: Trace | None = None, schema: type[BaseModel] | None = None,
        parse: Callable[[JudgeResponse[Any]], Any] | None = None, **sampling: Any,
    ) -> JudgeResponse[Any]:  # fmt: skip
        """One call to the judge's model; ``parse`` fills ``parsed``. With ``trace``, the exchange
        is recorded on it whenever an answer came back (even if parsing it then failed)."""
        from verifiers.v1.types import UserMessage, messages_to_openai

        msgs = [UserMessage(content=messages)] if isinstance(messages, str) else list(messages)
        # messages as v1 models, or already as OpenAI dicts (passed through)
        wire = [m if isinstance(m, Mapping) else messages_to_openai([m])[0] for m in msgs]  # type: ignore[list-item]
        client, model, owned = self._endpoint()
        args = {**self.config.sampling.model_dump(exclude_none=True), **sampling}
        if schema is not None:
            args["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": strict_json_schema(schema.model_json_schema()), "strict": True},
            }
            args["stream"] = False  # the body the openai SDK's structured-output parse sends
        response: JudgeResponse[Any] | None = None
        try:
            try:
                async with asyncio.timeout(self.config.timeout):
                    raw = await client.chat(model=model, messages=wire, sampling_args=args)
            except TimeoutError:
                raise JudgeError(f"judge {self.reward_name!r} did not answer within {self.config.timeout:g} s") from None
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                raise JudgeError(f"judge {self.reward_name!r}: the call failed: {type(exc).__name__}: {exc}") from exc
            message = raw.message or {}
            response = JudgeResponse(text=message.get("content") or "", usage=Usage.of_response(raw))
            if schema is not None:
                if message.get("refusal"):
                    raise JudgeError(f"judge {self.reward_name!r} refused: {message['refusal']}")
                try:
                    response.parsed = schema.model_validate_json(response.text)
                except ValidationError as exc:
                    raise JudgeVerdictError(f"judge {self.reward_name!r} replied no valid {schema.__name__}: {response.text[:300]!r}") from exc
            if parse is not None:
                response.parsed = parse(response)
            return response
        finally:
            if owned:
                await client.aclose()
            if trace is not None and response is not None:
                trace.record_judge_call(name=self.reward_name, request={"model": model, "messages": wire}, response=response)

    async def evaluate(self, *, trace: Trace | None = None, **fields: Any) -> JudgeResponse[ParsedT]:
        """``build_messages(**fields)``, one ``complete``, ``parse``."""
        return await self.complete(self.build_messages(**fields), trace=trace, schema=self.schema, parse=self.parse)

    # --- the endpoint ---------------------------------------------------------------------------

    def _endpoint(self) -> tuple[Any, str, bool]:
        """(client, model, whether the client is this call's own to close)."""
        from verifiers.v1.context import current_run, judges_answered_by_run

        run = current_run()
        cfg = self.config
        check_model = judges_answered_by_run()
        if run is not None and check_model is not None:  # vf validate: the scripted model answers
            return run.client, check_model, False
        model = cfg.model or (run.model if run is not None else None)
        if cfg.base_url is None:
            if run is None:
                raise JudgeVerdictError(
                    f"judge {self.reward_name!r} has no endpoint: set its base_url (and model), "
                    "or call it inside a v1 run, whose model client it then uses"
                )
            return run.client, cast(str, model), False
        if model is None:
            raise JudgeVerdictError(f"judge {self.reward_name!r} sets base_url but no model, and there is no run to take one from")
        return self.own_client(), model, True

    def own_client(self) -> Any:
        """A model client for the config's own ``base_url`` (closed after each call)."""
        from verifiers.clients import ModelClient

        cfg = self.config
        headers = dict(cfg.headers)
        headers.update({name: os.environ[var] for name, var in cfg.headers_from_env.items() if var in os.environ})
        fields: dict[str, Any] = {"base_url": cast(str, cfg.base_url), "api_key_var": cfg.api_key_var, "headers": headers}
        if cfg.timeout is not None:
            fields["timeout"] = cfg.timeout
        return ModelClient.from_any(fields)


# --- loading by id ------------------------------------------------------------------------------


def import_judge(judge_id: str) -> Any:
    return import_plugin(judge_id, "judge")


def judge_class(judge_id: str) -> type[Judge]:
    return plugin_class(import_judge(judge_id), Judge, "judge")


def load_judge(config: JudgeConfig | Mapping[str, Any]) -> Judge:
    """The judge a config names (``id``), built with its config validated into its own class."""
    judge_id = str(config.get("id") or "") if isinstance(config, Mapping) else config.id
    if not judge_id:
        raise JudgeVerdictError("a plugged judge needs an id (reference, rubric, decision, or an installed package)")
    if isinstance(config, Mapping):
        config = judge_config_type(judge_id).model_validate(dict(config))
    return judge_class(judge_id)(config)


def first_json_object(text: str, key: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has ``key`` (prose and echoed examples around it
    are skipped); None when there is none. Bounded: at most 200 candidate openings are tried."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    tries = 0
    while start != -1 and tries < 200:
        tries += 1
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            obj = None
        if isinstance(obj, dict) and key in obj:
            return obj
        start = text.find("{", start + 1)
    return None


__all__ = [
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeResponse",
    "JudgeVerdictError",
    "JudgeView",
    "Judges",
    "extract_boxed_answer",
    "import_judge",
    "judge_class",
    "judge_config_type",
    "load_judge",
    "parse_judge_choice",
]
