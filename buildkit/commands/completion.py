"""``ckit completion bash|zsh|fish``: the shell completion script, for the shell named (not the one running).

``ckit --install-completion`` installs it for the current shell; this command suits a module file, a
Dockerfile or a dotfiles repository. Completion knows commands, options and stack names.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .app import app, say

SHELLS = ("bash", "zsh", "fish")


@app.command("completion")
def completion(
    shell: Annotated[str, typer.Argument(metavar="bash|zsh|fish", help="The shell to complete in.")],
) -> None:
    """Print the shell completion script: `source <(ckit completion bash)`, or save it where your shell
    looks (e.g. `ckit completion fish > ~/.config/fish/completions/ckit.fish`)."""
    # typer exports these from its module without naming them in __all__
    from typer.completion import completion_init, get_completion_script  # type: ignore[attr-defined]

    if shell not in SHELLS:
        raise typer.BadParameter(f"{shell!r}: choose one of {', '.join(SHELLS)}", param_hint="SHELL")
    completion_init()
    say(get_completion_script(prog_name="ckit", complete_var="_CKIT_COMPLETE", shell=shell))
