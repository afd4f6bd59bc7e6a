"""The job's words: what ``--env`` values and the command's arguments may say, and how each becomes shell text.

One grammar for every value a user hands a job (``--env K=V``, the words after ``--``, a site's ``env``):

* ``$NAME`` and ``${NAME}`` name a variable of the job (``$MASTER_ADDR``, ``${SLURM_PROCID}``, ``$PATH``); it is
  read where the program starts, per task on the node (inside the container: steps.py says when);
  an unset variable reads as nothing, as in the shell;
* ``$$`` is a literal ``$`` (``'price$$5'`` reaches the program as ``price$5``), ``$~`` a literal ``~``;
  :func:`literal` writes any text so that it arrives as it is;
* ``~`` alone, or ``~/`` at the start, is the task's home folder (``$HOME``); a ``~`` elsewhere is literal;
* every other ``$`` is refused before anything is written (``$(…)``, ``$1``, ``${X:-y}``, a lone ``$``),
  since a shell would run or rewrite it; everything else is literal: quotes, backticks, spaces, ``*``, ``;``.

Nothing is ever evaluated as code: a value becomes one double-quoted shell word in which only the named
variables expand (no command substitution, no globbing, no word splitting).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .shell import escape_dq, q

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
HINT = ("ckit expands only $NAME and ${NAME} (the job's variables, per task) and a leading ~; "
        "write $$ for a literal $ (e.g. '$$(date)' reaches the program as $(date))")


@dataclass(frozen=True)
class Ref:
    """A variable named in a word (``HOME`` for a leading ``~``, with ``tilde`` set)."""

    name: str
    tilde: bool = False


Part = str | Ref


def parse(text: str, what: str) -> tuple[Part, ...]:
    """``text`` as literal pieces and references; ``what`` names it in the error (``--env PATH``)."""
    parts: list[Part] = []
    pos, chunk = 0, []
    if text == "~" or text.startswith("~/"):
        parts.append(Ref("HOME", tilde=True))
        pos = 1
    while pos < len(text):
        char = text[pos]
        if char != "$":
            chunk.append(char)
            pos += 1
            continue
        rest = text[pos + 1:]
        if rest[:1] in ("$", "~"):
            chunk.append(rest[0])
            pos += 2
            continue
        match = _BRACED.match(rest) if rest.startswith("{") else _NAME.match(rest)
        if match is None:
            raise ConfigError(f"{what} {text!r}: {_why(rest)}", hint=HINT)
        if chunk:
            parts.append("".join(chunk))
            chunk = []
        parts.append(Ref(match.group(1) if rest.startswith("{") else match.group(0)))
        pos += 1 + match.end()
    if chunk:
        parts.append("".join(chunk))
    return tuple(parts)


def _why(rest: str) -> str:
    if rest.startswith("("):
        return "$(…) would run a command, which ckit never does"
    if rest.startswith("{"):
        return "${…} takes a variable name only (no defaults, no operators)"
    if rest[:1].isdigit() or rest[:1] in ("@", "*", "#", "?", "!", "-"):
        return f"${rest[:1]} is a shell's own parameter, not a variable of the job"
    return "a $ that names no variable"


def literal(text: str) -> str:
    """The word that reaches a program as ``text`` exactly (every ``$`` doubled; a leading ``~`` kept)."""
    escaped = text.replace("$", "$$")
    return "$" + escaped if escaped == "~" or escaped.startswith("~/") else escaped


def refs(parts: Sequence[Part]) -> tuple[str, ...]:
    return tuple(p.name for p in parts if isinstance(p, Ref))


def text_of(parts: Sequence[Part]) -> str:
    """The literal value of parts without references."""
    assert not refs(parts)
    return "".join(p for p in parts if isinstance(p, str))


def sh_word(parts: Sequence[Part], home: Callable[[tuple[Part, ...]], str] | None = None) -> str:
    """One shell word: single-quoted when literal, else double-quoted with ``${NAME}`` where a variable is named.
    ``home`` renders a leading ``~`` with the parts after it (default: ``"${HOME}…"``)."""
    if not refs(parts):
        return q(text_of(parts))
    if isinstance(parts[0], Ref) and parts[0].tilde and home is not None:
        return home(tuple(parts[1:]))
    out = ['"']
    for part in parts:
        out.append("${" + part.name + "}" if isinstance(part, Ref) else escape_dq(part))
    out.append('"')
    return "".join(out)

