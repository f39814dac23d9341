"""Parsers: turn model output (a string or a list of chat messages) into an answer and a format score."""

from verifiers.parsers.maybe_think_parser import MaybeThinkParser
from verifiers.parsers.parser import Parser
from verifiers.parsers.think_parser import ThinkParser
from verifiers.parsers.xml_parser import XMLParser

__all__ = ["MaybeThinkParser", "Parser", "ThinkParser", "XMLParser"]
