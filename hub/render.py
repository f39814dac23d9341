"""README rendering: markdown-it-py to HTML, then nh3 removes anything unsafe (scripts, handlers, js: URLs)."""

from __future__ import annotations

import functools
import html

import nh3
from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": True, "linkify": False}).enable("table").enable("strikethrough")

_TAGS = set(nh3.ALLOWED_TAGS) | {"img", "details", "summary", "del", "s", "input"}
_ATTRS = {k: set(v) for k, v in nh3.ALLOWED_ATTRIBUTES.items()}
_ATTRS.setdefault("img", set()).update({"src", "alt", "title", "width", "height"})
_ATTRS.setdefault("a", set()).update({"href", "title"})
_ATTRS.setdefault("code", set()).update({"class"})
_ATTRS.setdefault("th", set()).update({"align", "style"})
_ATTRS.setdefault("td", set()).update({"align", "style"})
_ATTRS.setdefault("input", set()).update({"type", "checked", "disabled"})


CACHE_MAX_SOURCE = 100_000  # larger READMEs are shown as text, not markdown, so the cache stays a few MB


def render_readme(source: str | None, content_type: str | None) -> str:
    """Sanitised HTML for a README of the given content type (markdown, or anything else as text)."""
    if not source:
        return ""
    if len(source) > CACHE_MAX_SOURCE:
        # markdown costs about 10 us a character, on every view of an uncached page: a longer README
        # is shown as its text (escaping is cheap), so no upload buys seconds of CPU per anonymous view
        return _render(source, "text/plain")
    return _render_cached(source, content_type)


@functools.lru_cache(maxsize=64)
def _render_cached(source: str, content_type: str | None) -> str:
    return _render(source, content_type)


def _render(source: str, content_type: str | None) -> str:
    ctype = (content_type or "text/markdown").lower()
    raw = _md.render(source) if "markdown" in ctype else f"<pre>{html.escape(source)}</pre>"
    return nh3.clean(
        raw,
        tags=_TAGS,
        attributes=_ATTRS,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
