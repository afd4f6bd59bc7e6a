"""``ckit completion bash|zsh|fish``: the shell completion script, for the shell named (not the one running).

``ckit --install-completion`` installs it for the current shell; this command suits a module file, a
Dockerfile or a dotfiles repository. Completion knows commands, options and stack names.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .app import app, say
from .shells import SHELLS, script


@app.command("completion")
def completion(
    shell: Annotated[str, typer.Argument(metavar="bash|zsh|fish", help="The shell to complete in.")],
) -> None:
    """Print the shell completion script: `source <(ckit completion bash)`, or save it where your shell
    looks (e.g. `ckit completion fish > ~/.config/fish/completions/ckit.fish`)."""
    if shell not in SHELLS:
        raise typer.BadParameter(f"{shell!r}: choose one of {', '.join(SHELLS)}", param_hint="SHELL")
    say(script(shell))
