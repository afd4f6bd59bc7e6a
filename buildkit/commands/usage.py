"""Usage errors in ckit's words: ``ckit: error: …`` and a ``hint:`` that is the user's own line, corrected.

Click words a usage error its own way (``No such option: --nv (Possible options: --env, --name, --venv)``)
and suggests by spelling only, which misleads when the word is a habit from another tool. Here every usage
error becomes one line naming the command and the option, and a hint that works when pasted: the line as
typed with the typo corrected or the habit translated (``--gpus 8 -N 2`` → ``--gpus-per-node 4``), else the
command's ``--help``. The habits ckit accepts as they are (``-t`` for ``--tag``, ``--bind`` for ``--mount``)
are aliases on the options themselves.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..outside import shown
from .flags import GLOBAL_WITH_VALUE

_NO_SUCH_COMMAND = re.compile(r"No such command '(.+?)'")
ARGV_KEY = "ckit.argv"  # ctx.meta: the words as typed, before the global options were moved in front

Translate = Callable[[str | None, Sequence[str]], list[str] | None]


@dataclass(frozen=True)
class Habit:
    """An option of another tool that ckit says differently: why, and the words that say it in ckit."""

    commands: tuple[str, ...]
    takes_value: bool
    why: str
    translate: Translate


def _nodes(args: Sequence[str]) -> int | None:
    """The node count on the line (-N/--nodes, default 1); None when it is not a plain number."""
    for i, token in enumerate(args):
        if token == "--":
            break
        value = token.partition("=")[2] if token.startswith("--nodes=") else (
            args[i + 1] if token in ("-N", "--nodes") and i + 1 < len(args) else None)
        if value is not None:
            return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else None
    return 1


def _per_node(flag: str) -> Translate:
    """Slurm counts some resources per job (``--gpus 8``, ``-n 16``); ckit per node: divided by -N when even."""

    def translate(value: str | None, args: Sequence[str]) -> list[str] | None:
        nodes = _nodes(args)
        if value is None or not (value.isascii() and value.isdigit()) or not nodes or int(value) % nodes:
            return None
        return [flag, str(int(value) // nodes)]

    return translate


def _gpus(value: str | None, args: Sequence[str]) -> list[str] | None:
    return [] if value == "all" else _per_node("--gpus-per-node")(value, args)


def _gres(value: str | None, args: Sequence[str]) -> list[str] | None:
    kind, _, count = (value or "").rpartition(":")
    if kind.split(":")[0] != "gpu" or not (count.isascii() and count.isdigit()):
        return None
    return ["--gpus-per-node", count]


def _each_mount(value: str | None, args: Sequence[str]) -> list[str] | None:
    return [word for part in (value or "").split(",") if part for word in ("--mount", part)] or None


_JOB = ("launch", "shell")
HABITS: dict[str, Habit] = {
    "--nv": Habit(_JOB, False, "ckit gives the container the job's GPUs itself (Singularity/Apptainer --nv, "
                               "Pyxis, podman); it asks for the partition's GPUs unless --gpus-per-node N says "
                               "otherwise", lambda value, args: []),
    "--gpus": Habit(_JOB, True, "ckit asks for GPUs per node with --gpus-per-node (Slurm's --gpus counts the "
                                "whole job's; docker's --gpus all is the partition's GPUs, ckit's default)", _gpus),
    "--gres": Habit(_JOB, True, "ckit asks for GPUs per node with --gpus-per-node N (the gres gpu:N)", _gres),
    "-n": Habit(("launch",), True, "ckit asks for tasks per node with --tasks-per-node (Slurm's -n counts the "
                                   "whole job's)", _per_node("--tasks-per-node")),
    "--ntasks": Habit(("launch",), True, "ckit asks for tasks per node with --tasks-per-node (Slurm's --ntasks "
                                         "counts the whole job's)", _per_node("--tasks-per-node")),
    "--gloo-interface": Habit(("launch",), True, "the interface of Gloo is --network-interface, with --gloo",
                              lambda value, args: ["--gloo", "--network-interface", value] if value else None),
    "--container-image": Habit(_JOB, True, "ckit writes Pyxis's srun options itself: the image is --image",
                               lambda value, args: ["--image", value] if value else None),
    "--container-mounts": Habit(_JOB, True, "ckit writes Pyxis's srun options itself: each mount is a --mount",
                                _each_mount),
    "-v": Habit(_JOB, True, "a bind mount is --mount SRC:DST[:ro] (also --bind)",
                lambda value, args: ["--mount", value] if value else None),
    "--volume": Habit(_JOB, True, "a bind mount is --mount SRC:DST[:ro] (also --bind)",
                      lambda value, args: ["--mount", value] if value else None),
}


@dataclass(frozen=True)
class UsageProblem:
    """A usage error as ckit prints every error: ``ckit: error: MESSAGE`` and ``hint: HINT`` (exit 2)."""

    message: str
    hint: str

    def show(self, file: IO[Any] | None = None) -> None:
        import sys

        (file or sys.stderr).write(shown(f"ckit: error: {self.message}\n  hint: {self.hint}", lines=True) + "\n")


def _is(err: BaseException, name: str) -> bool:
    """Whether ``err`` is click's exception ``name`` (the click typer carries, whichever module that is)."""
    return any(cls.__name__ == name for cls in type(err).__mro__)


