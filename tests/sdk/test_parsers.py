"""Parsers and answer extractors, as environments use them."""

from __future__ import annotations

import pytest

import verifiers as vf


def conv(*contents: str) -> list[dict]:
    return [{"role": "assistant", "content": c} for c in contents]


def test_extractors() -> None:
    assert vf.extract_boxed_answer(r"so \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert vf.extract_boxed_answer(r"\boxed{1} then \boxed{{2}}") == "{2}"
    assert vf.extract_boxed_answer("no box") == "no box"
    assert vf.extract_hash_answer("work\n#### 1234") == "1234"
    assert vf.extract_hash_answer("no hashes") == "no hashes"  # the classic meaning: text unchanged


def test_base_parser_and_message_helpers() -> None:
    p = vf.Parser(extract_fn=str.upper)
    completion = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "t", "tool_call_id": "1"},
        {"role": "assistant", "content": "last"},
        {"role": "assistant", "content": None},
    ]
    assert p.parse_answer(completion) == "LAST"
    assert p.parse_answer("plain") == "PLAIN"
    assert len(p.get_assistant_messages(completion)) == 3
    assert len(p.get_tool_messages(completion)) == 1
    assert p.get_format_reward_func()(completion=completion) == 1.0
    with pytest.raises(TypeError, match="unexpected keyword argument 'custom'"):  # as in the classic Parser
        vf.Parser(custom="x")


def test_xml_parser_with_alternatives() -> None:
    """As the classic library (0.1.7 and 0.3.0 give the same; checked against both wheels): each tag
    name is looked up on its own, ``format`` writes the canonical tag and needs every field, the
    format string lists the alternatives, and the format reward adds 0.4 x the share of fields
    present, 0.2 for spacing, 0.2 for starting and 0.2 for ending on a field's tag."""
    parser = vf.XMLParser(fields=["think", ("answer", "final")], answer_field="answer")
    parsed = parser.parse("<think>\nhmm\n</think>\n<final> 42 </final>")
    assert parsed.think == "hmm" and parsed.answer is None and parsed.final == "42"
    assert parser.parse("nothing").answer is None
    assert parser.parse("<answer>1</answer><answer>2</answer>").answer == "1"
    assert parser.parse("<answer>1</answer><answer>2</answer>", last=True).answer == "2"
    # the last assistant message with an answer, and that message's first one
    assert parser.parse_answer(conv("<answer>1</answer>", "<answer>2</answer><answer>3</answer>", "no tags")) == "2"
    assert parser.format(think="a", final="b") == "<think>\na\n</think>\n<answer>\nb\n</answer>"
    with pytest.raises(ValueError, match="'answer'"):
        parser.format(think="a")
    assert parser.get_format_str() == "<think>\n...\n</think>\n<[ answer | final ]>\n...\n</[ answer | final ]>"
    assert vf.XMLParser(["think", "answer"]).get_format_str() == "<think>\n...\n</think>\n<answer>\n...\n</answer>"
    fmt = parser.get_format_reward_func()
    assert fmt(completion=conv("<think>x</think><answer>y</answer>")) == pytest.approx(1.0)
    assert fmt(completion=conv("no tags at all")) == pytest.approx(0.2)
    assert fmt(completion=conv("<answer>y</answer>")) == pytest.approx(0.6)  # one field of two, no start tag
    assert fmt(completion=conv("<think>x</think>\n<answer>y")) == pytest.approx(0.8)  # unclosed: present, no end
    assert fmt(completion=conv("<think>x</think><final>y</final> trailing")) == pytest.approx(0.8)
    assert parser.get_fields() == ["think", "answer"]


def test_think_parsers() -> None:
    think = vf.ThinkParser(extract_fn=vf.extract_boxed_answer)
    assert think.parse(r"<think>work</think> the answer is \boxed{7}") == "7"
    assert think.parse("never closed <think> thinking") == ""
    fmt = think.get_format_reward_func()
    assert fmt(completion=conv("<think>a</think>answer")) == 1.0
    assert fmt(completion=conv("<think>a</think>")) == 0.0
    assert fmt(completion=conv("answer only")) == 0.0
    maybe = vf.MaybeThinkParser(extract_fn=vf.extract_boxed_answer)
    assert maybe.parse(r"<think>x</think>\boxed{3}") == "3"
    assert maybe.parse(r"\boxed{4}") == "4"
    assert maybe.parse_answer(conv(r"<think>\boxed{1}</think> \boxed{2}")) == "2"
