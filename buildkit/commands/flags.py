"""Global options anywhere on the command line: ``ckit show demo --recipes DIR -q`` means
``ckit --recipes DIR -q show demo``.

Click reads a group's options only before the subcommand. Users of sbatch, git and docker put ``-q``,
``--debug`` and ``--recipes DIR`` where they like, so the options are moved in front before click parses,
unless they are the value of an option (``--name --debug``), come after ``--`` or after the first word of a
command that takes the rest of the line as its program (``ckit launch --site x python train.py --debug``: the
job's own command line), or are an option of the subcommand itself (a command may define its own ``-q``).
"""

from __future__ import annotations

from typing import Any

GLOBAL_FLAGS = ("-q", "--quiet", "--debug")
GLOBAL_WITH_VALUE = ("--recipes", "--sites")


def _takes_value(command: Any, token: str) -> bool:
    """Whether ``token`` is an option of ``command`` that consumes the next word."""
    for param in getattr(command, "params", ()):
        if token in getattr(param, "opts", ()) or token in getattr(param, "secondary_opts", ()):
            return not (getattr(param, "is_flag", False) or getattr(param, "count", False))
    return False


def _defines(command: Any, token: str) -> bool:
    return any(token in getattr(p, "opts", ()) or token in getattr(p, "secondary_opts", ())
               for p in getattr(command, "params", ()))


def _global_with_value(token: str) -> str | None:
    """``--recipes`` for ``--recipes`` and ``--recipes=DIR``; None for anything else."""
    name = token.partition("=")[0]
    return name if name in GLOBAL_WITH_VALUE else None


def _subcommand(group: Any, args: list[str]) -> tuple[int, Any]:
    """Index and object of the subcommand in ``args`` (-1 when there is none)."""
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return -1, None
        if token in GLOBAL_WITH_VALUE:
            i += 2
            continue
        if not token.startswith("-"):
            command = getattr(group, "commands", {}).get(token)
            return (i, command) if command is not None else (-1, None)
        i += 1
    return -1, None


def _program_starts(command: Any, token: str) -> bool:
    """Whether ``token``, a word that is no option's value, starts the job's own command line: a command that
    does not intersperse options (``ckit launch``, ``ckit shell``) takes every later word as the program's."""
    settings = getattr(command, "context_settings", None) or {}
    return not token.startswith("-") and settings.get("allow_interspersed_args") is False


def hoist_global_flags(args: list[str], group: Any) -> list[str]:
    """``args`` with the global options that follow the subcommand moved in front of it."""
    start, command = _subcommand(group, args)
    if start < 0:
        return list(args)
    hoisted: list[str] = []
    rest: list[str] = []
    i = start + 1
    while i < len(args):
        token = args[i]
        if token == "--" or _program_starts(command, token):
            rest += args[i:]
            break
        if hasattr(command, "commands") and not token.startswith("-") and token in command.commands:
            command = command.commands[token]  # e.g. `ckit sites show`: the options are the leaf's
        name = _global_with_value(token)
        if token in GLOBAL_FLAGS and not _defines(command, token):
            hoisted.append(token)
        elif name and not _defines(command, name):
            hoisted += args[i:i + 1 + (token == name)]
            i += token == name
        else:
            rest.append(token)
            if "=" not in token and _takes_value(command, token) and i + 1 < len(args):
                rest.append(args[i + 1])
                i += 1
        i += 1
    return [*args[:start], *hoisted, args[start], *rest]
