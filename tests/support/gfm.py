"""What GitHub's Markdown renderer would turn into something other than plain text, written from
the GFM spec (https://github.github.com/gfm/) and GitHub's own references, without a dependency.

:func:`live_constructs` lists, for one line of Markdown source, the autolinks (CommonMark's
``<scheme:...>`` and ``<address@host>``; GFM's extended www, URL, e-mail and ``mailto:``/``xmpp:``
autolinks), GitHub's ``@mentions`` and ``#123`` references, raw HTML, links and images, and
emphasis or strikethrough delimiters that are not backslash-escaped. Each rule is checked both on
the source as written and on the text a parser's inline pass would see (backslash escapes and
entities resolved), so a construct is caught whichever stage of the renderer looks for it.
"""

from __future__ import annotations

import html
import re

# GFM 6.9: a valid domain is segments of alphanumerics, "_" and "-" separated by ".", with at
# least one period (the www rule) .
_DOMAIN = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+"
# Extended autolinks start at the beginning of a line, after whitespace, or after * _ ~ (.
_START = r"(?:^|(?<=[\s*_~(]))"
RULES = {
    "www autolink": re.compile(_START + r"(?i:www)\." + r"[A-Za-z0-9_-]+"),
    "url autolink": re.compile(_START + r"(?i:https?|ftp)://" + r"[A-Za-z0-9_-]+"),
    # GFM 6.9 extended e-mail: [A-Za-z0-9.+_-]+ "@" then domain segments; recognised anywhere.
    "email autolink": re.compile(r"[A-Za-z0-9.+_-]+@" + _DOMAIN),
    "protocol autolink": re.compile(r"(?:mailto|xmpp):[A-Za-z0-9.+_-]+@" + _DOMAIN),
    "commonmark autolink": re.compile(
        r"<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>"
        r"|<[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9.-]+>"
    ),
    "raw html": re.compile(r"<[A-Za-z/!?]"),
    "mention": re.compile(r"(?:^|(?<=[^A-Za-z0-9_`]))@[A-Za-z0-9]"),
    "issue reference": re.compile(r"(?:^|(?<=[^A-Za-z0-9_&]))#\d"),
    "cross-repository reference": re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d"),
}
#: Rules that only the source can trigger (an entity or escape never forms a tag or an autolink).
SOURCE_ONLY = ("commonmark autolink", "raw html")
# In the source only: an unescaped delimiter ([ ] for links and images, * _ ~ for emphasis and
# strikethrough, | for table cells, ` for code spans, < for HTML) is one a parser acts on.
_UNESCAPED = re.compile(r"(?<!\\)(?:\\\\)*([\[\]*_~|`<])")
_BLOCK = re.compile(r"^\s{0,3}(?:#{1,6}(?:\s|$)|[-+*]\s|\d{1,9}[.)]\s|>|=+\s*$|-+\s*$)")
_BACKSLASH = re.compile(r"\\([!-/:-@\[-`{-~])")


def inline_text(source: str) -> str:
    """``source`` as the text nodes of an inline pass would hold it: backslash escapes and
    entity references resolved."""
    return html.unescape(_BACKSLASH.sub(r"\1", source))


def live_constructs(source: str, *, block_start: bool = True) -> list[str]:
    """What in one line of Markdown source would render as a link, an image, HTML, a mention,
    a reference, emphasis, a table break or a block (heading, list, quote). Empty when the line
    shows as plain text."""
    found = []
    for text in (source, inline_text(source)):
        for name, rule in RULES.items():
            if name in SOURCE_ONLY and text is not source:
                continue  # "&lt;b&gt;" shows as "<b>": text, not a tag
            if rule.search(text) and name not in found:
                found.append(name)
    for m in _UNESCAPED.finditer(source):
        found.append(f"unescaped {m.group(1)!r}")
    if block_start and _BLOCK.search(source):
        found.append("block marker")
    return found
