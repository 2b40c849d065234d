"""Untrusted text made inert for the places that show it as text: terminals and CSV files.

One sanitizer, :func:`visible`, for every string from a trace, a rule file or a file name that the
terminal or a CSV cell shows. Characters a terminal acts on or that reorder what is displayed
become visible escapes (``\\x1b``, ``\\u202e``), so an ESC sequence that would set the window
title, clear the screen or move the cursor, or a bidi override that would show ``exe.txt`` for
``txt.exe``, shows up as plain text instead:

- C0 controls U+0000-U+001F except the ones the caller allows (tab, newline), and DEL U+007F;
- C1 controls U+0080-U+009F (U+009B is a one-byte CSI, U+009D an OSC in many terminals);
- bidi embeddings and overrides U+202A-U+202E, isolates U+2066-U+2069, and the marks U+200E,
  U+200F, U+061C;
- line and paragraph separators U+2028, U+2029 (line breaks to some tools);
- lone surrogates U+D800-U+DFFF (from file names or JSON ``\\ud800`` escapes), which cannot be
  encoded as UTF-8 and would end the command with an encoding error.

:func:`visible_frame` applies it to a frame's text columns with Polars expressions (only the
distinct offending values go through Python), and :func:`no_formulas` neutralises spreadsheet
formulas in CSV cells (OWASP's rule).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

_OTHERS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_HOSTILE = re.compile(f"[\x00-\x1f{_OTHERS}]")
_HOSTILE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHERS}]")
#: The same class for Polars (Rust regex; Polars strings never hold surrogates).
POLARS_HOSTILE = (
    r"[\x{00}-\x{1f}\x{7f}-\x{9f}\x{061c}\x{200e}\x{200f}\x{2028}\x{2029}"
    r"\x{202a}-\x{202e}\x{2066}-\x{2069}]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every character a terminal could act on written as a visible escape.

    Tabs are escaped too (they would break a table's alignment), and so are newlines unless
    ``keep_newlines`` (text of several lines, shown as such)."""
    s = str(text)
    pattern = _HOSTILE_BUT_NEWLINE if keep_newlines else _HOSTILE
    return pattern.sub(_escape, s) if pattern.search(s) else s


def one_line(text: object) -> str:
    """Untrusted text for a one-line message: newlines become spaces, the rest as in
    :func:`visible`."""
    return visible(str(text).replace("\r\n", " ").replace("\n", " "))


_JSON_RAW = re.compile(f"[{_OTHERS}]")


def json_text_safe(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) that is safe to print or ``cat``: the
    characters of :func:`visible` that JSON leaves raw (DEL, C1, bidi controls, U+2028/2029)
    written as ``\\u`` escapes, which parse back to the same strings, and lone surrogates
    replaced by U+FFFD (they have no UTF-8 form, and strict parsers reject their escapes).
    Outside strings JSON text is ASCII, so every match is inside a string."""
    if not _JSON_RAW.search(text):
        return text
    return _JSON_RAW.sub(
        lambda m: "\ufffd" if 0xD800 <= ord(m.group()) <= 0xDFFF else f"\\u{ord(m.group()):04x}",
        text,
    )


def visible_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with :func:`visible` applied to each text column (only the distinct values that
    hold such a character are rewritten, the rest stays in Polars)."""
    import polars as pl

    out = []
    for name, dtype in frame.schema.items():
        if dtype not in (pl.String, pl.Categorical, pl.Enum):
            continue
        col = frame.get_column(name).cast(pl.String)
        bad = col.filter(col.str.contains(POLARS_HOSTILE)).unique()
        if bad.len():
            old = bad.to_list()
            out.append(col.replace(old, [visible(v) for v in old]).alias(name))
    return frame.with_columns(out) if out else frame


def no_formulas(frame: pl.DataFrame) -> pl.DataFrame:
    """Text cells starting with ``= + - @``, tab or CR get a leading ``'`` (the OWASP rule against
    CSV injection), so a spreadsheet shows ``=HYPERLINK(...)`` from a device name as text."""
    import polars as pl

    text = [n for n, t in frame.schema.items() if t == pl.String]
    return frame.with_columns(
        pl.when(pl.col(n).str.contains(r"^[=+\-@\t\r]"))
        .then("'" + pl.col(n))
        .otherwise(pl.col(n))
        .alias(n)
        for n in text
    )


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """A frame ready for a CSV file a person may open: formulas neutralised first (a leading tab
    or CR is what OWASP's rule looks for), then control characters made visible."""
    return visible_frame(no_formulas(frame))
