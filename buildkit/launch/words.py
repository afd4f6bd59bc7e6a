"""The job's words: what ``--env`` values and the command's arguments may say, and how each becomes shell text.

One grammar for every value a user hands a job (``--env K=V``, the words after ``--``, a site's ``env``):

* ``$NAME`` and ``${NAME}`` where NAME is a variable *this job defines* are read per task where the program
  starts (inside the container: steps.py says when). The job defines its scheduler's variables (``SLURM_*``;
  ``DLWS_*`` on Apulis), its framework's (``MASTER_ADDR``, ``RANK``… for ddp: each framework lists them), the
  names given with ``--env`` and the site's ``env``, and :data:`TASK_ENVIRONMENT`;
* a variable that only *another* job defines (``$MASTER_PORT`` without a framework that sets it,
  ``$SLURM_ARRAY_TASK_ID`` without ``--array``) is refused before anything is written: it would read as nothing;
* ``$$`` is a literal ``$`` (``'price$$5'`` reaches the program as ``price$5``), ``$~`` a literal ``~``;
  :func:`literal` writes any text so that it arrives as it is;
* ``~`` alone, or ``~/`` at the start, is the task's home folder (``$HOME``); a ``~`` elsewhere is literal;
* every other ``$`` reaches the program byte for byte: ``$f`` and ``$1`` of a ``sh -c`` script, awk's ``$1``,
  ``$(…)``, ``${X:-y}``, ``$?``; so do quotes, backticks, spaces, ``*``, ``;``. The program reads them, not ckit.

Nothing is ever evaluated as code: a value becomes one shell word, double-quoted when it names a job variable,
in which only those variables expand (no command substitution, no globbing, no word splitting).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .model import JobVariables
from .shell import escape_dq, q

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The task's own environment that every job has (and that guides' --env values extend: PATH=…:$PATH).
TASK_ENVIRONMENT = ("HOME", "USER", "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "TMPDIR", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Ref:
    """A variable named in a word (``HOME`` for a leading ``~``, with ``tilde`` set)."""

    name: str
    tilde: bool = False


Part = str | Ref


def parse(text: str, what: str, variables: JobVariables) -> tuple[Part, ...]:
    """``text`` as literal pieces and references to ``variables``; ``what`` names it in the error (``--env PATH``)."""
    parts: list[Part] = []
    pos, chunk = 0, []
    if text == "~" or text.startswith("~/"):
        parts.append(Ref("HOME", tilde=True))
        pos = 1
    while pos < len(text):
        char, rest = text[pos], text[pos + 1:]
        if char == "$" and rest[:1] in ("$", "~"):
            chunk.append(rest[0])
            pos += 2
            continue
        match = _reference(rest) if char == "$" else None
        name = match.group(1) if match and rest.startswith("{") else match.group(0) if match else ""
        if not name or not _named(name, text, what, variables):
            chunk.append(char)  # not the job's: the program reads it
            pos += 1
            continue
        if chunk:
            parts.append("".join(chunk))
            chunk = []
        parts.append(Ref(name))
        assert match is not None
        pos += 1 + match.end()
    if chunk:
        parts.append("".join(chunk))
    return tuple(parts)


def _reference(rest: str) -> re.Match[str] | None:
    return _BRACED.match(rest) if rest.startswith("{") else _NAME.match(rest)


def _named(name: str, text: str, what: str, variables: JobVariables) -> bool:
    """Whether ``$name`` is this job's variable; an error when only another job defines it."""
    if variables.defines(name):
        return True
    who = variables.elsewhere(name)
    if who is not None:
        raise ConfigError(f"{what} {text!r}: ${name} is set by {who}, not by this job, so it would read as nothing",
                          hint=f"use {who}, give it with --env {name}=VALUE, or write $${name} to pass the text "
                               "$" + f"{name} to a program that sets it itself")
    return False


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

