"""Text that comes from outside ckit (job names, profiles, paths, image labels, registry answers): shown on a
terminal without its control characters acting, and read as a number only when it is one in ASCII.

A job name or a site description may hold terminal escapes: OSC 52 writes the clipboard, OSC 0 the window
title, CSI moves the cursor, a bare CR or a bidi override hides what follows. :func:`shown` is the one place
that turns such text into something a terminal only displays; the CLI's printing layer passes every human
line through it (``--json`` stays exact: JSON escapes control characters itself).

``str.isdigit`` and ``int()`` accept every script's digits (``٣``, fullwidth ``３``, and ``²``, which ``int()``
then refuses): :func:`ascii_int` and :func:`ascii_float` are what ckit reads numbers with.
"""

from __future__ import annotations

import math
import re

# Unicode's control (Cc), format (Cf: bidi overrides and isolates, zero-width characters, the BOM), surrogate
# (Cs: an undecodable byte read with surrogateescape) and line/paragraph separator (Zl, Zp) characters, as of
# Unicode 14 (Python 3.11); a unit test compares this class with the running Python's unicodedata.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LINES = re.compile(UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))  # the class without \t and \n


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: object, *, lines: bool = False) -> str:
    """``text`` as a terminal may show it: every control, format and separator character written as an escape
    (``\\x1b``, ``\\r``, ``\\u202e``). With ``lines``, newlines and tabs stay (a message of several lines, a job
    script); without, a value stays on its line and in its column."""
    value = str(text)
    if value.isprintable():  # the usual case, decided in C
        return value
    return (_LINES if lines else UNSAFE).sub(_escape, value)


_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def ascii_int(text: str, *, signed: bool = False) -> int | None:
    """The whole number ``text`` spells in ASCII digits (a minus only when ``signed``), else None: never another
    script's digits, ``_`` separators, a plus or surrounding blanks, which ``int()`` would take."""
    if not _INT.fullmatch(text) or (not signed and text[0] == "-") or len(text) > 4300:
        return None
    return int(text)


def ascii_float(text: str) -> float | None:
    """The decimal number ``text`` spells in ASCII (``1``, ``0.5``, ``2e3``), else None: never ``nan``, ``inf``,
    another script's digits or ``_`` separators, which ``float()`` would take."""
    if not _FLOAT.fullmatch(text) or len(text) > 400:
        return None
    value = float(text)
    return value if math.isfinite(value) else None  # 1e999
