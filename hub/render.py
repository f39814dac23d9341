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


@functools.lru_cache(maxsize=512)
def render_readme(source: str | None, content_type: str | None) -> str:
    """Sanitised HTML for a README of the given content type (markdown, or anything else as text)."""
    if not source:
        return ""
    ctype = (content_type or "text/markdown").lower()
    raw = _md.render(source) if "markdown" in ctype else f"<pre>{html.escape(source)}</pre>"
    return nh3.clean(
        raw,
        tags=_TAGS,
        attributes=_ATTRS,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
