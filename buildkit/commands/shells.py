"""The shells ckit completes in: their completion scripts (typer's), the shell ckit runs under, and installing the
script for it (``ckit --install-completion``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..outside import shown

SHELLS = ("bash", "zsh", "fish")
PROG, COMPLETE_VAR = "ckit", "_CKIT_COMPLETE"


def script(shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    # typer exports it from its module without naming it in __all__
    from typer.completion import get_completion_script  # type: ignore[attr-defined]

    return str(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell))


def current() -> str:
    """The shell to complete in: the nearest shell among ckit's parents, else the login shell (``$SHELL``). Run
    from a make target, an IDE or ``bash -c ckit …`` (which execs ckit), no parent may be a shell; from ``sh``,
    one ckit cannot complete in."""
    import shellingham

    try:
        found = str(shellingham.detect_shell()[0])
    except shellingham.ShellDetectionFailure:
        found = ""
    login = Path(os.environ.get("SHELL", "")).name
    for name in (found, login):
        if name in SHELLS:
            return name
    names = " or ".join(shown(name) for name in dict.fromkeys((found, login)) if name) or "not known"
    raise ConfigError(f"ckit completes in {', '.join(SHELLS)}; this shell is {names}",
                      hint="name the shell: ckit completion bash > ~/.ckit-completion.bash, then source that file "
                           "from your shell's startup file")


def install() -> tuple[str, Path]:
    """Install the script for the current shell where it loads it (typer's places: ``~/.bash_completions/`` sourced
    from ``~/.bashrc``, zsh's ``~/.zfunc``, fish's ``completions/``); the shell and the file written."""
    from typer.completion import install as typer_install  # type: ignore[attr-defined]

    shell, path = typer_install(shell=current(), prog_name=PROG, complete_var=COMPLETE_VAR)
    return str(shell), Path(path)