def is_usage_error(err: BaseException) -> bool:
    return _is(err, "UsageError")


def reword(err: Any, group_ctx: Any) -> None:
    """Make click print the usage error ``err`` in ckit's words (click calls its ``show`` before exit 2).
    ``group_ctx``: the context of ckit's own group, for an error click raised without one."""
    object.__setattr__(err, "show", worded(err, group_ctx).show)


def _path(group_ctx: Any, args: Sequence[str]) -> str:
    """``ckit sites show``: the command ``args`` name (for an error that came without its context)."""
    words, command, skip = [group_ctx.command_path], group_ctx.command, False
    for token in args:
        if skip or token.startswith("-"):
            skip = token in GLOBAL_WITH_VALUE
            continue
        command = getattr(command, "commands", {}).get(token)
        if command is None:
            break
        words.append(token)
    return " ".join(words)


def _line(args: Sequence[str]) -> str:
    return "`" + shlex.join(["ckit", *args]) + "`"


def _replaced(args: Sequence[str], name: str, takes_value: bool,
              words: Callable[[str | None], list[str] | None]) -> list[str] | None:
    """``args`` with the option ``name`` (and its value) replaced by ``words(value)``; None when it is not
    found as typed or has no replacement."""
    for i, token in enumerate(args):
        if token == "--":
            return None
        if token != name and not (token.startswith(name + "=") and name.startswith("--")):
            continue
        if token == name and takes_value and i + 1 >= len(args):
            return None
        value = token.partition("=")[2] if token != name else (args[i + 1] if takes_value else None)
        new = words(value)
        if new is None:
            return None
        end = i + 1 + (token == name and takes_value)
        return [*args[:i], *new, *args[end:]]
    return None


def _options(ctx: Any) -> dict[str, bool]:
    """The long options of the command of ``ctx``: whether each takes a value."""
    command = ctx.command if ctx is not None else None
    return {o: not (p.is_flag or p.count) if hasattr(p, "is_flag") else True
            for p in getattr(command, "params", ()) for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


def _followed(args: Sequence[str], name: str) -> bool:
    """Whether the word after ``name`` in ``args`` can be its value."""
    where = args.index(name) if name in args else len(args)
    return where + 1 < len(args) and not args[where + 1].startswith("-")


def _no_such_option(err: Any, path: str, args: Sequence[str], help_hint: str) -> UsageProblem:
    name = err.option_name
    leaf = path.rsplit(" ", 1)[-1]
    habit = HABITS.get(name)
    if habit is not None and leaf in habit.commands:
        fixed = _replaced(args, name, habit.takes_value, lambda value: habit.translate(value, args))
        hint = f"run {_line(fixed)}" if fixed is not None else help_hint
        return UsageProblem(f"{path}: {name} is not an option of ckit: {habit.why}", hint)
    options = _options(err.ctx)
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.7) if name.startswith("--") else []
    if not close:
        return UsageProblem(f"{path}: no such option {name}", help_hint)
    # an option that takes a value replaces the typo only where a value follows it (`--ngcc 24.06`)
    fixed = _replaced(args, name, False, lambda value: [close[0] + (f"={value}" if value is not None else "")]
                      if value is not None or not options[close[0]] or _followed(args, name) else None)
    hint = f"did you mean {close[0]}? run {_line(fixed)}" if fixed is not None else \
        f"did you mean {close[0]}? {help_hint}"
    return UsageProblem(f"{path}: no such option {name}", hint)


def _no_such_command(err: Any, name: str, path: str, args: Sequence[str]) -> UsageProblem:
    group = err.ctx.command if err.ctx is not None else None
    close = difflib.get_close_matches(name, sorted(getattr(group, "commands", {})), n=1, cutoff=0.6)
    fixed = _replaced(args, name, False, lambda value: [close[0]]) if close else None
    listing = f"`{path} --help` lists the commands"
    hint = f"did you mean {close[0]}? run {_line(fixed)}" if fixed is not None else listing
    return UsageProblem(f"{path}: no such command {name!r}", hint)


def worded(err: Any, group_ctx: Any) -> UsageProblem:
    """The usage error ``err`` in ckit's words, with a hint that works when pasted."""
    ctx = err.ctx
    args: list[str] = list(group_ctx.meta.get(ARGV_KEY, ()))
    path = ctx.command_path if ctx is not None else _path(group_ctx, args)
    help_hint = f"`{path} --help` lists its options"
    if _is(err, "NoSuchOption"):
        return _no_such_option(err, path, args, help_hint)
    command = getattr(err, "command_name", None) or _NO_SUCH_COMMAND.match(str(err.message))
    if command:  # click's NoSuchCommand (8.4 and later), or the UsageError earlier versions raise
        return _no_such_command(err, command if isinstance(command, str) else command[1], path, args)
    text = err.format_message().rstrip(".")
    return UsageProblem(f"{path}: {text[:1].lower()}{text[1:]}", help_hint)
