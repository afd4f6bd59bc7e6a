"""Global flags anywhere on the command line: ``ckit build demo -q`` means ``ckit -q build demo``.

Click reads a group's options only before the subcommand. Users of sbatch, git and docker put ``-q`` and
``--debug`` where they like, so the flags are moved in front before click parses, unless they are the value
of an option (``--name --debug``), come after ``--`` (the job's own command line) or are an option of the
subcommand itself (a command may define its own ``-q``).
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


def hoist_global_flags(args: list[str], group: Any) -> list[str]:
    """``args`` with -q/--quiet/--debug that follow the subcommand moved in front of it."""
    start, command = _subcommand(group, args)
    if start < 0:
        return list(args)
    hoisted: list[str] = []
    rest: list[str] = []
    i = start + 1
    while i < len(args):
        token = args[i]
        if token == "--":
            rest += args[i:]
            break
        if hasattr(command, "commands") and not token.startswith("-") and token in command.commands:
            command = command.commands[token]  # e.g. `ckit sites show`: the options are the leaf's
        if token in GLOBAL_FLAGS and not _defines(command, token):
            hoisted.append(token)
        else:
            rest.append(token)
            if "=" not in token and _takes_value(command, token) and i + 1 < len(args):
                rest.append(args[i + 1])
                i += 1
        i += 1
    return [*args[:start], *hoisted, args[start], *rest]
