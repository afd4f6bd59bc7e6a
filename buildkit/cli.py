"""Entry point of the ``ckit`` command: registers the commands and maps errors to exit codes."""

from __future__ import annotations

import importlib
import sys
import traceback

from .cliapp import SETTINGS, app, stderr
from .errors import CkitError

# Command modules in the order `ckit --help` lists them; importing one registers its commands on ``app``.
COMMAND_MODULES = ("recipes", "build", "convert", "inspect", "registry", "sites", "launch", "jobs")
for _module in COMMAND_MODULES:
    importlib.import_module(f"{__package__}.commands.{_module}")


def main(argv: list[str] | None = None) -> int:
    """Run ckit; return the exit code (usage errors 2, CkitError subclasses their own code)."""
    try:
        app(args=argv if argv is not None else sys.argv[1:], prog_name="ckit", standalone_mode=True)
    except SystemExit as done:
        if _caused_by_interrupt(done):  # typer turns Ctrl-C into a silent exit 130
            stderr.print("ckit: interrupted", markup=False)
            return 130
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except CkitError as err:
        if SETTINGS.debug:
            traceback.print_exc()
        stderr.print(f"ckit: error: {err}", markup=False, style="red")
        return err.exit_code
    except KeyboardInterrupt:
        stderr.print("ckit: interrupted", markup=False)
        return 130
    return 0


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
