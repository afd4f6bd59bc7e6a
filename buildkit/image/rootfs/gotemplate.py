"""The small part of Go's text/template that ckit's generated scripts use, with Go's whitespace rules.

Supported actions: ``{{ .Name }}``, ``{{ if .Name }}``, ``{{ else if .Name }}``, ``{{ else }}``, ``{{ end }}``;
``{{-`` trims the whitespace before an action and ``-}}`` the whitespace after it. A value is true when it
is a non-empty string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...errors import CkitError

_ACTION = re.compile(r"\{\{(- )?\s*(.*?)\s*( -)?\}\}", re.S)
_WS = " \t\r\n"


def _tokens(template: str) -> list[tuple[str, str]]:
    """[("text", …) | ("action", …)], with the trim markers applied to the neighbouring text."""
    tokens: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for match in _ACTION.finditer(template):
        text = template[pos:match.start()]
        if trim_next:
            text = text.lstrip(_WS)
        if match.group(1):
            text = text.rstrip(_WS)
        tokens += [("text", text), ("action", match.group(2))]
        pos, trim_next = match.end(), bool(match.group(3))
    tail = template[pos:]
    tokens.append(("text", tail.lstrip(_WS) if trim_next else tail))
    return tokens


def render(template: str, data: Mapping[str, str]) -> str:
    """Render ``template`` with string ``data``; unknown syntax raises CkitError."""
    out: list[str] = []
    # Each frame: (emitting in the enclosing block, this branch emits, some branch already taken).
    stack: list[tuple[bool, bool, bool]] = []
    emitting = True

    def value(ref: str) -> str:
        if not ref.startswith(".") or ref[1:] not in data:
            raise CkitError(f"template refers to unknown value {ref!r}")
        return data[ref[1:]]

    for kind, text in _tokens(template):
        if kind == "text":
            if emitting:
                out.append(text)
            continue
        words = text.split()
        if words[:1] == ["if"] and len(words) == 2:
            taken = bool(value(words[1]))
            stack.append((emitting, taken, taken))
            emitting = emitting and taken
        elif words[:2] == ["else", "if"] and len(words) == 3 and stack:
            outer, _, done = stack.pop()
            taken = not done and bool(value(words[2]))
            stack.append((outer, taken, done or taken))
            emitting = outer and taken
        elif words == ["else"] and stack:
            outer, _, done = stack.pop()
            stack.append((outer, not done, True))
            emitting = outer and not done
        elif words == ["end"] and stack:
            emitting = stack.pop()[0]
        elif len(words) == 1:
            if emitting:
                out.append(value(words[0]))
        else:
            raise CkitError(f"unsupported template action {{{{{text}}}}}")
    if stack:
        raise CkitError("template has an unclosed {{ if }}")
    return "".join(out)
